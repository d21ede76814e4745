"""The Python helper's credentials on a resume, its origin= filter, and
stop vs drop: the caller's abort cancels the generation, a broken
connection never does."""

from __future__ import annotations

import asyncio
import time
import urllib.error
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

import anthropic
import httpx2
import openai

import reprise
from conftest import WAIT, Link, Mock, Proxy
from test_helper_giveup import CHUNK, Server, broken_stream, servers  # noqa: F401 (servers is a fixture)
from test_helper_resume import FAST, create, delta, sync_client


def finish(h: BaseHTTPRequestHandler) -> None:
    """Answers a resume with the rest of the stream and its terminal event."""
    h.send_response(200)
    h.send_header("Content-Type", "text/event-stream")
    h.end_headers()
    h.wfile.write(("id: 3\n" + CHUNK % "c" + "id: 4\ndata: [DONE]\n\n").encode())


def chat_with_credentials(srv: Server) -> str:
    http = httpx2.Client(transport=reprise.Transport(**FAST))
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="sk-secret", http_client=http, max_retries=0)
    res = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True,
        extra_headers={"x-api-key": "sk-other", "Cookie": "c=1"},
    )
    return "".join(delta("chat", ev) for ev in res)


def test_resume_on_another_origin_sends_no_credential(servers: Callable[..., Server]) -> None:
    other = servers(lambda h, s: finish(h))
    post = servers(lambda h, s: broken_stream(h, other.url + "/v1/streams/k?token=cap", ["a", "b"]))
    assert chat_with_credentials(post) == "abc"
    (method, path, headers), = other.requests
    assert method == "GET" and parse_qs(urlsplit(path).query) == {"token": ["cap"]}
    assert headers["last-event-id"] == "2" and headers["accept"] == "text/event-stream"
    assert not {"authorization", "x-api-key", "cookie", "api-key"} & set(headers), headers
    assert post.requests[0][2]["authorization"] == "Bearer sk-secret"  # the POST had them


def test_resume_on_the_same_origin_sends_the_credential(servers: Callable[..., Server]) -> None:
    def handle(h: BaseHTTPRequestHandler, s: Server) -> None:
        if h.command == "POST":
            broken_stream(h, "/v1/streams/k?token=cap", ["a", "b"])
        else:
            finish(h)

    srv = servers(handle)
    assert chat_with_credentials(srv) == "abc"
    (_, _, headers), = srv.of("GET")
    assert headers["authorization"] == "Bearer sk-secret" and headers["x-api-key"] == "sk-other"
    assert "cookie" not in headers  # a cookie is the client's, not the call's


def test_origin_option_leaves_other_origins_untouched(servers: Callable[..., Server]) -> None:
    def handle(h: BaseHTTPRequestHandler, s: Server) -> None:
        if h.command == "POST":
            broken_stream(h, "/v1/streams/k?token=cap", ["a", "b"])
        else:
            finish(h)

    srv = servers(handle)
    mine = servers(lambda h, s: finish(h))
    http = httpx2.Client(transport=reprise.Transport(origin=mine.url, **FAST))
    client = openai.OpenAI(base_url=srv.url + "/v1", api_key="k", http_client=http, max_retries=0)
    text = "".join(delta("chat", ev) for ev in create(client, "chat", "hi", True))
    assert text == "ab"  # not resumed: the stream ended where the server ended it
    assert [r[0] for r in srv.requests] == ["POST"]
    assert "idempotency-key" not in srv.requests[0][2]
    # The same transport does its work for its origin.
    client = openai.OpenAI(base_url=mine.url + "/v1", api_key="k", http_client=http, max_retries=0)
    list(create(client, "chat", "hi", True))
    assert "idempotency-key" in mine.requests[0][2]


def wait_state(proxy: Proxy, key: str, state: str) -> dict[str, Any]:
    """Waits (bounded) until key's state is state; a key not known yet is waited for too."""
    deadline = time.monotonic() + WAIT
    while True:
        try:
            st = proxy.status(key)
        except urllib.error.HTTPError as err:
            if err.code != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.02)
            continue
        if st["state"] == state or time.monotonic() > deadline:
            assert st["state"] == state, st
            return st
        time.sleep(0.02)


def test_sync_close_cancels_and_the_same_call_generates_again(mock: Mock, proxy: Proxy, prompt: Callable[[str], str]) -> None:
    p = prompt("[tokens=400] [delay=10ms]")
    client = sync_client("chat", proxy.url, max_retries=0)
    stream = create(client, "chat", p, True)
    key = stream.response.headers["idempotency-key"]
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    wait_state(proxy, key, "cancelled")
    again = create(client, "chat", p, True)
    assert "".join(delta("chat", ev) for ev in again)
    report = mock.settled(p, 2)
    assert report["entry"]["generations"] == 2, report["entry"]
    assert report["generations"][0]["aborted"]


def test_anthropic_leaving_with_early_cancels(mock: Mock, proxy: Proxy, prompt: Callable[[str], str]) -> None:
    p = prompt("[tokens=400] [delay=10ms]")
    client = sync_client("messages", proxy.url, max_retries=0)
    with create(client, "messages", p, True) as stream:
        key = stream.response.headers["idempotency-key"]
        next(iter(stream))
    wait_state(proxy, key, "cancelled")


async def test_async_task_cancelled_while_reading_cancels(mock: Mock, proxy: Proxy, prompt: Callable[[str], str]) -> None:
    p = prompt("[tokens=400] [delay=10ms]")
    http = httpx2.AsyncClient(transport=reprise.AsyncTransport(**FAST))
    client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key="k", http_client=http, max_retries=0)
    keys: list[str] = []
    reading = asyncio.Event()

    async def read() -> None:
        stream = await create(client, "messages", p, True)
        keys.append(stream.response.headers["idempotency-key"])
        async for _ in stream:
            reading.set()

    task = asyncio.create_task(read())
    await asyncio.wait_for(reading.wait(), WAIT)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    await asyncio.to_thread(wait_state, proxy, keys[0], "cancelled")


async def test_async_task_cancelled_while_awaiting_the_post_cancels(
    mock: Mock, proxy: Proxy, prompt: Callable[[str], str]
) -> None:
    # The model answers nothing until the request ends: the task is
    # cancelled while it awaits the POST's head, before any Location.
    p = prompt("[hang]")
    http = httpx2.AsyncClient(transport=reprise.AsyncTransport(**FAST))
    client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="k", http_client=http, max_retries=0)
    key = "py-abort-" + p.split()[1]
    task = asyncio.create_task(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": p}], stream=True, extra_headers={"Idempotency-Key": key}
        )
    )
    await asyncio.to_thread(wait_state, proxy, key, "in_progress")
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    await asyncio.to_thread(wait_state, proxy, key, "cancelled")


def test_drop_never_cancels(mock: Mock, proxy: Proxy, cut_link: Callable[..., Link], prompt: Callable[[str], str]) -> None:
    p = prompt("[tokens=40]")
    link = cut_link(proxy.url, cut_after=1500, times=None)
    client = sync_client("chat", link.url, max_retries=0)
    stream = create(client, "chat", p, True)
    key = stream.response.headers["idempotency-key"]
    assert "".join(delta("chat", ev) for ev in stream) == mock.text(p)
    assert link.cuts >= 2
    assert wait_state(proxy, key, "completed")["generation"] == 1
    assert mock.settled(p, 1)["entry"]["generations"] == 1
