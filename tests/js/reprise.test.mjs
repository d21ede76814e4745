// The JavaScript client helper (web/client/reprise.js) under the npm openai
// SDK, against the real proxy through links that drop. tests/client_js_test.go
// starts the proxy, the links and the fake model, passes the cases in
// REPRISE_CASES, runs this file with node --test, then checks the upstream
// ledger: one request and one generation per case.
import { test } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";

import { createFetch, EventParser } from "../../web/client/reprise.js";

/** @type {{name: string, api: string, baseURL: string, prompt: string, want: string, tokens: number, maxRetries?: number, drops: number}[]} */
const cases = JSON.parse(process.env.REPRISE_CASES ?? "[]");

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

test("cases", { skip: cases.length === 0 && "REPRISE_CASES is set by tests/client_js_test.go" }, async (t) => {
  for (const c of cases) {
    await t.test(c.name, async () => {
      const resumes = [];
      const fetch = createFetch({ onResume: (info) => resumes.push(info) });
      const client = new OpenAI({ baseURL: c.baseURL + "/v1", apiKey: "sk-test", fetch, maxRetries: c.maxRetries ?? 0 });
      if (c.api === "chat") {
        const { data: stream, response } = await client.chat.completions
          .create({ model: "mock-1", messages: [{ role: "user", content: c.prompt }], stream: true })
          .withResponse();
        assert.match(response.headers.get("idempotency-key") ?? "", /^[0-9a-f-]{36}$/, "the helper added a UUID key");
        let text = "";
        let chunks = 0;
        for await (const chunk of stream) {
          text += chunk.choices[0]?.delta?.content ?? "";
          chunks++;
        }
        assert.equal(text, c.want);
        assert.equal(chunks, c.tokens + 2, "role, tokens, stop: each once");
      } else if (c.api === "responses") {
        const stream = await client.responses.create({ model: "mock-1", input: c.prompt, stream: true });
        let text = "";
        let seq = -1;
        let last = "";
        for await (const ev of stream) {
          assert.ok(ev.sequence_number > seq, `sequence_number ${ev.sequence_number} after ${seq}: an event came twice`);
          seq = ev.sequence_number;
          if (ev.type === "response.output_text.delta") text += ev.delta;
          last = ev.type;
        }
        assert.equal(text, c.want);
        assert.equal(last, "response.completed");
      } else {
        throw new Error(`unknown api ${c.api}`);
      }
      assert.equal(resumes.length, c.drops, `reconnections: ${JSON.stringify(resumes)}`);
      for (const r of resumes) assert.ok(r.lastEventId !== "", "each resume had a cursor");
    });
  }
});
