// reprise demo page: the speech pane. POST /v1/audio/speech with
// stream_format "sse"; each speech.audio.delta (16-bit little-endian mono
// PCM at 24 kHz, base64) is played through Web Audio as it arrives, right
// after the previous one, so a drop and resume continues mid-sentence with
// no repeated and no missing sample.
import { RangeSession, Session, SSEParser, aheadHint, savedDuplicates, savedSummary } from './session.js';

const SAMPLE_RATE = 24000;
const WAV_HEADER = 44; // the canonical RIFF header before the PCM

const $ = (id) => document.getElementById(id);

function text(id, v) {
  const el = $(id);
  const s = v == null ? '' : String(v);
  if (el.textContent !== s) el.textContent = s;
}

function fromBase64(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

// FNV is a running 32-bit FNV-1a hash: what the page played, in order,
// compared with what the journal holds.
export class FNV {
  constructor() {
    this.h = 0x811c9dc5;
  }

  push(bytes) {
    let h = this.h;
    for (let i = 0; i < bytes.length; i++) {
      h ^= bytes[i];
      h = Math.imul(h, 0x01000193) >>> 0;
    }
    this.h = h;
  }

  hex() {
    return this.h.toString(16).padStart(8, '0');
  }
}

// audioOf is the PCM of a speech event's data, or null for another event.
function audioOf(data) {
  const j = JSON.parse(data);
  if (j && j.type === 'speech.audio.delta' && typeof j.audio === 'string') return fromBase64(j.audio);
  return null;
}

function isDone(data) {
  const j = JSON.parse(data);
  return !!j && j.type === 'speech.audio.done';
}

export class SpeechPane {
  constructor({ settings, log }) {
    this.log = log;
    this.ctx = null; // AudioContext, made on the first click (autoplay rules)
    this.clearAudio();
    const common = { path: '/v1/audio/speech', settings, log, reset: () => this.clearAudio(), changed: () => this.render() };
    this.sse = new Session({ ...common, apply: (ev) => this.apply(ev) });
    this.raw = new RangeSession({ ...common, bytes: (b, off) => this.rawBytes(b, off), done: () => this.verify() });
    this.session = this.sse;
    $('sp-speak').addEventListener('click', () => this.speak());
    $('sp-drop').addEventListener('click', () => this.session.drop('dropped by you — the server keeps generating', false));
    this.render();
  }

  clearAudio() {
    this.played = 0; // bytes fed to Web Audio; the next chunk's offset
    this.chunks = []; // [offset, length] of every chunk played
    this.hash = new FNV();
    this.nextTime = 0;
    this.generated = null; // bytes the journal holds, once read back
    this.generatedHash = '';
    this.carry = null; // the odd byte of a raw read, until the next
  }

  speak() {
    if (!this.ctx) {
      const AC = window.AudioContext || window.webkitAudioContext;
      if (AC) this.ctx = new AC({ sampleRate: SAMPLE_RATE });
    }
    if (this.ctx && this.ctx.state === 'suspended') this.ctx.resume().catch(() => {});
    this.clearAudio();
    this.sse.stop();
    this.raw.stop();
    const raw = $('sp-format-raw').checked;
    this.session = raw ? this.raw : this.sse;
    const body = { model: 'demo', input: $('sp-input').value, voice: 'alloy' };
    if (raw) body.response_format = 'wav';
    else Object.assign(body, { response_format: 'pcm', stream_format: 'sse' });
    this.session.start(JSON.stringify(body));
  }

  // rawBytes takes the bytes of a raw WAV answer from offset off: the
  // header is skipped, the PCM played in whole samples (a read may end
  // inside one).
  rawBytes(b, off) {
    let data = b;
    if (off < WAV_HEADER) data = b.subarray(Math.min(WAV_HEADER - off, b.length));
    if (this.carry) {
      const joined = new Uint8Array(this.carry.length + data.length);
      joined.set(this.carry);
      joined.set(data, this.carry.length);
      data = joined;
      this.carry = null;
    }
    const even = data.length & ~1;
    if (even < data.length) this.carry = data.slice(even);
    if (even > 0) this.play(data.subarray(0, even));
  }

  apply(ev) {
    if (isDone(ev.data)) {
      this.verify();
      return true;
    }
    const pcm = audioOf(ev.data);
    if (pcm) this.play(pcm);
    return false;
  }

  // play schedules pcm right after what was scheduled before.
  play(pcm) {
    this.chunks.push([this.played, pcm.length]);
    this.played += pcm.length;
    this.hash.push(pcm);
    const ctx = this.ctx;
    if (!ctx) return;
    const n = pcm.length >> 1;
    if (n === 0) return;
    const buf = ctx.createBuffer(1, n, SAMPLE_RATE);
    const ch = buf.getChannelData(0);
    const dv = new DataView(pcm.buffer, pcm.byteOffset, pcm.byteLength);
    for (let i = 0; i < n; i++) ch[i] = dv.getInt16(2 * i, true) / 32768;
    const src = ctx.createBufferSource();
    src.buffer = buf;
    src.connect(ctx.destination);
    // A drop longer than the buffered audio leaves a pause, never a skip.
    const at = Math.max(this.nextTime, ctx.currentTime + 0.05);
    src.start(at);
    this.nextTime = at + buf.duration;
  }

  // verify reads the key's stream back from the journal (a read of the
  // Location: no upstream call, no duplicate) and sums its audio: the bytes
  // the server generated, to compare with the bytes played.
  async verify() {
    const loc = this.session.location;
    const key = this.session.key;
    let bytes = 0;
    const hash = new FNV();
    try {
      if (this.session === this.raw) {
        // The stored WAV, whole: its PCM after the header.
        const res = await fetch(loc, { cache: 'no-store' });
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
        const pcm = new Uint8Array(await res.arrayBuffer()).subarray(WAV_HEADER);
        bytes = pcm.length;
        hash.push(pcm);
        return this.verified(key, bytes, hash);
      }
      const res = await fetch(loc, { headers: { Accept: 'text/event-stream' }, cache: 'no-store' });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const parser = new SSEParser((ev) => {
        if (ev.type !== 'message' && ev.type !== 'speech.audio.delta') return;
        const pcm = audioOf(ev.data);
        if (pcm) {
          bytes += pcm.length;
          hash.push(pcm);
        }
      });
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(dec.decode(value, { stream: true }));
      }
      parser.push(dec.decode());
      parser.end();
    } catch (e) {
      this.log(`could not read the journal back: ${e.message}`);
      return;
    }
    this.verified(key, bytes, hash);
  }

  verified(key, bytes, hash) {
    if (key !== this.session.key) return;
    this.generated = bytes;
    this.generatedHash = hash.hex();
    const same = bytes === this.played && this.generatedHash === this.hash.hex();
    this.log(same
      ? `played ${this.played} bytes = ${bytes} bytes in the journal, same bytes in the same order`
      : `MISMATCH: played ${this.played} bytes (fnv ${this.hash.hex()}), the journal holds ${bytes} (fnv ${this.generatedHash})`);
    this.render();
  }

  // renderMeter shows what the client has of the answer, in one unit: a
  // raw answer's bytes of its size (Content-Length, Content-Range), else
  // events of those the server journaled. A complete answer fills it.
  renderMeter(s, st) {
    const p = $('sp-progress');
    if (s === this.raw) {
      p.setAttribute('aria-label', 'speech: bytes received of the answer');
      if (s.total > 0) {
        p.max = s.total;
        p.value = Math.min(s.offset, s.total);
      } else if (s.state === 'done' || s.state === 'idle' || s.state === 'error') {
        p.max = Math.max(s.offset, 1);
        p.value = s.state === 'done' ? p.max : 0;
      } else {
        p.removeAttribute('value'); // size unknown: indeterminate until the end
      }
      return;
    }
    p.setAttribute('aria-label', 'speech: events received of those journaled');
    p.max = Math.max(st.events || 0, s.count, 1);
    p.value = s.state === 'done' ? p.max : s.count;
  }

  render() {
    const s = this.session;
    const st = s.status || {};
    text('sp-conn', s.state);
    $('sp-conn').dataset.state = s.state;
    const err = $('sp-error');
    err.hidden = !s.error || s.state !== 'error';
    text('sp-error', err.hidden ? '' : s.error);
    text('sp-played', this.played.toLocaleString('en-US'));
    text('sp-generated', this.generated == null ? '' : this.generated.toLocaleString('en-US'));
    text('sp-events-label', s === this.raw ? 'Body reads · journal chunks' : 'Events');
    text('sp-count', s.count);
    text('sp-server-events', st.events);
    // A raw answer's reads and the journal's chunks are not the same unit.
    text('sp-ahead', s === this.raw ? '' : aheadHint(s));
    text('sp-generation', st.generation);
    text('sp-gens-naive', s.key ? (st.generation || 1) + s.drops + savedDuplicates(st.saved) : '');
    const saved = savedSummary(st.saved);
    text('sp-saved', saved ? `saved by reprise: ${saved}` : '');
    text('sp-drops', s.drops);
    text('sp-dupes', s.dupes);
    this.renderMeter(s, st);
    let verdict = 'Chunks play through Web Audio as they arrive.';
    if (this.generated != null) {
      verdict = this.generated === this.played && this.generatedHash === this.hash.hex()
        ? `✓ ${this.played.toLocaleString('en-US')} bytes played = ${this.generated.toLocaleString('en-US')} generated, after ${s.drops} drop${s.drops === 1 ? '' : 's'}: nothing repeated, nothing missing`
        : `✗ played ${this.played} bytes, generated ${this.generated}`;
    } else if (s.state === 'streaming' || s.state === 'resuming' || s.state === 'dropped') {
      verdict = `Playing… ${(this.played / (2 * SAMPLE_RATE)).toFixed(2)} s of audio so far.`;
    }
    text('sp-verdict', verdict);
    $('sp-verdict').dataset.ok = this.generated == null ? '' : String(this.generated === this.played);
    $('sp-drop').disabled = !s.conn;
  }
}
