// One reprise stream read through an SDK whose fetch is the client
// helper's: the npm openai SDK (chat, responses), @anthropic-ai/sdk
// (messages) and the Vercel AI SDK (ai, with @ai-sdk/openai-compatible).
// The caller passes the helper and the SDKs in, as it loaded them (import
// or require), so the same cases check the ES module and the CommonJS
// build: tests/js/reprise.test.mjs (the source tree), and esm.mjs and
// cjs.cjs here (the packed package, in fresh projects made by
// tests/node_client_test.go).
import assert from "node:assert/strict";

/**
 * @typedef {object} Case one stream, from REPRISE_CASES (tests/node_client_test.go)
 * @property {string} name
 * @property {"chat"|"responses"|"messages"|"ai"} api
 * @property {string} baseURL reprise, through a link that cuts the stream drops times
 * @property {string} prompt
 * @property {string} want the text the fake model answers
 * @property {number} tokens
 * @property {number} [maxRetries] the SDK's own retries (default 0)
 * @property {number} drops
 *
 * @typedef {object} Deps what the caller loaded
 * @property {(options?: object) => typeof globalThis.fetch} createFetch the helper's
 * @property {any} OpenAI the openai package's default export
 * @property {any} Anthropic the @anthropic-ai/sdk package's default export
 * @property {any} streamText ai's
 * @property {any} createOpenAICompatible @ai-sdk/openai-compatible's
 */

/** The cases tests/node_client_test.go passes in REPRISE_CASES. @returns {Case[]} */
export function cases() {
  return JSON.parse(process.env.REPRISE_CASES ?? "[]");
}

const uuid = /^[0-9a-f-]{36}$/;

/**
 * Reads c's stream through its SDK with the helper as its fetch, and checks
 * the text (every event once, in order), the key the helper added and the
 * number of resumes.
 * @param {Case} c
 * @param {Deps} deps
 */
export async function run(c, deps) {
  const resumes = [];
  const fetch = deps.createFetch({ onResume: (info) => resumes.push(info) });
  const maxRetries = c.maxRetries ?? 0;
  let text = "";
  switch (c.api) {
    case "chat": {
      const client = new deps.OpenAI({ baseURL: c.baseURL + "/v1", apiKey: "sk-test", fetch, maxRetries });
      const { data: stream, response } = await client.chat.completions
        .create({ model: "mock-1", messages: [{ role: "user", content: c.prompt }], stream: true })
        .withResponse();
      assert.match(response.headers.get("idempotency-key") ?? "", uuid, "the helper added a UUID key");
      let chunks = 0;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta?.content ?? "";
        chunks++;
      }
      assert.equal(chunks, c.tokens + 2, "role, tokens, stop: each once");
      break;
    }
    case "responses": {
      const client = new deps.OpenAI({ baseURL: c.baseURL + "/v1", apiKey: "sk-test", fetch, maxRetries });
      const stream = await client.responses.create({ model: "mock-1", input: c.prompt, stream: true });
      let seq = -1;
      let last = "";
      for await (const ev of stream) {
        assert.ok(ev.sequence_number > seq, `sequence_number ${ev.sequence_number} after ${seq}: an event came twice`);
        seq = ev.sequence_number;
        if (ev.type === "response.output_text.delta") text += ev.delta;
        last = ev.type;
      }
      assert.equal(last, "response.completed");
      break;
    }
    case "messages": {
      const client = new deps.Anthropic({ baseURL: c.baseURL, apiKey: "sk-ant-test", fetch, maxRetries });
      const { data: stream, response } = await client.messages
        .create({ model: "mock-1", max_tokens: 256, messages: [{ role: "user", content: c.prompt }], stream: true })
        .withResponse();
      assert.match(response.headers.get("idempotency-key") ?? "", uuid, "the helper added a UUID key");
      const types = [];
      for await (const ev of stream) {
        if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
        if (ev.type !== "content_block_delta") types.push(ev.type);
      }
      assert.deepEqual(types, ["message_start", "content_block_start", "content_block_stop", "message_delta", "message_stop"], "each event once");
      break;
    }
    case "ai": {
      const provider = deps.createOpenAICompatible({ name: "reprise", baseURL: c.baseURL + "/v1", apiKey: "sk-test", fetch });
      const result = deps.streamText({ model: provider.chatModel("mock-1"), prompt: c.prompt, maxRetries });
      for await (const part of result.stream) {
        if (part.type === "error") throw part.error;
        if (part.type === "text-delta") text += part.text;
      }
      assert.equal(await result.finishReason, "stop");
      const { headers } = await result.response;
      assert.match(headers?.["idempotency-key"] ?? "", uuid, "the helper added a UUID key");
      break;
    }
    default:
      throw new Error(`unknown api ${c.api}`);
  }
  assert.equal(text, c.want);
  assert.equal(resumes.length, c.drops, `reconnections: ${JSON.stringify(resumes)}`);
  for (const r of resumes) assert.ok(r.lastEventId !== "", "each resume had a cursor");
}
