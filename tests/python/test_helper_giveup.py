"""The Python helper's keys for SDK retries, and how it gives up: a Location
that is gone, reconnections that get no event, a generation that failed."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

import anthropic
import httpx
import httpx2
import openai
import pytest

import reprise
from conftest import Link, Mock, Proxy
from test_helper_resume import APIS, FAST, create, delta, sync_client

CHUNK = 'data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}\n\n'


def caused_by(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of kind in exc's chain of causes."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, kind):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


class Server:
    """A plain http.server on loopback run by a handler function; it keeps
    every request it got (method, path, headers)."""

    def __init__(self, handle: Callable[[BaseHTTPRequestHandler, "Server"], None]) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # an answer without a length ends when the connection closes

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                if n:
                    self.rfile.read(n)
                server.requests.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
                handle(self, server)

            do_GET = do_POST = _any

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def of(self, method: str) -> list[tuple[str, str, dict[str, str]]]:
        return [r for r in self.requests if r[0] == method]


@pytest.fixture
def servers() -> Iterator[Callable[..., Server]]:
    made: list[Server] = []

    def make(handle: Callable[[BaseHTTPRequestHandler, Server], None]) -> Server:
        s = Server(handle)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def broken_stream(h: BaseHTTPRequestHandler, location: str, words: list[str]) -> None:
    """Answers a POST with an event stream that ends (the connection closes) before its terminal event."""
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.send_header("Location", location)
    h.end_headers()
    for i, w in enumerate(words, 1):
        h.wfile.write((f"id: {i}\n" + CHUNK % w).encode())
    h.wfile.flush()


@pytest.mark.parametrize("status", [404, 410])
def test_gone_location_raises_resume_error(status: int, servers: Callable[..., Server]) -> None:
    def handle(h: BaseHTTPRequestHandler, s: Server) -> None:
        if h.command == "POST":
            broken_stream(h, "/v1/streams/k?token=t", ["a", "b"])
        else:
            h.send_response(status)
            h.end_headers()

    srv = servers(handle)
    client = sync_client("chat", srv.url, max_retries=0)
    got: list[str] = []
    with pytest.raises(openai.APIConnectionError) as info:
        for ev in create(client, "chat", "hi", True):
            got.append(delta("chat", ev))
    err = caused_by(info.value, reprise.ResumeError)
    assert isinstance(err, reprise.ResumeError) and err.status == status, info.value
    assert isinstance(err, httpx.RemoteProtocolError) and isinstance(err, httpx2.RemoteProtocolError)
    assert got == ["a", "b"]
    assert len(srv.of("GET")) == 1  # a status a retry cannot change: no second try


def test_reconnections_without_event_run_out(servers: Callable[..., Server]) -> None:
    def handle(h: BaseHTTPRequestHandler, s: Server) -> None:
        if h.command == "POST":
            broken_stream(h, "/v1/streams/k?token=t", ["a"])
        else:
            h.send_response(503)
            h.end_headers()

    srv = servers(handle)
    http = httpx2.Client(transport=reprise.Transport(max_attempts=3, **FAST))
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="k", http_client=http, max_retries=0)
    with pytest.raises(openai.APIConnectionError) as info:
        for _ in create(client, "chat", "hi", True):
            pass
    err = caused_by(info.value, reprise.ResumeError)
    assert isinstance(err, reprise.ResumeError) and err.status == 503, info.value
    assert len(srv.of("GET")) == 3
    assert all(r[2].get("last-event-id") == "1" for r in srv.of("GET"))


def test_redirect_answering_a_resume_is_not_followed(servers: Callable[..., Server]) -> None:
    def handle(h: BaseHTTPRequestHandler, s: Server) -> None:
        if h.command == "POST":
            broken_stream(h, "/v1/streams/k?token=t", ["a"])
        elif h.path.startswith("/v1/streams/k"):
            h.send_response(307)
            h.send_header("Location", "/elsewhere")
            h.end_headers()
        else:
            h.send_response(500)
            h.end_headers()

    srv = servers(handle)
    client = sync_client("chat", srv.url, max_retries=0)
    with pytest.raises(openai.APIConnectionError) as info:
        for _ in create(client, "chat", "hi", True):
            pass
    err = caused_by(info.value, reprise.ResumeError)
    assert isinstance(err, reprise.ResumeError) and err.status == 307
    assert [r[1] for r in srv.requests if r[1] == "/elsewhere"] == []


@pytest.mark.parametrize("api", APIS)
def test_failed_generation_raises_the_sdk_error(api: str, mock: Mock, proxy: Proxy, prompt: Callable[[str], str]) -> None:
    p = prompt("[tokens=30] [abort_after=5]")
    client = sync_client(api, proxy.url, max_retries=0)
    got: list[str] = []
    with pytest.raises((openai.APIError, anthropic.APIError)) as info:
        for ev in create(client, api, p, True):
            got.append(delta(api, ev))
    assert not isinstance(info.value, (openai.APIConnectionError, anthropic.APIConnectionError)), info.value
    assert caused_by(info.value, reprise.ResumeError) is None
    assert "".join(got)  # it read the events before the failure
    assert mock.settled(p, 1)["entry"]["generations"] == 1


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
def test_sdk_retry_of_a_post_cut_before_its_head_reuses_the_key(
    stream: bool, mock: Mock, proxy_no_keyless: Proxy, cut_link: Callable[..., Link], prompt: Callable[[str], str]
) -> None:
    # Keyless recognition is off: only the key can make the retry attach.
    p = prompt("[tokens=20]")
    link = cut_link(proxy_no_keyless.url, cut_after=0, times=1)
    # A streamed call is retried by the SDK (the same key again); a
    # non-streamed one by the transport itself (max_retries=0).
    client = sync_client("chat", link.url, max_retries=2 if stream else 0)
    res = create(client, "chat", p, stream)
    text = "".join(delta("chat", ev) for ev in res) if stream else res.choices[0].message.content
    assert text == mock.text(p)
    assert link.cuts == 1
    entry = mock.settled(p, 1)["entry"]
    assert entry["generations"] == 1, entry


def test_keepalive_comments_do_not_reach_the_sdk(servers: Callable[..., Server]) -> None:
    # reprise sends ": ping" comments on a long stream; the openai SDK's
    # decoder takes a comment block after an id for an event with empty
    # data (and fails to parse it): the helper passes no comment-only block.
    def handle(h: BaseHTTPRequestHandler, s: Server) -> None:
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Location", "/v1/streams/k?token=t")
        h.end_headers()
        h.wfile.write(("id: 1\n" + CHUNK % "a" + ": ping\n\n" + "id: 2\n" + CHUNK % "b" + "id: 3\ndata: [DONE]\n\n").encode())

    srv = servers(handle)
    client = sync_client("chat", srv.url, max_retries=0)
    assert "".join(delta("chat", ev) for ev in create(client, "chat", "hi", True)) == "ab"
