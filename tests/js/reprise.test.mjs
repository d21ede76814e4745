// The JavaScript client helper (web/client/reprise.js, from the source
// tree) under the npm openai, @anthropic-ai/sdk and Vercel ai SDKs,
// against the real proxy through links that drop (the cases: pack/sdk.mjs).
// tests/node_client_test.go starts the proxy, the links and the fake model,
// passes the cases in REPRISE_CASES, runs this file with node --test, then
// checks the upstream ledger: one request and one generation per case.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import Anthropic from "@anthropic-ai/sdk";
import { streamText } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";

import { createFetch, EventParser } from "../../web/client/reprise.js";
import { cases as loadCases, run } from "./pack/sdk.mjs";

const cases = loadCases();

test("the parser keeps events whole and their bytes unchanged", () => {
  const p = new EventParser();
  const enc = new TextEncoder();
  const evs = [...p.push(enc.encode("retry: 50\nid: 1\ndata: {\"a\":1}\n\nid: 2\r\nda")), ...p.push(enc.encode("ta: [DONE]\r\n\r\n"))];
  assert.equal(evs.length, 2);
  assert.equal(new TextDecoder().decode(evs[1].raw), "id: 2\r\ndata: [DONE]\r\n\r\n");
  assert.equal(evs[0].retry, 50);
  assert.equal(evs[1].final, true);
  assert.equal(p.lastId, "2");
  p.push(enc.encode("id: 3\ndata: cut"));
  p.dropPartial();
  assert.deepEqual(p.push(enc.encode("event: error\ndata: {}\n\n")).map((e) => [e.type, e.hasId, e.final]), [["error", false, false]]);
});

test("cases", { skip: cases.length === 0 && "REPRISE_CASES is set by tests/node_client_test.go" }, async (t) => {
  for (const c of cases) {
    await t.test(c.name, () => run(c, { createFetch, OpenAI, Anthropic, streamText, createOpenAICompatible }));
  }
});
