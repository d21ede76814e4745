// How web/client/reprise.js ends a stream its Location cannot continue,
// against a node:http server that answers the POST with one event and a
// clean end before any terminal event; and where its resumes send the
// caller's credential: to the POST's origin only, never to a Location on
// another (a second server on another port), nor through a redirect. Runs
// on its own (node --test) and from tests/node_client_test.go.
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

const rest = "id: 2\ndata: [DONE]\n\n";
const credentials = ["authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"];

/**
 * Two loopback servers, two origins (two ports): the POST goes to
 * origin, which cuts its answer after the first event and names
 * location(other) as its Location; each records the requests it got.
 */
async function twoOrigins(location, originGet) {
  const listen = async (handle) => {
    const got = [];
    const srv = http.createServer((req, res) => {
      req.resume();
      got.push({ method: req.method, url: req.url, headers: req.headers });
      handle(req, res);
    });
    await new Promise((r) => srv.listen(0, "127.0.0.1", r));
    return { url: `http://127.0.0.1:${srv.address().port}`, got, close: () => srv.close() };
  };
  const serveRest = (req, res) => res.writeHead(200, { "Content-Type": "text/event-stream" }).end(rest);
  const other = await listen(serveRest);
  const origin = await listen((req, res) => {
    if (req.method === "GET") return originGet(req, res, other.url);
    res.writeHead(200, { "Content-Type": "text/event-stream", Location: location(other.url) });
    res.write(first, () => res.destroy()); // cut before the terminal event
  });
  return { origin, other, close: () => (origin.close(), other.close()) };
}

const originCases = [
  {
    name: "same origin: resumed with the credential",
    location: () => "/v1/streams/k?token=cap",
    originGet: (req, res) => res.writeHead(200, { "Content-Type": "text/event-stream" }).end(rest),
    want: first + rest,
    originGets: 1,
    otherGets: 0,
  },
  {
    name: "another origin: resumed with the token alone",
    location: (other) => other + "/v1/streams/k?token=cap",
    want: first + rest,
    originGets: 0,
    otherGets: 1,
  },
  {
    name: "a redirect to another origin is not followed",
    location: () => "/v1/streams/k?token=cap",
    originGet: (req, res, other) => res.writeHead(302, { Location: other + "/v1/streams/k?token=cap" }).end(),
    error: 302,
    originGets: 1,
    otherGets: 0,
  },
];

for (const c of originCases) {
  test(c.name, async () => {
    const s = await twoOrigins(c.location, c.originGet);
    try {
      const fetch = createFetch({ maxAttempts: 2, retryDelay: 1, maxDelay: 20 });
      const res = await fetch(s.origin.url + "/v1/chat/completions", {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          "anthropic-version": "2023-06-01",
          ...Object.fromEntries(credentials.map((h) => [h, "secret-" + h])),
        },
        body: "{}",
      });
      if (c.error) {
        await assert.rejects(readAll(res), (err) => err instanceof ResumeError && err.status === c.error);
      } else {
        assert.equal(await readAll(res), c.want);
      }
      const originGets = s.origin.got.filter((r) => r.method === "GET");
      assert.equal(originGets.length, c.originGets, "GETs on the POST's origin");
      assert.equal(s.other.got.length, c.otherGets, "requests on the other origin");
      for (const r of s.other.got) {
        for (const h of credentials) assert.equal(r.headers[h], undefined, `the other origin got ${h}`);
        assert.equal(new URL(r.url, "http://x").searchParams.get("token"), "cap");
        assert.equal(r.headers["last-event-id"], "1");
        assert.equal(r.headers["anthropic-version"], "2023-06-01");
      }
      for (const r of originGets) {
        assert.equal(r.headers.authorization, "secret-authorization", "a resume on the POST's origin sends the credential");
        assert.equal(r.headers["x-api-key"], "secret-x-api-key");
      }
    } finally {
      s.close();
    }
  });
}
