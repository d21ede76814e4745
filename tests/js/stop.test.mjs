// Stop is not a drop, through the npm openai SDK with web/client/reprise.js
// (the source tree) as its fetch, against the real proxy: a caller that
// aborts mid-stream (its AbortController) or stops iterating (break) has
// the helper cancel the generation — the key's status becomes cancelled —
// and the identical request again (Regenerate) generates anew; a stream
// the network cuts is resumed, its generation left running.
// tests/node_client_test.go (TestJSClientStop) starts the proxy, the fake
// model and the link, passes the cases in REPRISE_STOP, runs this file
// with node --test, then checks the upstream ledger: two generations for a
// stop (the first aborted early), one for a drop.
import { test } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import OpenAI from "openai";

import { createFetch } from "../../web/client/reprise.js";

/**
 * @typedef {object} StopCase
 * @property {string} name
 * @property {"abort"|"break"|"drop"} how
 * @property {string} baseURL reprise, or a link to it that cuts the stream once (drop)
 * @property {string} prompt
 * @property {string} want the text the fake model answers
 */

/** @type {StopCase[]} */
const cases = JSON.parse(process.env.REPRISE_STOP ?? "[]");
const apiKey = "sk-test";

/** The key's status as its Location answers it, once it is state (polled, bounded). */
async function waitState(baseURL, location, state) {
  const url = new URL(location, baseURL);
  const deadline = Date.now() + 20000;
  let last;
  for (;;) {
    const res = await fetch(url, { headers: { Accept: "application/json", Authorization: `Bearer ${apiKey}` } });
    last = await res.json();
    if (res.ok && last.state === state) return last;
    if (Date.now() > deadline) assert.fail(`status ${JSON.stringify(last)}, want ${state}`);
    await sleep(20); // polling a server's state; bounded above
  }
}

/**
 * Streams the prompt through the SDK; stop(n, controller) is asked after
 * each chunk whether to stop there. Returns the text, the key and Location.
 */
async function chat(client, prompt, stop = () => false) {
  const ac = new AbortController();
  const { data: stream, response } = await client.chat.completions
    .create({ model: "mock-1", messages: [{ role: "user", content: prompt }], stream: true }, { signal: ac.signal })
    .withResponse();
  let text = "";
  let n = 0;
  let stopped = false;
  try {
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      if (stop(++n, ac)) {
        stopped = true;
        break;
      }
    }
  } catch (err) {
    if (!ac.signal.aborted) throw err;
  }
  stopped ||= ac.signal.aborted; // the SDK ends an aborted stream quietly, or with its abort error
  return { text, stopped, key: response.headers.get("idempotency-key"), location: response.headers.get("location") };
}

test("stop and regenerate", { skip: cases.length === 0 && "REPRISE_STOP is set by tests/node_client_test.go" }, async (t) => {
  for (const c of cases) {
    await t.test(c.name, async () => {
      const client = new OpenAI({ baseURL: c.baseURL + "/v1", apiKey, fetch: createFetch({ retryDelay: 50 }), maxRetries: 0 });
      if (c.how === "drop") {
        const got = await chat(client, c.prompt);
        assert.equal(got.text, c.want, "the cut stream resumed, every token once");
        assert.equal((await waitState(c.baseURL, got.location, "completed")).generation, 1);
        return;
      }
      const stop = c.how === "abort" ? (n, ac) => (n === 3 && ac.abort(), false) : (n) => n === 3;
      const first = await chat(client, c.prompt, stop);
      assert.ok(first.stopped, "the caller stopped");
      assert.notEqual(first.text, c.want);
      const st = await waitState(c.baseURL, first.location, "cancelled");
      assert.equal(st.key, first.key);

      const again = await chat(client, c.prompt); // Regenerate: the identical request
      assert.equal(again.text, c.want);
      assert.notEqual(again.key, first.key, "a new key");
      await waitState(c.baseURL, again.location, "completed");
    });
  }
});
