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

// Stop is not a drop: a caller that aborts (its signal) or cancels the body
// before the terminal event cancels the generation — POST the Location +
// /cancel, or before the answer /v1/streams/{key}/cancel — and a broken
// connection cancels nothing. Against node:http servers that record every
// request; the cancel is awaited by the read that fails or the cancel()
// that resolves, so the servers have it when the test looks.

/** @param {{url: string}} r */
const isCancel = (r) => new URL(r.url, "http://x").pathname.endsWith("/cancel");

/**
 * A server whose POST answers `first` with Location location(other) and
 * then behaves as post(res) says: "open" keeps the stream open, "cut"
 * destroys it, "hold" answers nothing at all; a GET answers `rest`.
 */
async function stopServer({ post = "open", location = () => "/v1/streams/k?token=cap", head = first, other = null } = {}) {
  const got = [];
  let posted;
  const postedP = new Promise((r) => (posted = r));
  const open = [];
  const srv = http.createServer((req, res) => {
    req.resume();
    got.push({ method: req.method, url: req.url, headers: req.headers });
    if (req.method === "POST" && isCancel(req)) {
      res.writeHead(202, { "Content-Type": "application/json" }).end("{}");
      return;
    }
    if (req.method === "GET") {
      res.writeHead(200, { "Content-Type": "text/event-stream" }).end(rest);
      return;
    }
    posted();
    open.push(res);
    if (post === "hold") return;
    res.writeHead(200, { "Content-Type": "text/event-stream", Location: location(other?.url) });
    if (post === "cut") res.write(head, () => res.destroy());
    else res.write(head);
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${srv.address().port}`,
    got,
    posted: postedP,
    cancels: () => got.filter((r) => r.method === "POST" && isCancel(r)),
    close: () => {
      for (const res of open) res.destroy();
      srv.close();
    },
  };
}

/** POSTs a chat request with a credential through fetch. */
function post(fetch, url, signal) {
  return fetch(url + "/v1/chat/completions", {
    method: "POST",
    headers: { "Content-Type": "application/json", Authorization: "Bearer sk-x" },
    body: "{}",
    signal,
  });
}

test("stop: an abort while reading cancels the Location, with its token and the credential", async () => {
  const s = await stopServer();
  try {
    const ac = new AbortController();
    const res = await post(createFetch(), s.url, ac.signal);
    const reader = res.body.getReader();
    await reader.read();
    ac.abort();
    await assert.rejects(reader.read(), (err) => err.name === "AbortError");
    const c = s.cancels();
    assert.equal(c.length, 1, "one cancel");
    assert.equal(c[0].url, "/v1/streams/k/cancel?token=cap");
    assert.equal(c[0].headers.authorization, "Bearer sk-x", "the POST's origin gets the credential");
  } finally {
    s.close();
  }
});

test("stop: cancelling the body cancels the generation and reconnects nowhere", async () => {
  const s = await stopServer();
  try {
    const res = await post(createFetch({ retryDelay: 1 }), s.url);
    const reader = res.body.getReader();
    await reader.read();
    await reader.cancel();
    assert.deepEqual(s.cancels().map((r) => r.url), ["/v1/streams/k/cancel?token=cap"]);
    assert.equal(s.got.filter((r) => r.method === "GET").length, 0, "no reconnection after the cancel");
  } finally {
    s.close();
  }
});

test("stop: an abort before the answer cancels the key it sent, on the POST's origin", async () => {
  const s = await stopServer({ post: "hold" });
  try {
    const ac = new AbortController();
    const res = post(createFetch(), s.url, ac.signal);
    await s.posted;
    ac.abort();
    await assert.rejects(res, (err) => err.name === "AbortError");
    const key = s.got[0].headers["idempotency-key"];
    assert.match(key, /^[0-9a-f-]{36}$/);
    const c = s.cancels();
    assert.deepEqual(c.map((r) => r.url), [`/v1/streams/${key}/cancel`]);
    assert.equal(c[0].headers.authorization, "Bearer sk-x");
  } finally {
    s.close();
  }
});

test("stop: an abort while waiting to reconnect cancels", async () => {
  // The stream breaks after its first event, whose retry: makes the wait
  // a minute; the abort comes once the wait listens to the signal.
  const s = await stopServer({ post: "cut", head: 'retry: 60000\nid: 1\ndata: {"n":1}\n\n' });
  try {
    const ac = new AbortController();
    let waiting;
    const waits = new Promise((r) => (waiting = r));
    const add = ac.signal.addEventListener.bind(ac.signal);
    let listeners = 0;
    ac.signal.addEventListener = (type, fn, o) => {
      add(type, fn, o);
      if (type === "abort" && ++listeners === 2) waiting(); // the helper's own, then the wait's
    };
    const res = await post(createFetch({ maxDelay: 60000 }), s.url, ac.signal);
    const reader = res.body.getReader();
    await reader.read();
    const next = reader.read();
    await waits;
    ac.abort();
    await assert.rejects(next, (err) => err.name === "AbortError");
    assert.deepEqual(s.cancels().map((r) => r.url), ["/v1/streams/k/cancel?token=cap"]);
  } finally {
    s.close();
  }
});

test("stop: a broken connection cancels nothing: it resumes", async () => {
  const s = await stopServer({ post: "cut" });
  try {
    const ac = new AbortController();
    const res = await post(createFetch({ retryDelay: 1 }), s.url, ac.signal);
    assert.equal(await readAll(res), first + rest);
    ac.abort(); // after the terminal event: nothing to cancel
    assert.equal(s.cancels().length, 0);
    assert.equal(s.got.filter((r) => r.method === "GET").length, 1);
  } finally {
    s.close();
  }
});

test("stop: an abort after the terminal event cancels nothing", async () => {
  const s = await stopServer({ head: first + rest }); // the terminal event, the connection still open
  try {
    const ac = new AbortController();
    const res = await post(createFetch(), s.url, ac.signal);
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    while (!text.includes("[DONE]")) text += (await reader.read()).value;
    ac.abort();
    await reader.cancel().catch(() => {});
    assert.equal(s.cancels().length, 0);
  } finally {
    s.close();
  }
});

test("stop: cancelOnAbort: false leaves the generation running", async () => {
  const s = await stopServer();
  try {
    const ac = new AbortController();
    const res = await post(createFetch({ cancelOnAbort: false }), s.url, ac.signal);
    const reader = res.body.getReader();
    await reader.read();
    ac.abort();
    await assert.rejects(reader.read());
    const held = await stopServer({ post: "hold" });
    try {
      const ac2 = new AbortController();
      const p = post(createFetch({ cancelOnAbort: false }), held.url, ac2.signal);
      await held.posted;
      ac2.abort();
      await assert.rejects(p);
      assert.equal(held.cancels().length, 0, "before the answer");
    } finally {
      held.close();
    }
    assert.equal(s.cancels().length, 0, "while reading");
  } finally {
    s.close();
  }
});

test("stop: a Location on another origin is cancelled with its token alone", async () => {
  const other = await stopServer();
  const s = await stopServer({ location: (o) => o + "/v1/streams/k?token=cap", other });
  try {
    const ac = new AbortController();
    const res = await post(createFetch(), s.url, ac.signal);
    const reader = res.body.getReader();
    await reader.read();
    ac.abort();
    await assert.rejects(reader.read());
    assert.equal(s.cancels().length, 0, "no cancel on the POST's origin");
    const c = other.cancels();
    assert.deepEqual(c.map((r) => r.url), ["/v1/streams/k/cancel?token=cap"]);
    for (const h of credentials) assert.equal(c[0].headers[h], undefined, `the other origin got ${h}`);
  } finally {
    s.close();
    other.close();
  }
});
