// Generated from reprise.js by build.mjs (node build.mjs): do not edit.
"use strict";
Object.defineProperty(exports, "__esModule", { value: true });

// reprise.js: a fetch that resumes reprise streams by itself.
//
//   import { fetch } from "https://your-reprise/reprise.js";
//   const client = new OpenAI({ baseURL: "https://your-reprise/v1", apiKey, fetch });
//
// For a POST to a streaming endpoint (/v1/chat/completions, /v1/responses,
// /v1/messages, /v1/audio/speech) it adds an Idempotency-Key when the
// request has none (the same one again for the SDK's own retry of the same
// request, so the retry attaches instead of generating twice). When the
// event stream it answers breaks before the format's terminal event, it
// reconnects to the answer's Location with the Last-Event-ID it saw, and
// goes on: the caller reads one seamless stream, cut only at event
// boundaries, every event exactly once, and the POST is never sent again.
// Everything else goes to the underlying fetch unchanged.
//
// Stop is not a drop. When the caller aborts (its init.signal: before the
// POST's answer, while reading, or while waiting to reconnect) or cancels
// the body (what an SDK does when its caller stops iterating) before the
// terminal event, the helper cancels the generation: POST {Location}/cancel
// (or, before the answer, /v1/streams/{key}/cancel on the POST's origin),
// so that the next identical request generates anew. A broken connection
// cancels nothing: it is resumed. cancelOnAbort: false leaves the
// generation running for a caller that aborts, as a disconnect does.
//
// A reconnection sends the POST's credential (Authorization, x-api-key)
// again only when the Location has the POST's origin: the same scheme,
// host and port. A Location on another origin is still resumed, with none
// of the caller's credential headers and no cookies: its capability token
// (?token=) is all a reader of the Location needs, and the credential never
// reaches an origin the caller did not send it to. A redirect answering a
// reconnection is not followed: it ends the stream with a ResumeError.
//
// The cancel goes where a reconnection would, with what it sends: the
// POST's credential on the POST's origin only, the Location's token
// elsewhere.
//
// A plain ES module, no dependencies: Node 18+, Deno, Bun and browsers.
// It is also the npm package @reprise-dev/client (package.json here): this
// file for import, reprise.cjs for require(), which build.mjs writes from
// it (run node build.mjs after an edit), and the types in reprise.d.ts.

const STREAMING = /\/v1\/(chat\/completions|responses|messages|audio\/speech)\/?$/;

/** Event types that end a stream with its result. */
const TERMINAL = new Set(["response.completed", "response.incomplete", "message_stop", "speech.audio.done"]);

/**
 * @typedef {object} Options
 * @property {typeof globalThis.fetch} [fetch] the fetch to wrap (default globalThis.fetch)
 * @property {number} [maxAttempts] reconnections in a row without an event before the stream errors (default 8)
 * @property {number} [retryDelay] wait before the first reconnection, ms, until the server's retry: field says otherwise (default 1000)
 * @property {number} [maxDelay] the longest wait between reconnections, ms (default 10000)
 * @property {(info: {url: string, lastEventId: string, attempt: number}) => void} [onResume] called before each reconnection
 * @property {boolean} [cancelOnAbort] cancel the generation when the caller aborts or cancels the body before the terminal event (default true)
 */

/** How long a cancel may take, ms: it is sent without the caller's aborted signal. */
const CANCEL_TIMEOUT = 5000;

/** The error a resumed stream ends with when it cannot go on. */
class ResumeError extends Error {
  /** @param {string} message @param {number} [status] */
  constructor(message, status) {
    super(message);
    this.name = "ResumeError";
    /** the HTTP status of the last reconnection, if it got one */
    this.status = status;
  }
}

/**
 * Returns a fetch that resumes reprise streams (see the module comment).
 * @param {Options} [options]
 * @returns {typeof globalThis.fetch}
 */
function createFetch(options = {}) {
  const base = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const opts = {
    maxAttempts: options.maxAttempts ?? 8,
    retryDelay: options.retryDelay ?? 1000,
    maxDelay: options.maxDelay ?? 10000,
    onResume: options.onResume,
    cancelOnAbort: options.cancelOnAbort ?? true,
  };
  const recent = new RecentKeys(64, 10 * 60 * 1000);

  return async function repriseFetch(input, init = {}) {
    const isRequest = typeof Request !== "undefined" && input instanceof Request;
    const url = isRequest ? input.url : String(input instanceof URL ? input.href : input);
    const method = (init.method ?? (isRequest ? input.method : "GET")).toUpperCase();
    if (method !== "POST" || !STREAMING.test(new URL(url, globalThis.location?.href).pathname)) {
      return base(input, init);
    }
    const headers = new Headers(init.headers ?? (isRequest ? input.headers : undefined));
    if (!headers.has("idempotency-key")) {
      const body = typeof init.body === "string" ? init.body : null;
      const retry = Number(headers.get("x-stainless-retry-count") ?? 0) > 0;
      headers.set("Idempotency-Key", recent.key(url, body, retry));
    }
    const signal = init.signal ?? (isRequest ? input.signal : null);
    const postURL = new URL(url, globalThis.location?.href);
    let res;
    try {
      res = await base(input, { ...init, headers });
    } catch (err) {
      if (signal?.aborted && opts.cancelOnAbort) {
        // Aborted before the answer: the generation may have started.
        await cancelGeneration(base, keyCancelURL(postURL, headers.get("idempotency-key")), keptHeaders(headers, true));
      }
      throw err;
    }
    const location = res.headers.get("location");
    if (!res.ok || !res.body || !location || !isEventStream(res)) {
      return res;
    }
    const resume = new URL(location, postURL);
    const sameOrigin = resume.origin !== "null" && resume.origin === postURL.origin;
    const kept = keptHeaders(headers, sameOrigin);
    const stop = opts.cancelOnAbort ? once(() => cancelGeneration(base, locationCancelURL(resume), kept)) : null;
    const body = resumable(res.body, resume.href, kept, signal, base, opts, stop);
    return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
  };
}

/**
 * The cancel of the key the POST sent, on the POST's origin: the
 * streaming path's /v1/… replaced by /v1/streams/{key}/cancel.
 * @param {URL} postURL @param {string} key
 */
function keyCancelURL(postURL, key) {
  const u = new URL(postURL);
  u.pathname = u.pathname.replace(STREAMING, `/v1/streams/${encodeURIComponent(key)}/cancel`);
  u.search = "";
  u.hash = "";
  return u.href;
}

/** The cancel of a Location: its path + /cancel, its query (the ?token= capability) kept. @param {URL} loc */
function locationCancelURL(loc) {
  const u = new URL(loc);
  u.pathname = u.pathname.replace(/\/$/, "") + "/cancel";
  u.hash = "";
  return u.href;
}

/**
 * Asks reprise to cancel a generation, best-effort: it resolves, never
 * rejects, once reprise answered or CANCEL_TIMEOUT passed.
 * @param {typeof globalThis.fetch} base
 * @param {string} url
 * @param {{headers: Headers, credentials: RequestCredentials}} kept what it sends (keptHeaders)
 * @returns {Promise<void>}
 */
async function cancelGeneration(base, url, kept) {
  const headers = new Headers(kept.headers);
  headers.set("Accept", "application/json");
  try {
    const res = await base(url, {
      method: "POST",
      headers,
      credentials: kept.credentials,
      redirect: "manual",
      cache: "no-store",
      signal: AbortSignal.timeout?.(CANCEL_TIMEOUT),
    });
    await res.body?.cancel();
  } catch {
    // best-effort: the generation runs on, as for a disconnect
  }
}

/** f, called at most once: later calls return the first call's result. @template T @param {() => T} f */
function once(f) {
  /** @type {{v: T} | null} */
  let r = null;
  return () => (r ??= { v: f() }).v;
}

/** @param {Response} res */
function isEventStream(res) {
  return (res.headers.get("content-type") ?? "").toLowerCase().startsWith("text/event-stream");
}

/**
 * Keys given to requests lately, by URL and body, so an SDK's retry of the
 * same request (x-stainless-retry-count ≥ 1) gets the same key and attaches.
 */
class RecentKeys {
  /** @param {number} size @param {number} ttl */
  constructor(size, ttl) {
    this.size = size;
    this.ttl = ttl;
    /** @type {Map<string, {key: string, at: number}>} */
    this.byRequest = new Map();
  }

  /** @param {string} url @param {string|null} body @param {boolean} retry */
  key(url, body, retry) {
    const now = Date.now();
    const id = body === null ? null : url + "\n" + body;
    const seen = id === null ? undefined : this.byRequest.get(id);
    if (retry && seen && now - seen.at < this.ttl) {
      return seen.key;
    }
    const key = globalThis.crypto.randomUUID();
    if (id !== null) {
      this.byRequest.delete(id);
      this.byRequest.set(id, { key, at: now });
      if (this.byRequest.size > this.size) {
        this.byRequest.delete(this.byRequest.keys().next().value);
      }
    }
    return key;
  }
}

/** Headers a resume sends again: the caller's credential (to the POST's origin only) and API version. */
const KEPT = ["authorization", "x-api-key", "anthropic-version", "anthropic-beta", "openai-organization", "openai-project"];

/** Headers that carry the caller's credential: never sent to a Location on another origin. */
const CREDENTIALS = new Set(["authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"]);

/**
 * The headers each reconnection sends: the kept ones of the POST's,
 * without its credentials unless the Location is of its origin.
 * @param {Headers} sent the POST's headers
 * @param {boolean} sameOrigin
 * @returns {{headers: Headers, credentials: RequestCredentials}}
 */
function keptHeaders(sent, sameOrigin) {
  const headers = new Headers({ Accept: "text/event-stream" });
  for (const h of KEPT) {
    const v = sent.get(h);
    if (v !== null && (sameOrigin || !CREDENTIALS.has(h))) headers.set(h, v);
  }
  return { headers, credentials: sameOrigin ? "same-origin" : "omit" };
}

/**
 * The stream the caller reads: first's events, then those of each
 * reconnection to resumeURL, whole events only.
 * @param {ReadableStream<Uint8Array>} first
 * @param {string} resumeURL
 * @param {{headers: Headers, credentials: RequestCredentials}} kept what each reconnection sends (keptHeaders)
 * @param {AbortSignal|undefined|null} signal
 * @param {typeof globalThis.fetch} base
 * @param {{maxAttempts: number, retryDelay: number, maxDelay: number, onResume?: Function}} opts
 * @param {(() => Promise<void>) | null} stop cancels the generation (once), or null when the caller's abort must not
 * @returns {ReadableStream<Uint8Array>}
 */
function resumable(first, resumeURL, kept, signal, base, opts, stop) {
  const parser = new EventParser();
  let reader = first.getReader();
  let delay = opts.retryDelay;
  let attempt = 0; // reconnections since the last event
  let done = false; // a terminal or final error event was passed on
  let over = false; // the stream ended by itself: closed, or failed with the helper's error

  /** The caller left before the terminal event: cancel the generation. */
  const abandon = () => (stop && !done && !over ? stop() : Promise.resolve());
  /** The stream ended: the caller's abort no longer concerns it. */
  const finish = () => {
    over = true;
    signal?.removeEventListener("abort", abandon);
  };
  if (stop && signal) {
    if (signal.aborted) abandon();
    else signal.addEventListener("abort", abandon, { once: true });
  }

  /** Opens the next reader, or returns null when the stream is over. */
  async function reconnect() {
    for (;;) {
      if (signal?.aborted) throw signal.reason ?? new DOMException("aborted", "AbortError");
      if (over) return null;
      attempt++;
      if (attempt > opts.maxAttempts) {
        throw new ResumeError(`reprise: the stream broke and ${opts.maxAttempts} reconnections got no event`);
      }
      await sleep(Math.min(opts.maxDelay, delay * 2 ** (attempt - 1)), signal);
      opts.onResume?.({ url: resumeURL, lastEventId: parser.lastId, attempt });
      const headers = new Headers(kept.headers);
      if (parser.lastId !== "") headers.set("Last-Event-ID", parser.lastId);
      let res;
      try {
        // No redirect is followed: it could take the credential elsewhere.
        res = await base(resumeURL, { method: "GET", headers, signal, cache: "no-store", credentials: kept.credentials, redirect: "manual" });
      } catch (err) {
        if (signal?.aborted) throw err;
        continue; // the network again: next attempt
      }
      if (res.status === 204) return null; // nothing follows the cursor: the stream is complete
      if (res.ok && res.body && isEventStream(res)) return res.body.getReader();
      await res.body?.cancel();
      if (res.status === 429 || res.status >= 500) continue;
      throw new ResumeError(`reprise: resuming the stream answered ${res.status}`, res.status);
    }
  }

  /** Passes on the next events, or ends the stream. @param {ReadableStreamDefaultController<Uint8Array>} controller */
  async function step(controller) {
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (err) {
        if (signal?.aborted) throw err;
        chunk = { done: true, value: undefined, broken: true };
      }
      if (over) return; // the caller cancelled the body
      if (!chunk.done) {
        const out = [];
        for (const ev of parser.push(chunk.value)) {
          if (ev.retry !== undefined) delay = ev.retry;
          if (ev.type === "error" && !ev.hasId) {
            // reprise cut this reader (it is shutting down, or its
            // journal is unavailable): the cursor stays, resume.
            chunk = { done: true, value: undefined };
            break;
          }
          if (ev.type === "reset") {
            finish();
            controller.error(new ResumeError("reprise: the generation this stream read failed; a new one started"));
            await reader.cancel().catch(() => {});
            return;
          }
          if (ev.isData) attempt = 0;
          out.push(ev.raw);
          if (ev.final) done = true;
        }
        for (const raw of out) controller.enqueue(raw);
        if (!chunk.done) {
          if (out.length > 0) return;
          continue;
        }
        await reader.cancel().catch(() => {});
      }
      // The reader ended, cleanly or not.
      if (done) {
        finish();
        controller.close();
        return;
      }
      parser.dropPartial(); // a cut event is read again whole
      const next = await reconnect();
      if (over) {
        await next?.cancel().catch(() => {});
        return;
      }
      if (next === null) {
        finish();
        controller.close();
        return;
      }
      reader = next;
    }
  }

  return new ReadableStream({
    async pull(controller) {
      try {
        await step(controller);
      } catch (err) {
        if (signal?.aborted) await abandon(); // the caller's abort, not the network's
        finish();
        throw err;
      }
    },
    async cancel(reason) {
      const stopping = abandon();
      finish();
      await Promise.all([reader.cancel(reason).catch(() => {}), stopping]);
    },
  });
}

/** @param {number} ms @param {AbortSignal|undefined|null} signal */
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(t);
      reject(signal.reason ?? new DOMException("aborted", "AbortError"));
    }, { once: true });
  });
}

/**
 * @typedef {object} ParsedEvent
 * @property {Uint8Array} raw the event's bytes as received, its blank line included
 * @property {string} type the event: field ("" when absent)
 * @property {boolean} hasId whether it had an id: field
 * @property {boolean} isData whether it had a data: field
 * @property {boolean} final a terminal event, or an error that ends the generation
 * @property {number} [retry] its retry: field, ms
 */

const LF = 10;
const CR = 13;
const decoder = new TextDecoder();

/**
 * Splits an SSE byte stream into whole events, keeping their bytes
 * unchanged, and reads the fields the resume needs (WHATWG HTML
 * §9.2.6: lines end in CRLF, LF or CR; a blank line ends an event).
 */
class EventParser {
  constructor() {
    /** @type {Uint8Array} */
    this.buf = new Uint8Array(0);
    this.start = 0; // where the current event starts in buf
    this.scan = 0; // where the next line starts in buf
    this.lastId = "";
    this.reset();
  }

  reset() {
    this.type = "";
    this.data = [];
    this.id = null;
    this.retry = undefined;
    this.isData = false;
  }

  /** Drops the bytes of an event that did not end. */
  dropPartial() {
    this.buf = new Uint8Array(0);
    this.start = 0;
    this.scan = 0;
    this.reset();
  }

  /**
   * Takes the next bytes; returns the events they complete.
   * @param {Uint8Array} bytes
   * @returns {ParsedEvent[]}
   */
  push(bytes) {
    const rest = this.buf.subarray(this.start);
    const buf = new Uint8Array(rest.length + bytes.length);
    buf.set(rest);
    buf.set(bytes, rest.length);
    this.scan -= this.start;
    this.start = 0;
    this.buf = buf;
    /** @type {ParsedEvent[]} */
    const events = [];
    for (;;) {
      let end = this.scan;
      while (end < buf.length && buf[end] !== LF && buf[end] !== CR) end++;
      if (end >= buf.length) break;
      let next = end + 1;
      if (buf[end] === CR) {
        if (next >= buf.length) break; // a CRLF may be split: wait for the next byte
        if (buf[next] === LF) next++;
      }
      const line = buf.subarray(this.scan, end);
      this.scan = next;
      if (line.length === 0) {
        events.push(this.dispatch(buf.subarray(this.start, next)));
        this.start = next;
        continue;
      }
      this.field(decoder.decode(line));
    }
    return events;
  }

  /** @param {string} line */
  field(line) {
    if (line.startsWith(":")) return;
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (name) {
      case "event":
        this.type = value;
        break;
      case "data":
        this.data.push(value);
        this.isData = true;
        break;
      case "id":
        if (!value.includes("\0")) this.id = value;
        break;
      case "retry":
        if (/^[0-9]+$/.test(value)) this.retry = Number(value);
        break;
    }
  }

  /** @param {Uint8Array} raw @returns {ParsedEvent} */
  dispatch(raw) {
    if (this.id !== null) this.lastId = this.id;
    const data = this.data.join("\n");
    const ev = {
      raw: raw.slice(),
      type: this.type,
      hasId: this.id !== null && this.id !== "",
      isData: this.isData,
      final: false,
      retry: this.retry,
    };
    ev.final = isTerminal(this.type, data) || (this.type === "error" && ev.hasId);
    this.reset();
    return ev;
  }
}

/**
 * Whether an event ends its stream with a result: chat's data: [DONE], or
 * a terminal type (as event: or as the data's "type").
 * @param {string} type @param {string} data
 */
function isTerminal(type, data) {
  if (data === "[DONE]" && (type === "" || type === "message")) return true;
  if (TERMINAL.has(type)) return true;
  if (type === "" && data.startsWith("{") && data.includes('"type"')) {
    try {
      return TERMINAL.has(JSON.parse(data)?.type);
    } catch {
      return false;
    }
  }
  return false;
}

/** A fetch that resumes reprise streams, with the default options. */
const fetch = createFetch();

exports.ResumeError = ResumeError;
exports.createFetch = createFetch;
exports.EventParser = EventParser;
exports.fetch = fetch;
exports.default = fetch;
