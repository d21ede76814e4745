// The packed @reprise-dev/client in a fresh CommonJS project ("type":
// "commonjs", npm init's default): tests/node_client_test.go packs
// web/client with npm pack, installs the tarball offline into a new
// project, copies this file there as test.js (with sdk.mjs) and runs it
// with node --test and the cases in REPRISE_CASES. require() resolves the
// package to its CommonJS build, reprise.cjs; the SDKs are required too.
const { test } = require("node:test");
const assert = require("node:assert/strict");
const { OpenAI } = require("openai");
const { Anthropic } = require("@anthropic-ai/sdk");
const { streamText } = require("ai");
const { createOpenAICompatible } = require("@ai-sdk/openai-compatible");

const reprise = require("@reprise-dev/client");
const { createFetch, fetch, ResumeError, EventParser } = reprise;

test("require resolves to the CommonJS build", () => {
  assert.match(require.resolve("@reprise-dev/client"), /\/node_modules\/@reprise-dev\/client\/reprise\.cjs$/);
  assert.equal(typeof createFetch, "function");
  assert.equal(reprise.default, fetch, "the default export is fetch");
  assert.equal(reprise.__esModule, true, "transpiled default imports get fetch");
  assert.ok(new ResumeError("x", 404) instanceof Error);
  assert.equal(new ResumeError("x", 404).status, 404);
  assert.equal(new EventParser().lastId, "");
});

test("cases", async (t) => {
  // The runner is an ES module (import() from CommonJS); what it runs is
  // what this file required.
  const { cases, run } = await import("./sdk.mjs");
  const deps = { createFetch, OpenAI, Anthropic, streamText, createOpenAICompatible };
  for (const c of cases()) {
    await t.test(c.name, () => run(c, deps));
  }
});
