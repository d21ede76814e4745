// The packed @reprise-dev/client in a fresh ES module project ("type":
// "module"): tests/node_client_test.go packs web/client with npm pack,
// installs the tarball offline into a new project, copies this file there
// as test.js (with sdk.mjs) and runs it with node --test and the cases in
// REPRISE_CASES. The package resolves to its ES module, reprise.js.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { streamText } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";

import repriseFetch, { createFetch, fetch, ResumeError, EventParser } from "@reprise-dev/client";
import { cases, run } from "./sdk.mjs";

test("import resolves to the ES module", () => {
  assert.match(import.meta.resolve("@reprise-dev/client"), /\/node_modules\/@reprise-dev\/client\/reprise\.js$/);
  assert.equal(typeof createFetch, "function");
  assert.equal(repriseFetch, fetch, "the default export is fetch");
  assert.ok(new ResumeError("x", 404) instanceof Error);
  assert.equal(new EventParser().lastId, "");
});

for (const c of cases()) {
  test(c.name, () => run(c, { createFetch, OpenAI, Anthropic, streamText, createOpenAICompatible }));
}
