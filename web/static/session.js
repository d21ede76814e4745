// reprise demo page: one streamed generation under one Idempotency-Key, read
// over SSE or WebSocket, dropped and resumed. Plain JavaScript module, no
// build step, no dependencies.
//
//   POST <path>                      Idempotency-Key header, SSE answer, Location
//   GET  <Location>&last_event_id=N  EventSource: resumes after event N
//   GET  <Location>&last_event_id=N  WebSocket upgrade: one JSON frame per event
//   GET  <Location>                  Accept: application/json: the key's status

// SSEParser parses an event stream read from a fetch body (EventSource parses
// by itself).
//
// It follows the WHATWG rules: lines end with \r\n, \n or \r; a blank line
// dispatches the event; "data" lines are joined with \n; a line that starts
// with ":" is a comment; one leading space after the colon is dropped. Unlike
// EventSource, the id of an event is the id given in that event only (empty
// when the event has no id line), which is what deduplication needs.
export class SSEParser {
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buf = '';
    this.resetEvent();
  }

  resetEvent() {
    this.data = [];
    this.type = '';
    this.id = null;
  }

  // push feeds decoded text. Chunks may split lines anywhere, also between
  // the \r and the \n of a \r\n.
  push(text) {
    this.buf += text;
    let start = 0;
    for (;;) {
      let i = start;
      const n = this.buf.length;
      while (i < n) {
        const c = this.buf.charCodeAt(i);
        if (c === 10 || c === 13) break;
        i++;
      }
      if (i >= n) break; // no complete line yet
      let next = i + 1;
      if (this.buf.charCodeAt(i) === 13) {
        if (i + 1 >= n) break; // a \r at the end: wait to see whether \n follows
        if (this.buf.charCodeAt(i + 1) === 10) next = i + 2;
      }
      this.line(this.buf.slice(start, i));
      start = next;
    }
    this.buf = this.buf.slice(start);
  }

  // end flushes at the end of the body. A trailing lone \r ends a line; an
  // event without its blank line is dropped, as EventSource does.
  end() {
    if (this.buf.endsWith('\r')) {
      this.line(this.buf.slice(0, -1));
    }
    this.buf = '';
    this.resetEvent();
  }

  line(l) {
    if (l === '') {
      this.dispatch();
      return;
    }
    if (l.charCodeAt(0) === 58) return; // ":" comment / keep-alive
    const colon = l.indexOf(':');
    let field = l;
    let value = '';
    if (colon >= 0) {
      field = l.slice(0, colon);
      value = l.slice(colon + 1);
      if (value.charCodeAt(0) === 32) value = value.slice(1);
    }
    switch (field) {
      case 'data':
        this.data.push(value);
        break;
      case 'event':
        this.type = value;
        break;
      case 'id':
        if (value.indexOf('\0') < 0) this.id = value;
        break;
      default: // "retry" and unknown fields are ignored
    }
  }

  dispatch() {
    const ev = {
      type: this.type || 'message',
      data: this.data.join('\n'),
      id: this.id === null ? '' : this.id,
      hasData: this.data.length > 0,
    };
    this.resetEvent();
    if (!ev.hasData) return; // no data: nothing to dispatch
    this.onEvent(ev);
  }
}

// newKey is a fresh Idempotency-Key.
export function newKey() {
  if (window.crypto && typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  // Fallback for pages served over plain http from a non-localhost host,
  // where randomUUID is missing (it needs a secure context).
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// errorMessage turns an error JSON {"error":{message,type,code}} (or any
// text) into one line.
// savedSummary says what reprise served a key's clients without a
// generation, from the status JSON's saved (docs/cost.md): its kinds and
// the tokens they would have cost, e.g. "2 resumes, 1 replay — 180 tokens";
// '' while nothing was saved. A request served from a running generation
// is counted once that generation completes.
export function savedSummary(saved) {
  const by = saved && saved.by;
  if (!by) return '';
  const parts = [];
  for (const [kind, n] of [['resume', by.resume], ['replay', by.replay], ['attach', by.attach], ['retry', by.retry]]) {
    if (n > 0) parts.push(`${n} ${kind === 'attach' && n !== 1 ? 'attaches' : kind + (n === 1 ? '' : 's')}`);
  }
  if (parts.length === 0) return '';
  const tokens = saved.usage ? saved.usage.total_tokens : null;
  return parts.join(', ') + (tokens != null ? ` — ${tokens.toLocaleString('en-US')} tokens` : '');
}

// callsSummary says how many calls a key was billed and spared, from the
// status JSON's billed.calls and saved.calls (docs/cost.md), e.g. "calls
// billed 1, calls saved 3"; '' when the status has no calls (the server's
// price table does not price the model per call).
export function callsSummary(st) {
  const billed = st && st.billed && st.billed.calls;
  if (!billed) return '';
  return `calls billed ${billed}, calls saved ${(st.saved && st.saved.calls) || 0}`;
}

// savedDuplicates is how many of a key's saved requests were duplicates (or
// retries) a naive client would each have generated again; its resumes are
// the client's own drops, counted apart.
export function savedDuplicates(saved) {
  if (!saved) return 0;
  if (!saved.by) return saved.duplicates || 0; // a server before the kinds
  return saved.by.attach + saved.by.replay + saved.by.retry;
}

// aheadHint explains a client that holds more events than the server's
// journaled count, or is '' when it does not: the instance that runs a
// generation shows its readers an event as soon as it hands it to
// JetStream, which stores it a moment later (docs/design/live-path.md), and the
// page reads the count every half second.
export function aheadHint(s) {
  const journaled = s.status ? s.status.events : null;
  if (journaled == null || s.count <= journaled) return '';
  return 'Client ahead: events are shown before JetStream stores them, and this count is read every ½ s — the journal catches up.';
}

// replayNote says what a Replay (the same key and body POSTed again) got,
// or is '' after any other request. A completed key is replayed from the
// journal (Idempotent-Replayed), a running one attached to
// (Reprise-Attached), both without asking the model; a key without a
// result starts a new generation. A replay reads from the first event on a
// cleared client, so it repeats nothing: there is nothing for the skipping
// of repeated events, which guards resumes, to skip.
export function replayNote(s) {
  if (s.request !== 'replay' || !s.served) return '';
  const none = 'Repeated events are skipped only when a resume overlaps what the client already has; ' +
    'a replay reads afresh from the first event, so it has none to skip.';
  switch (s.served) {
    case 'replayed':
      return `Replay: the key had completed, so reprise answered from the journal (Idempotent-Replayed: true), every event once, without asking the model. ${none}`;
    case 'attached':
      return `Replay while the generation ran: reprise attached to it (Reprise-Attached: true), from the journal then live, without asking the model again. ${none}`;
    default:
      return 'Replay: the key had no result to give (its generation failed or expired), so this request started a new generation.';
  }
}

export function errorMessage(text, fallback) {
  try {
    const j = JSON.parse(text);
    const e = j && j.error;
    if (e) {
      const tag = [e.type, e.code].filter(Boolean).join('/');
      return (e.message || 'error') + (tag ? ` (${tag})` : '');
    }
  } catch (_) {
    // not JSON
  }
  return (text && String(text).trim()) || fallback || 'error';
}

// cancelURL is the cancel of a stream: its Location's path + /cancel, the
// Location's query (a ?token= capability) kept.
export function cancelURL(loc) {
  const u = new URL(loc, window.location.href);
  u.pathname = u.pathname.replace(/\/$/, '') + '/cancel';
  return u.pathname + u.search;
}

// withQuery appends name=value to url.
function withQuery(url, name, value) {
  return url + (url.includes('?') ? '&' : '?') + name + '=' + encodeURIComponent(value);
}

const transportName = { fetch: 'POST', eventsource: 'SSE', websocket: 'WebSocket' };

// Session is one key's generation as one client sees it. The pane that owns
// it supplies:
//
//   path         the POST path
//   settings()   {mode: 'sse'|'ws', unreliable, every, autoresume}
//   log(msg)     the page's log
//   apply(ev)    applies one new event (never a duplicate); returns true for
//                the format's terminal event
//   reset()      a new generation replaced the stream: clear the output
//   changed()    the session's numbers changed: render them
//
// Every fetch, EventSource and WebSocket gets a connection object; a
// callback of a connection that is no longer s.conn is ignored, so stale
// readers never touch the page.
export class Session {
  constructor(opts) {
    Object.assign(this, opts);
    this.key = '';
    this.location = ''; // resume URL from the Location header
    this.body = ''; // exact JSON body of the generation, reused by Replay
    this.status = null; // the last status JSON
    this.state = 'idle'; // idle | streaming | resuming | dropped | stopped | done | error
    this.error = '';
    this.replayed = '';
    this.request = ''; // what the last POST was: 'generate' | 'replay'
    this.served = ''; // how the server answered it: 'replayed' | 'attached' | 'generated'
    this.conn = null; // the active connection: {kind, n, stop()}
    this.resumeTimer = 0;
    this.pollTimer = 0;
    this.polling = false;
    this.answer = 0; // how many keys this body got: Regenerate counts up
    this.previous = null; // the body's key before this one: {key, state}
    this.cancelled = ''; // the key a Stop cancelled
    this.clear();
  }

  // clear forgets what the client received (not the key).
  clear() {
    this.lastId = '';
    this.count = 0; // events applied, the terminal one included
    this.dupes = 0;
    this.drops = 0; // connections the client dropped
    this.reconnects = 0;
    this.droppedAt = 0; // when the last drop happened (ms)
    this.seen = new Set();
  }

  // start begins a new key's generation with body. The same body again
  // (Regenerate) is a new request too: a new key, a new generation.
  start(body) {
    this.stop();
    this.stopPolling();
    if (this.key && body === this.body) {
      this.answer++;
      const state = this.cancelled === this.key ? 'cancelled' : (this.status && this.status.state) || '';
      this.previous = { key: this.key, state };
    } else {
      this.answer = 1;
      this.previous = null;
    }
    this.key = newKey();
    this.location = '';
    this.body = body;
    this.status = null;
    this.clear();
    this.post('generate');
  }

  // replay sends the same key and body again: served from the journal.
  replay() {
    if (!this.key || !this.body) return;
    this.stop();
    this.clear();
    this.reset();
    this.post('replay');
  }

  // stop ends everything this session runs.
  stop() {
    this.stopActive();
    clearTimeout(this.resumeTimer);
    this.resumeTimer = 0;
  }

  setState(state) {
    this.state = state;
    this.changed();
  }

  open(kind) {
    this.stop();
    const c = { kind, n: 0, stop() {} };
    this.conn = c;
    return c;
  }

  stopActive() {
    const c = this.conn;
    if (!c) return;
    this.conn = null;
    try {
      c.stop();
    } catch (_) {
      // already stopped
    }
  }

  finish(c, state, msg) {
    if (this.conn !== c) return;
    this.stopActive();
    if (state === 'error') {
      this.error = msg || 'error';
      this.log(`error: ${this.error}`);
    } else if (state === 'done') {
      this.log(`done — ${this.position()}, after ${this.drops} drop${this.drops === 1 ? '' : 's'}`);
    }
    this.setState(state);
    this.poll();
    // A resume is counted as saved a moment after it is served: ask once
    // more for the key's savings.
    setTimeout(() => this.poll(), 400);
  }

  // drop aborts the client's connection; the server keeps generating. An
  // unreliable network reconnects by itself, as auto-resume does.
  drop(reason, auto) {
    const c = this.conn;
    if (!c) return;
    this.stopActive();
    this.drops++;
    this.droppedAt = performance.now();
    this.setState('dropped');
    const s = this.settings();
    const again = (auto || s.autoresume) && !!this.location;
    const ms = auto ? s.delay : 1000;
    this.log(`${reason} — ${this.position()}${again ? `; auto-resume in ${ms} ms` : ''}`);
    this.poll(); // the server's count, climbing while the client is away
    if (again) this.scheduleResume(ms);
  }

  // cancel is the user's Stop: the client leaves, as on a Drop, and the
  // server cancels the generation (POST <Location>/cancel), so the same
  // prompt again (Regenerate) is answered anew. A Drop only leaves: the
  // generation runs on, and the same request again would attach to it.
  async cancel() {
    if (!this.key || (!this.conn && this.state !== 'dropped')) return;
    const key = this.key;
    this.stop();
    if (!this.location) this.location = '/v1/streams/' + encodeURIComponent(key); // stopped before the answer
    this.setState('stopped');
    const url = cancelURL(this.location);
    this.log(`stopped by you: POST ${url.split('?')[0]} — ${this.position()}`);
    let msg;
    try {
      const res = await fetch(url, { method: 'POST', headers: { Accept: 'application/json' }, cache: 'no-store' });
      const text = await res.text();
      if (res.status === 202) {
        if (key === this.key) this.cancelled = key;
        msg = `key ${key.slice(0, 8)}… cancelled: the upstream request ends, a Regenerate starts a new generation`;
      } else {
        msg = `nothing cancelled: HTTP ${res.status}: ${errorMessage(text, res.statusText)}`;
      }
    } catch (e) {
      msg = `the cancel failed: ${e.message}`;
    }
    this.log(msg);
    if (key !== this.key) return;
    this.changed();
    this.startPolling(); // until the status says cancelled
  }

  // position is what the client has, for the log.
  position() {
    return `client has ${this.count} events (last id ${this.lastId || 'none'})`;
  }

  // lost is a connection that broke or ended without the terminal event.
  lost(c, reason) {
    if (this.conn !== c) return;
    this.drop(reason, this.settings().unreliable);
  }

  scheduleResume(ms) {
    clearTimeout(this.resumeTimer);
    this.resumeTimer = 0;
    if (!this.location) return;
    this.resumeTimer = setTimeout(() => {
      this.resumeTimer = 0;
      if (!this.conn) this.resume();
    }, ms);
  }

  // handle applies one event of connection c.
  handle(c, ev) {
    if (this.conn !== c) return;
    if (ev.type === 'error') {
      this.finish(c, 'error', errorMessage(ev.data, 'upstream error'));
      return;
    }
    if (ev.type === 'reset') {
      this.clear();
      this.reset();
      if (ev.id) {
        this.seen.add(ev.id);
        this.lastId = ev.id;
      }
      this.log('reset: a new generation replaced the stream; output cleared');
      this.changed();
      return;
    }
    if (ev.type !== 'message' && !ev.type.includes('.')) return; // unknown event types are ignored
    if (ev.id && this.seen.has(ev.id)) {
      this.dupes++;
      this.changed();
      return;
    }
    if (c.n === 0 && c.kind !== 'fetch' && this.droppedAt) this.caughtUp(c);
    if (ev.id) {
      this.seen.add(ev.id);
      this.lastId = ev.id;
    }
    c.n++;
    this.count++;
    let terminal = false;
    try {
      terminal = this.apply(ev);
    } catch (e) {
      this.finish(c, 'error', e.message);
      return;
    }
    this.changed();
    if (this.conn !== c) return; // apply finished it
    if (terminal) {
      this.finish(c, 'done');
      return;
    }
    const s = this.settings();
    if (s.unreliable && c.n >= s.every) this.drop(`unreliable network: dropped after ${c.n} events`, true);
  }

  // caughtUp logs the first event of a reconnection: how long the client
  // was away and how much the journal had meanwhile.
  caughtUp(c) {
    const away = Math.round(performance.now() - this.droppedAt);
    this.droppedAt = 0;
    const journaled = this.status ? this.status.events : null;
    let msg = `reconnected over ${transportName[c.kind]} after ${away} ms, resuming after id ${this.lastId || 'none'}`;
    if (journaled != null && journaled > this.count) {
      msg += `; the server journaled ${journaled - this.count} more meanwhile — replayed from the journal, then live`;
    }
    this.log(msg);
  }

  // post sends the request for this.key and this.body and reads the SSE
  // answer with a reader. In WebSocket mode it leaves the answer as soon as
  // the Location is known and reads the generation over a WebSocket.
  async post(what) {
    const c = this.open('fetch');
    const ac = new AbortController();
    c.stop = () => ac.abort();
    this.error = '';
    this.replayed = '';
    this.request = what;
    this.served = '';
    this.setState('streaming');
    this.log(`${what}: POST ${this.path}, Idempotency-Key ${this.key.slice(0, 8)}…`);

    let res;
    try {
      res = await fetch(this.path, {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          Accept: 'text/event-stream',
          'Idempotency-Key': this.key,
        },
        body: this.body,
        signal: ac.signal,
        cache: 'no-store',
      });
    } catch (e) {
      if (this.conn !== c) return;
      if (this.location) this.lost(c, `connection lost: ${e.message}`);
      else this.finish(c, 'error', `request failed: ${e.message}`);
      return;
    }
    if (this.conn !== c) return;

    const loc = res.headers.get('Location');
    if (loc) this.location = loc;
    else if (!this.location && res.ok) this.location = '/v1/streams/' + encodeURIComponent(this.key);
    const replayed = res.headers.get('Idempotent-Replayed');
    this.replayed = replayed === null ? 'false' : replayed;
    if (res.ok) {
      if (replayed === 'true') this.served = 'replayed';
      else if (res.headers.get('Reprise-Attached') === 'true') this.served = 'attached';
      else this.served = 'generated';
    }
    this.changed();
    this.startPolling();

    const ctype = res.headers.get('Content-Type') || '';
    if (!res.ok || !ctype.startsWith('text/event-stream')) {
      let text = '';
      try {
        text = await res.text();
      } catch (_) {
        // body lost
      }
      const msg = res.ok ? `unexpected ${ctype || 'content'}: ${errorMessage(text, '')}` : `HTTP ${res.status}: ${errorMessage(text, res.statusText)}`;
      this.finish(c, 'error', msg);
      return;
    }
    this.log(`HTTP ${res.status}${replayed === 'true' ? ', Idempotent-Replayed: true (served from the journal)' : ''}`);
    if (this.settings().mode === 'ws') {
      this.log('WebSocket mode: the POST started the generation; reading it over a WebSocket on the Location');
      this.stopActive();
      this.resume();
      return;
    }

    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    const parser = new SSEParser((ev) => this.handle(c, ev));
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(decoder.decode(value, { stream: true }));
        if (this.conn !== c) {
          reader.cancel().catch(() => {});
          return;
        }
      }
      parser.push(decoder.decode());
      parser.end();
    } catch (e) {
      this.lost(c, `connection lost: ${e.message}`);
      return;
    }
    this.lost(c, 'the stream ended without its terminal event');
  }

  // resume reads the Location after this.lastId, over the transport the
  // settings name.
  resume() {
    if (!this.location) return;
    this.error = '';
    if (this.droppedAt) this.reconnects++;
    this.poll();
    if (this.settings().mode === 'ws') this.resumeWS();
    else this.resumeSSE();
  }

  // logOpen logs a connection the client opens; a reconnection after a
  // drop is logged when its first event comes (caughtUp).
  logOpen(transport) {
    if (this.droppedAt) return;
    this.log(this.lastId ? `resume over ${transport} after event ${this.lastId}` : `read over ${transport} from the start`);
  }

  resumeURL() {
    return this.lastId ? withQuery(this.location, 'last_event_id', this.lastId) : this.location;
  }

  resumeSSE() {
    const c = this.open('eventsource');
    const es = new EventSource(this.resumeURL());
    c.stop = () => es.close();
    this.setState('resuming');
    this.logOpen('SSE');

    const wrap = (type) => (e) => this.handle(c, { type, data: e.data, id: e.lastEventId || '' });
    es.onopen = () => {
      if (this.conn === c) this.setState('streaming');
    };
    es.onmessage = wrap('message');
    for (const t of ['reset', 'speech.audio.delta', 'speech.audio.done']) es.addEventListener(t, wrap(t));
    es.addEventListener('error', (e) => {
      if (this.conn !== c) return;
      if (e instanceof MessageEvent) {
        // "event: error" sent by the server.
        this.handle(c, { type: 'error', data: e.data, id: e.lastEventId || '' });
        return;
      }
      if (es.readyState === EventSource.CLOSED) {
        // The server refused the stream: 204 (the cursor is already at
        // the end of a completed stream) or an HTTP error.
        this.closedByServer(c);
        return;
      }
      // Network error: EventSource reconnects by itself and sends
      // Last-Event-ID; duplicates are skipped.
      this.setState('resuming');
      this.log('connection lost; the browser reconnects with Last-Event-ID');
    });
  }

  resumeWS() {
    const c = this.open('websocket');
    const u = new URL(this.resumeURL(), location.href);
    u.protocol = u.protocol === 'https:' ? 'wss:' : 'ws:';
    const ws = new WebSocket(u.href);
    c.stop = () => ws.close(1000, 'dropped by the client');
    this.setState('resuming');
    this.logOpen('WebSocket');
    ws.onopen = () => {
      if (this.conn === c) this.setState('streaming');
    };
    ws.onmessage = (m) => {
      let f;
      try {
        f = JSON.parse(m.data);
      } catch (_) {
        this.log('skipped a WebSocket frame that is not JSON');
        return;
      }
      this.handle(c, { type: f.event || 'message', data: f.data, id: f.id || '' });
    };
    // A close without the terminal event: the server refused (a cursor at
    // the end of a completed stream answers 204, which fails the
    // handshake) or the stream was cut. The status tells which.
    ws.onclose = () => this.closedByServer(c);
  }

  // closedByServer decides what a refused or closed stream means by asking
  // the journal. A completed stream is done (the 204 case).
  async closedByServer(c) {
    if (this.conn !== c) return;
    let s = null;
    let failure = '';
    try {
      const res = await fetch(this.location, { headers: { Accept: 'application/json' }, cache: 'no-store' });
      const text = await res.text();
      if (res.ok) s = JSON.parse(text);
      else failure = `HTTP ${res.status}: ${errorMessage(text, res.statusText)}`;
    } catch (e) {
      failure = e.message;
    }
    if (this.conn !== c) return;
    if (s) {
      this.status = s;
      this.changed();
    }
    if (s && s.state === 'completed') {
      this.finish(c, 'done');
    } else if (s && s.state === 'in_progress') {
      this.lost(c, 'the server closed the stream while the generation runs');
    } else if (s && s.state === 'failed') {
      this.finish(c, 'error', 'the generation failed');
    } else {
      this.finish(c, 'error', `the resume URL refused the stream${failure ? ': ' + failure : ''}`);
    }
  }

  startPolling() {
    if (this.pollTimer) return;
    this.pollTimer = setInterval(() => this.poll(), 500);
    this.poll();
  }

  stopPolling() {
    clearInterval(this.pollTimer);
    this.pollTimer = 0;
  }

  // poll reads the key's status: what the server journaled, billed and
  // saved, live while the client is away.
  async poll() {
    if (!this.location || this.polling) return;
    const key = this.key;
    this.polling = true;
    try {
      const res = await fetch(this.location, { headers: { Accept: 'application/json' }, cache: 'no-store' });
      if (res.ok && key === this.key) {
        const s = await res.json();
        if (key === this.key) {
          this.status = s;
          this.changed();
          if (s.state !== 'in_progress' && !this.conn) this.stopPolling();
        }
      }
    } catch (_) {
      // the next poll tries again
    } finally {
      this.polling = false;
    }
  }
}

// RangeSession is a generation whose answer is raw media (no event stream):
// the POST's body is read as it arrives, and a drop resumes with a GET of
// the Location and Range: bytes=<bytes received>- — 206 from there, then
// live while the upstream still generates. The pane supplies bytes(chunk),
// which gets every byte once, in order, in place of apply.
export class RangeSession extends Session {
  clear() {
    super.clear();
    this.offset = 0; // bytes received: the next Range's first byte
    this.total = -1; // the answer's size, from Content-Length / Content-Range
  }

  position() {
    return `client has ${this.offset} of ${this.total >= 0 ? this.total : '?'} bytes`;
  }

  // post starts the generation and reads its answer.
  post(what) {
    this.error = '';
    this.replayed = '';
    this.log(`${what}: POST ${this.path} (raw audio), Idempotency-Key ${this.key.slice(0, 8)}…`);
    this.read(true);
  }

  // resume asks the Location for the bytes after those received.
  resume() {
    if (!this.location) return;
    this.error = '';
    if (this.droppedAt) this.reconnects++;
    this.poll();
    this.read(false);
  }

  async read(first) {
    const c = this.open('range');
    const ac = new AbortController();
    c.stop = () => ac.abort();
    this.setState(first ? 'streaming' : 'resuming');
    const range = `bytes=${this.offset}-`;
    let res;
    try {
      res = first
        ? await fetch(this.path, {
          method: 'POST',
          headers: { 'Content-Type': 'application/json', 'Idempotency-Key': this.key },
          body: this.body,
          signal: ac.signal,
          cache: 'no-store',
        })
        : await fetch(this.location, { headers: { Range: range }, signal: ac.signal, cache: 'no-store' });
    } catch (e) {
      if (this.conn !== c) return;
      if (this.location) this.lost(c, `connection lost: ${e.message}`);
      else this.finish(c, 'error', `request failed: ${e.message}`);
      return;
    }
    if (this.conn !== c) return;
    if (first) {
      const loc = res.headers.get('Location');
      if (loc) this.location = loc;
      this.replayed = res.headers.get('Idempotent-Replayed') || 'false';
      this.startPolling();
    }
    const want = first ? 200 : 206;
    if (res.status !== want) {
      let text = '';
      try {
        text = await res.text();
      } catch (_) {
        // body lost
      }
      this.finish(c, 'error', `${first ? 'POST' : 'GET ' + range}: HTTP ${res.status}: ${errorMessage(text, res.statusText)}`);
      return;
    }
    if (first) {
      this.total = parseInt(res.headers.get('Content-Length') || '-1', 10);
      this.log(`HTTP 200 ${res.headers.get('Content-Type') || ''}, ${this.total >= 0 ? this.total + ' bytes' : 'size unknown'}, played as it arrives`);
    } else {
      const cr = res.headers.get('Content-Range') || '';
      const m = /\/(\d+)$/.exec(cr);
      if (m) this.total = parseInt(m[1], 10);
    }
    this.setState('streaming');
    const reader = res.body.getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (this.conn !== c) {
          reader.cancel().catch(() => {});
          return;
        }
        if (done) break;
        if (value.length === 0) continue;
        if (c.n === 0 && !first && this.droppedAt) {
          const away = Math.round(performance.now() - this.droppedAt);
          this.droppedAt = 0;
          this.log(`reconnected after ${away} ms: Range: ${range} → 206 ${res.headers.get('Content-Range') || ''}, then live`);
        }
        c.n++;
        this.count++;
        this.bytes(value, this.offset);
        this.offset += value.length;
        this.changed();
        const s = this.settings();
        if (s.unreliable && c.n >= s.every && this.offset !== this.total) {
          this.drop(`unreliable network: dropped after ${c.n} reads`, true);
          return;
        }
      }
    } catch (e) {
      this.lost(c, `connection lost at byte ${this.offset}: ${e.message}`);
      return;
    }
    if (this.total < 0 || this.offset === this.total) {
      this.done();
      this.finish(c, 'done');
    } else {
      this.lost(c, `the answer ended at byte ${this.offset} of ${this.total}`);
    }
  }
}
