"""The Python helper (web/python, import reprise) with the real SDKs through
a link that cuts every connection mid-answer: the caller gets the exact
text, the fake model generated once, and the link did cut."""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import anthropic
import httpx2
import openai
import pytest

import reprise
from conftest import Link, Mock, Proxy

# Quick reconnections: the tests wait on events, not on the clock.
FAST = {"max_delay": 0.05, "retry_delay": 0.01}

APIS = ["chat", "responses", "messages"]


def sync_client(api: str, base: str, **kw: Any) -> Any:
    http = httpx2.Client(transport=reprise.Transport(**FAST))
    if api == "messages":
        return anthropic.Anthropic(base_url=base, api_key="k", http_client=http, **kw)
    return openai.OpenAI(base_url=base + "/v1", api_key="k", http_client=http, **kw)


def async_client(api: str, base: str, **kw: Any) -> Any:
    http = httpx2.AsyncClient(transport=reprise.AsyncTransport(**FAST))
    if api == "messages":
        return anthropic.AsyncAnthropic(base_url=base, api_key="k", http_client=http, **kw)
    return openai.AsyncOpenAI(base_url=base + "/v1", api_key="k", http_client=http, **kw)


def create(client: Any, api: str, p: str, stream: bool) -> Any:
    """The API's create call (a coroutine for an async client)."""
    if api == "chat":
        return client.chat.completions.create(model="m", messages=[{"role": "user", "content": p}], stream=stream)
    if api == "responses":
        return client.responses.create(model="m", input=p, stream=stream)
    return client.messages.create(model="m", max_tokens=4096, messages=[{"role": "user", "content": p}], stream=stream)


def delta(api: str, ev: Any) -> str:
    """The text one streamed event adds."""
    if api == "chat":
        return (ev.choices[0].delta.content or "") if ev.choices else ""
    if api == "responses":
        return str(ev.delta) if ev.type == "response.output_text.delta" else ""
    if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
        return str(ev.delta.text)
    return ""


def whole(api: str, res: Any) -> str:
    """The text of a non-streamed answer."""
    if api == "chat":
        return str(res.choices[0].message.content)
    if api == "responses":
        return str(res.output_text)
    return "".join(b.text for b in res.content if b.type == "text")


def read_sync(client: Any, api: str, p: str, stream: bool) -> str:
    res = create(client, api, p, stream)
    if not stream:
        return whole(api, res)
    with res:
        return "".join(delta(api, ev) for ev in res)


async def read_async(client: Any, api: str, p: str, stream: bool) -> str:
    res = await create(client, api, p, stream)
    if not stream:
        return whole(api, res)
    async with res:
        return "".join([delta(api, ev) async for ev in res])


# A streamed answer is cut after a few events on every connection; a
# non-streamed one after its head and part of its body.
def cutting(stream: bool) -> tuple[str, int]:
    return ("[tokens=40]", 1500) if stream else ("[tokens=300]", 700)


def check_one_generation(mock: Mock, p: str, text: str, link: Link) -> None:
    assert text == mock.text(p)
    entry = mock.settled(p, 1)["entry"]
    assert (entry["generations"], entry["requests"]) == (1, 1), entry
    assert link.cuts >= 2, link.cuts


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("api", APIS)
def test_sync_sdk_through_cut_link(
    api: str, stream: bool, mock: Mock, proxy: Proxy, cut_link: Callable[..., Link], prompt: Callable[[str], str]
) -> None:
    directives, cut = cutting(stream)
    p = prompt(directives)
    link = cut_link(proxy.url, cut_after=cut, times=None)
    client = sync_client(api, link.url, max_retries=0)
    text = read_sync(client, api, p, stream)
    check_one_generation(mock, p, text, link)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "json"])
@pytest.mark.parametrize("api", APIS)
async def test_async_sdk_through_cut_link(
    api: str, stream: bool, mock: Mock, proxy: Proxy, cut_link: Callable[..., Link], prompt: Callable[[str], str]
) -> None:
    directives, cut = cutting(stream)
    p = prompt(directives)
    link = cut_link(proxy.url, cut_after=cut, times=None)
    client = async_client(api, link.url, max_retries=0)
    text = await read_async(client, api, p, stream)
    check_one_generation(mock, p, text, link)
