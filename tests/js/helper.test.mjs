// How web/client/reprise.js ends a stream its Location cannot continue,
// against a node:http server that answers the POST with one event and a
// clean end before any terminal event. Runs on its own (node --test) and
// from tests/node_client_test.go.
import { test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";

import { createFetch, ResumeError } from "../../web/client/reprise.js";

const first = 'retry: 10\nid: 1\ndata: {"n":1}\n\n';

/** Serves the POST, then answers each resume with resume(res, req). */
async function server(resume) {
  const seen = [];
  const srv = http.createServer((req, res) => {
    req.resume();
    if (req.method === "POST") {
      seen.push({ key: req.headers["idempotency-key"] });
      res.writeHead(200, { "Content-Type": "text/event-stream", Location: "/v1/streams/k" });
      res.end(first);
      return;
    }
    seen.push({ lastEventId: req.headers["last-event-id"], auth: req.headers.authorization });
    resume(res, req);
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${srv.address().port}`, seen, close: () => srv.close() };
}

async function readAll(res) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return text;
    text += value;
  }
}

const cases = [
  { name: "204: complete", resume: (res) => res.writeHead(204).end(), want: first },
  {
    name: "the rest",
    resume: (res) => res.writeHead(200, { "Content-Type": "text/event-stream" }).end("id: 2\ndata: [DONE]\n\n"),
    want: first + "id: 2\ndata: [DONE]\n\n",
  },
  { name: "404", resume: (res) => res.writeHead(404).end("{}"), error: 404 },
  {
    name: "reset",
    resume: (res) => res.writeHead(200, { "Content-Type": "text/event-stream" }).end('id: 9\nevent: reset\ndata: {"generation":2}\n\n'),
    error: true,
  },
  { name: "503 until the attempts run out", resume: (res) => res.writeHead(503).end("{}"), error: true },
];

for (const c of cases) {
  test(c.name, async () => {
    const s = await server(c.resume);
    try {
      const fetch = createFetch({ maxAttempts: 2, maxDelay: 20 });
      const res = await fetch(s.url + "/v1/chat/completions", {
        method: "POST",
        headers: { "Content-Type": "application/json", Authorization: "Bearer sk-x" },
        body: "{}",
      });
      if (c.error) {
        await assert.rejects(readAll(res), (err) => err instanceof ResumeError && (c.error === true || err.status === c.error));
      } else {
        assert.equal(await readAll(res), c.want);
      }
      assert.match(s.seen[0].key, /^[0-9a-f-]{36}$/);
      assert.equal(s.seen[1].lastEventId, "1");
      assert.equal(s.seen[1].auth, "Bearer sk-x", "a resume sends the credential again");
    } finally {
      s.close();
    }
  });
}

test("the caller's own key is kept", async () => {
  const s = await server((res) => res.writeHead(204).end());
  try {
    const res = await createFetch()(s.url + "/v1/chat/completions", { method: "POST", body: "{}", headers: { "Idempotency-Key": "mine" } });
    assert.equal(s.seen[0].key, "mine", "the caller's key is kept");
    await readAll(res);
  } finally {
    s.close();
  }
});
