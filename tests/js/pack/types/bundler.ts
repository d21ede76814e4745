// The package's types under a bundler's resolution.
import repriseFetch, { createFetch, ResumeError } from "@reprise-dev/client";
import type { Options } from "@reprise-dev/client";

const options: Options = { maxDelay: 2000 };
const resuming: typeof globalThis.fetch = createFetch(options);
const same: typeof globalThis.fetch = repriseFetch;
const status: number | undefined = new ResumeError("x", 404).status;

// @ts-expect-error maxDelay is a number
createFetch({ maxDelay: "2s" });

export { resuming, same, status };
