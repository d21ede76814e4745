// The package's types from an ES module (the "import" condition: reprise.d.ts).
import repriseFetch, { createFetch, fetch, ResumeError, EventParser } from "@reprise-dev/client";
import type { Fetch, Options, ParsedEvent, ResumeInfo } from "@reprise-dev/client";

const onResume = (info: ResumeInfo): void => {
  const url: string = info.url;
  const cursor: string = info.lastEventId;
  const attempt: number = info.attempt;
  console.log(url, cursor, attempt);
};
const options: Options = { fetch: globalThis.fetch, maxAttempts: 3, retryDelay: 50, maxDelay: 1000, onResume };
const resuming: typeof globalThis.fetch = createFetch(options);
const plain: typeof globalThis.fetch = createFetch();
const wrapped: Fetch = createFetch({ fetch: resuming });
const answer: Promise<Response> = fetch("http://localhost:8080/v1/chat/completions", { method: "POST", body: "{}" });
const same: typeof fetch = repriseFetch;

const err = new ResumeError("reprise: resuming the stream answered 404", 404);
const status: number | undefined = err.status;
const asError: Error = err;
const name: "ResumeError" = err.name;

const parser = new EventParser();
const events: ParsedEvent[] = parser.push(new TextEncoder().encode("id: 1\ndata: x\n\n"));
const raw: Uint8Array = events[0]!.raw;
const retry: number | undefined = events[0]!.retry;
const lastId: string = parser.lastId;
parser.dropPartial();

// Not any: wrong uses are errors.
// @ts-expect-error maxAttempts is a number
createFetch({ maxAttempts: "8" });
// @ts-expect-error no such option
createFetch({ retries: 3 });
// @ts-expect-error onResume is given a ResumeInfo
createFetch({ onResume: (info: { url: number }) => info });
// @ts-expect-error fetch returns a Promise<Response>
const notText: Promise<string> = fetch("http://localhost:8080/");

export { plain, wrapped, answer, same, status, asError, name, raw, retry, lastId, notText };
