// The package's types from CommonJS (the "require" condition:
// reprise.d.cts). Were the types an ES module's, TypeScript would refuse
// these imports from a CommonJS file (TS1479).
import reprise = require("@reprise-dev/client");
import repriseFetch, { createFetch, fetch, ResumeError } from "@reprise-dev/client";

const resuming: typeof globalThis.fetch = reprise.createFetch({ maxAttempts: 3 });
const plain: typeof globalThis.fetch = createFetch();
const same: typeof fetch = reprise.default;
const also: typeof fetch = repriseFetch;
const status: number | undefined = new ResumeError("x", 404).status;
const err: Error = new reprise.ResumeError("x");

// @ts-expect-error maxAttempts is a number
createFetch({ maxAttempts: "8" });

export { resuming, plain, same, also, status, err };
