// reprise demo page. Plain JavaScript, no build step, no dependencies.
//
// The page talks to the proxy on the same origin:
//   POST /v1/chat/completions  (Idempotency-Key header, SSE answer)
//   GET  <Location>?last_event_id=<id>  (EventSource, resumes after <id>)
//   GET  <Location> with Accept: application/json  (journal status)
'use strict';

(function () {
  // ---------------------------------------------------------------------------
  // SSE parser for a fetch body (EventSource parses by itself).
  //
  // It follows the WHATWG rules: lines end with \r\n, \n or \r; a blank line
  // dispatches the event; "data" lines are joined with \n; a line that starts
  // with ":" is a comment; one leading space after the colon is dropped. Unlike
  // EventSource, the id of an event is the id given in that event only (empty
  // when the event has no id line), which is what deduplication needs.
  // ---------------------------------------------------------------------------
  class SSEParser {
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

  // ---------------------------------------------------------------------------
  // Page state.
  // ---------------------------------------------------------------------------
  const $ = (id) => document.getElementById(id);
  const el = {};

  const st = {
    key: '',
    location: '', // resume URL from the Location header
    body: '', // exact JSON body of the generation, reused by Replay
    lastId: '',
    count: 0,
    dupes: 0,
    seen: new Set(),
    text: '',
    conn: null, // the active connection: {kind, stop()}
    resumeTimer: 0,
    pollTimer: 0,
    polling: false,
  };

  function newKey() {
    if (window.crypto && typeof crypto.randomUUID === 'function') return crypto.randomUUID();
    // Fallback for pages served over plain http from a non-localhost host,
    // where randomUUID is missing (it needs a secure context).
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }

  function log(msg) {
    const li = document.createElement('li');
    const t = document.createElement('time');
    t.textContent = new Date().toLocaleTimeString();
    li.append(t, ' ', msg);
    el.log.prepend(li);
    while (el.log.children.length > 60) el.log.lastChild.remove();
  }

  function setConn(state) {
    el.conn.textContent = state;
    el.conn.dataset.state = state;
    el.output.dataset.state = state;
    updateButtons();
  }

  function updateButtons() {
    el.drop.disabled = !st.conn;
    el.resume.disabled = !st.location || !!st.conn;
    el.replay.disabled = !st.key || !st.body;
  }

  function render() {
    el.output.textContent = st.text;
    el.key.textContent = st.key;
    el.lastid.textContent = st.lastId;
    el.count.textContent = String(st.count);
    el.dupes.textContent = String(st.dupes);
  }

  function showError(msg) {
    if (msg) {
      el.error.textContent = msg;
      el.error.hidden = false;
    } else {
      el.error.textContent = '';
      el.error.hidden = true;
    }
  }

  function clearOutput() {
    st.text = '';
    st.count = 0;
    st.seen.clear();
    render();
  }

  // errorMessage turns an error JSON {"error":{message,type,code}} (or any
  // text) into one line.
  function errorMessage(text, fallback) {
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

  function resumeURL() {
    let url = st.location;
    if (st.lastId) {
      url += (url.includes('?') ? '&' : '?') + 'last_event_id=' + encodeURIComponent(st.lastId);
    }
    return url;
  }

  // ---------------------------------------------------------------------------
  // Connections. Each fetch or EventSource gets an object; a callback of a
  // connection that is no longer st.conn is ignored, so stale readers never
  // touch the page.
  // ---------------------------------------------------------------------------
  function openConn(kind) {
    stopActive();
    clearTimeout(st.resumeTimer);
    st.resumeTimer = 0;
    const c = { kind, stop() {} };
    st.conn = c;
    return c;
  }

  function stopActive() {
    const c = st.conn;
    if (!c) return;
    st.conn = null;
    try {
      c.stop();
    } catch (_) {
      // already stopped
    }
  }

  function finish(c, state, msg) {
    if (st.conn !== c) return;
    stopActive();
    if (state === 'error') {
      showError(msg || 'error');
      log(`error: ${msg || 'unknown'}`);
    } else if (state === 'done') {
      log(`done: [DONE] after ${st.count} events`);
    }
    setConn(state);
    pollStatus();
  }

  function dropped(c, reason) {
    if (st.conn !== c) return;
    stopActive();
    setConn('dropped');
    log(reason);
    scheduleAutoResume();
  }

  function scheduleAutoResume() {
    clearTimeout(st.resumeTimer);
    st.resumeTimer = 0;
    if (!el.autoresume.checked || !st.location) return;
    log('auto-resume in 1 s');
    st.resumeTimer = setTimeout(() => {
      st.resumeTimer = 0;
      if (!st.conn) resume();
    }, 1000);
  }

  // handleEvent applies one SSE event of connection c.
  function handleEvent(c, ev) {
    if (st.conn !== c) return;
    if (ev.type === 'error') {
      finish(c, 'error', errorMessage(ev.data, 'upstream error'));
      return;
    }
    if (ev.data === '[DONE]') {
      finish(c, 'done');
      return;
    }
    if (ev.type === 'reset') {
      clearOutput();
      if (ev.id) {
        st.seen.add(ev.id);
        st.lastId = ev.id;
        render();
      }
      log('reset: a new generation replaced the stream; output cleared');
      return;
    }
    if (ev.type !== 'message') return; // unknown event types are ignored

    if (ev.id) {
      if (st.seen.has(ev.id)) {
        st.dupes++;
        render();
        return;
      }
      st.seen.add(ev.id);
      st.lastId = ev.id;
    }

    let chunk = null;
    try {
      chunk = JSON.parse(ev.data);
    } catch (_) {
      log(`skipped an event that is not JSON (id ${ev.id || '?'})`);
      render();
      return;
    }
    if (chunk && chunk.error) {
      finish(c, 'error', errorMessage(ev.data, 'upstream error'));
      return;
    }
    st.count++;
    const choice = chunk && Array.isArray(chunk.choices) ? chunk.choices[0] : null;
    const content = choice && choice.delta ? choice.delta.content : null;
    if (typeof content === 'string') st.text += content;
    render();
  }

  // post sends the chat completion request for st.key and st.body and reads
  // the SSE answer with a reader.
  async function post(what) {
    const c = openConn('fetch');
    const ac = new AbortController();
    c.stop = () => ac.abort();
    showError('');
    el.replayed.textContent = '';
    setConn('streaming');
    log(`${what}: POST /v1/chat/completions, Idempotency-Key ${st.key}`);

    let res;
    try {
      res = await fetch('/v1/chat/completions', {
        method: 'POST',
        headers: {
          'Content-Type': 'application/json',
          Accept: 'text/event-stream',
          'Idempotency-Key': st.key,
        },
        body: st.body,
        signal: ac.signal,
        cache: 'no-store',
      });
    } catch (e) {
      if (st.conn !== c) return;
      if (st.location) dropped(c, `connection lost: ${e.message}`);
      else finish(c, 'error', `request failed: ${e.message}`);
      return;
    }
    if (st.conn !== c) return;

    const loc = res.headers.get('Location');
    if (loc) st.location = loc;
    else if (!st.location && res.ok) st.location = '/v1/streams/' + encodeURIComponent(st.key);
    const replayed = res.headers.get('Idempotent-Replayed');
    el.replayed.textContent = replayed === null ? 'false' : replayed;
    updateButtons();
    startPolling();

    if (!res.ok) {
      let text = '';
      try {
        text = await res.text();
      } catch (_) {
        // body lost
      }
      finish(c, 'error', `HTTP ${res.status}: ${errorMessage(text, res.statusText)}`);
      return;
    }
    const ctype = res.headers.get('Content-Type') || '';
    if (!ctype.startsWith('text/event-stream')) {
      let text = '';
      try {
        text = await res.text();
      } catch (_) {
        // body lost
      }
      finish(c, 'error', `unexpected ${ctype || 'content'}: ${errorMessage(text, '')}`);
      return;
    }
    log(`HTTP ${res.status}${replayed === 'true' ? ', Idempotent-Replayed: true (served from the journal)' : ''}`);

    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    const parser = new SSEParser((ev) => handleEvent(c, ev));
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(decoder.decode(value, { stream: true }));
        if (st.conn !== c) {
          reader.cancel().catch(() => {});
          return;
        }
      }
      parser.push(decoder.decode());
      parser.end();
    } catch (e) {
      if (st.conn === c) dropped(c, `connection lost: ${e.message}`);
      return;
    }
    if (st.conn === c) dropped(c, 'the stream ended without [DONE]');
  }

  // resume opens an EventSource on the Location URL after st.lastId.
  function resume() {
    if (!st.location) return;
    const c = openConn('eventsource');
    const url = resumeURL();
    const es = new EventSource(url);
    c.stop = () => es.close();
    showError('');
    setConn('resuming');
    log(st.lastId ? `resume after event ${st.lastId}` : 'resume from the start');

    const wrap = (type) => (e) => handleEvent(c, { type, data: e.data, id: e.lastEventId || '' });
    es.onopen = () => {
      if (st.conn === c) setConn('streaming');
    };
    es.onmessage = wrap('message');
    es.addEventListener('reset', wrap('reset'));
    es.addEventListener('error', (e) => {
      if (st.conn !== c) return;
      if (e instanceof MessageEvent) {
        // "event: error" sent by the server.
        handleEvent(c, { type: 'error', data: e.data, id: e.lastEventId || '' });
        return;
      }
      if (es.readyState === EventSource.CLOSED) {
        // The server refused the stream: 204 (the cursor is already at
        // the end of a completed stream) or an HTTP error.
        closedByServer(c);
        return;
      }
      // Network error: EventSource reconnects by itself and sends
      // Last-Event-ID; duplicates are skipped.
      setConn('resuming');
      log('connection lost; the browser reconnects with Last-Event-ID');
    });
  }

  // closedByServer decides what a refused EventSource means by asking the
  // journal. A completed stream is done (the 204 case).
  async function closedByServer(c) {
    let s = null;
    let failure = '';
    try {
      const res = await fetch(st.location, { headers: { Accept: 'application/json' }, cache: 'no-store' });
      const text = await res.text();
      if (res.ok) s = JSON.parse(text);
      else failure = `HTTP ${res.status}: ${errorMessage(text, res.statusText)}`;
    } catch (e) {
      failure = e.message;
    }
    if (st.conn !== c) return;
    if (s) showServer(s);
    if (s && s.state === 'completed') {
      finish(c, 'done');
    } else if (s && s.state === 'in_progress') {
      dropped(c, 'the server closed the stream while the generation runs');
    } else if (s && s.state === 'failed') {
      finish(c, 'error', 'the generation failed');
    } else {
      finish(c, 'error', `the resume URL refused the stream${failure ? ': ' + failure : ''}`);
    }
  }

  // ---------------------------------------------------------------------------
  // Journal status, polled every second while a key exists.
  // ---------------------------------------------------------------------------
  function showServer(s) {
    el.serverState.textContent = s.state == null ? '' : String(s.state);
    el.serverGeneration.textContent = s.generation == null ? '' : String(s.generation);
    el.serverEvents.textContent = s.events == null ? '' : String(s.events);
    el.serverUpdated.textContent = s.updated_at == null ? '' : String(s.updated_at);
  }

  function clearServer() {
    showServer({});
  }

  function startPolling() {
    if (st.pollTimer) return;
    st.pollTimer = setInterval(pollStatus, 1000);
    pollStatus();
  }

  async function pollStatus() {
    if (!st.location || st.polling) return;
    const key = st.key;
    const url = st.location;
    st.polling = true;
    try {
      const res = await fetch(url, { headers: { Accept: 'application/json' }, cache: 'no-store' });
      if (res.ok && key === st.key) {
        const s = await res.json();
        if (key === st.key) showServer(s);
      }
    } catch (_) {
      // the next poll tries again
    } finally {
      st.polling = false;
    }
  }

  // ---------------------------------------------------------------------------
  // Buttons.
  // ---------------------------------------------------------------------------
  function generate() {
    stopActive();
    st.key = newKey();
    st.location = '';
    st.body = JSON.stringify({
      model: 'demo',
      stream: true,
      messages: [{ role: 'user', content: el.prompt.value }],
    });
    st.lastId = '';
    st.dupes = 0;
    clearOutput();
    clearServer();
    post('generate');
  }

  function replay() {
    if (!st.key || !st.body) return;
    stopActive();
    st.lastId = '';
    st.dupes = 0;
    clearOutput();
    post('replay');
  }

  function drop() {
    const c = st.conn;
    if (!c) return;
    dropped(c, 'dropped by you — the server keeps generating');
  }

  function init() {
    for (const id of ['prompt', 'generate', 'drop', 'resume', 'replay', 'autoresume', 'output', 'error',
      'key', 'lastid', 'count', 'dupes', 'conn', 'replayed', 'log']) {
      el[id] = $(id);
    }
    el.serverState = $('server-state');
    el.serverGeneration = $('server-generation');
    el.serverEvents = $('server-events');
    el.serverUpdated = $('server-updated');

    el.generate.addEventListener('click', generate);
    el.drop.addEventListener('click', drop);
    el.resume.addEventListener('click', resume);
    el.replay.addEventListener('click', replay);
    el.autoresume.addEventListener('change', () => {
      if (el.autoresume.checked && !st.conn && el.conn.textContent === 'dropped') scheduleAutoResume();
      if (!el.autoresume.checked) {
        clearTimeout(st.resumeTimer);
        st.resumeTimer = 0;
      }
    });
    render();
    updateButtons();
  }

  // Exposed for tests and for the curious in the DevTools console.
  window.reprise = { SSEParser, state: st };

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
