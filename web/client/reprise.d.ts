// Types of reprise.js, written by hand (reprise.d.cts, the same for
// require(), is generated from this file by build.mjs).

/** The fetch the helper wraps: globalThis.fetch, or any with its signature. */
export type Fetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>;

/** What onResume is told before each reconnection. */
export interface ResumeInfo {
  /** the stream's Location, absolute */
  url: string;
  /** the id of the last whole event read ("" before the first) */
  lastEventId: string;
  /** reconnections since the last event, from 1 */
  attempt: number;
}

/** The options of createFetch; every one has a default. */
export interface Options {
  /** the fetch to wrap (default: globalThis.fetch, looked up at each call) */
  fetch?: Fetch | undefined;
  /** reconnections in a row without an event before the stream errors with a ResumeError (default 8) */
  maxAttempts?: number | undefined;
  /** wait before the first reconnection, ms, until the server's retry: field says otherwise; it doubles while reconnections get nothing (default 1000) */
  retryDelay?: number | undefined;
  /** the longest wait between reconnections, ms (default 10000) */
  maxDelay?: number | undefined;
  /** called before each reconnection */
  onResume?: ((info: ResumeInfo) => void) | undefined;
  /**
   * cancel the generation (POST its Location + /cancel) when the caller
   * aborts its signal or cancels the body before the terminal event, so
   * that the same request again generates anew; false leaves it running,
   * as a broken connection does (default true)
   */
  cancelOnAbort?: boolean | undefined;
}

/**
 * Returns a fetch that resumes reprise streams: a streaming POST gets an
 * Idempotency-Key when it has none, and when its event stream breaks
 * before the terminal event the fetch reconnects to the answer's Location
 * with the last Last-Event-ID and goes on. A caller that aborts or cancels
 * the body before the terminal event cancels the generation (cancelOnAbort).
 * Every other request goes to the wrapped fetch unchanged.
 */
export declare function createFetch(options?: Options): typeof globalThis.fetch;

/** A fetch that resumes reprise streams, with the default options. */
export declare const fetch: typeof globalThis.fetch;
export default fetch;

/** The error a resumed stream ends with when it cannot go on. */
export declare class ResumeError extends Error {
  constructor(message: string, status?: number);
  name: "ResumeError";
  /** the HTTP status of the last reconnection, if it got one */
  status: number | undefined;
}

/** One whole server-sent event, as EventParser.push returns it. */
export interface ParsedEvent {
  /** the event's bytes as received, its blank line included */
  raw: Uint8Array;
  /** its event: field ("" when absent) */
  type: string;
  /** whether it had a non-empty id: field */
  hasId: boolean;
  /** whether it had a data: field */
  isData: boolean;
  /** a terminal event, or an error that ends the generation */
  final: boolean;
  /** its retry: field, ms */
  retry: number | undefined;
}

/**
 * Splits a server-sent event byte stream into whole events, keeping their
 * bytes unchanged (WHATWG HTML §9.2.6).
 */
export declare class EventParser {
  constructor();
  /** the id of the last whole event that had one ("" before) */
  lastId: string;
  /** Takes the next bytes; returns the events they complete. */
  push(bytes: Uint8Array): ParsedEvent[];
  /** Drops the bytes of an event that did not end. */
  dropPartial(): void;
}
