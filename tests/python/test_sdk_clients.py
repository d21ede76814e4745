"""The plain SDKs, with no helper and no key, through a link that cuts the
answer once: openai (chat completions, Responses) and anthropic (Messages),
streamed and not, sync and async. The caller retries as seed 004 teaches
(max_retries=0 and its with_retry around a function that reads the whole
answer), or, not streamed, the SDK retries itself (max_retries=2).

Each logical call must give the caller the complete exact text. The ledger
then says how many upstream generations it cost: one where reprise
recognises the keyless retry (proxy), more where it does not
(proxy_no_keyless): the first generation runs to its end for nobody, the
retry is a second one.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable

import anthropic
import openai
import pytest

from conftest import WAIT, Link, Mock, Proxy
from seed004 import RETRYABLE, RETRYABLE_ANTHROPIC, with_retry, with_retry_async

MODEL = "test-model"
# A streamed answer: 60 tokens 4 ms apart, so that reprise is still writing
# it when the link cuts.
TOKENS = "[tokens=60] [delay=4ms]"
# A non-streamed answer is cut while it is generated: long enough (0.5 s)
# that the cut comes before it is written.
TOKENS_WHOLE = "[tokens=50] [delay=10ms]"
# Where the link cuts a streamed answer (head ~400 bytes, ~11 KB for 60
# tokens): after some of its events.
CUT_STREAM = 3000
NEVER = 1 << 40
APIS = ["chat", "responses", "messages"]


class Cutter(threading.Thread):
    """A thread that, once the prompt's first generation started (the
    request reached the model through reprise), cuts the link's open
    connections: the client waiting for a non-streamed answer loses it, as
    behind a middlebox that drops the connection. join() raises what went
    wrong."""

    def __init__(self, mock: Mock, link: Link, prompt: str) -> None:
        super().__init__(daemon=True)
        self.mock, self.link, self.prompt = mock, link, prompt
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + WAIT
            while self.mock.ledger(self.prompt)["entry"]["generations"] < 1:
                assert time.monotonic() < deadline, "the generation did not start"
                time.sleep(0.01)
            answered = self.link.cut_open()
            assert answered == [0], f"want one connection cut before its answer, cut {len(answered)} that had passed on {answered} answer bytes"
        except BaseException as e:  # noqa: BLE001 (re-raised by join)
            self.error = e

    def join(self, timeout: float | None = None) -> None:
        super().join(timeout)
        if self.error is not None:
            raise self.error


def cut_while_generating(mock: Mock, link: Link, prompt: str) -> Cutter:
    """Starts a Cutter."""
    c = Cutter(mock, link, prompt)
    c.start()
    return c


def arm(mock: Mock, p: Proxy, cut_link: Callable[..., Link], prompt: str, stream: bool) -> tuple[Link, Cutter | None]:
    """A link in front of p that cuts the first answer: a stream after
    CUT_STREAM bytes, a non-streamed answer while it is generated."""
    if stream:
        return cut_link(p.url, cut_after=CUT_STREAM, times=1), None
    link = cut_link(p.url, cut_after=NEVER, times=0)
    return link, cut_while_generating(mock, link, prompt)


def _openai(base: str, max_retries: int) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=max_retries)


def _anthropic(base: str, max_retries: int) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base, api_key="unused", max_retries=max_retries)


def read_sync(api: str, base: str, prompt: str, stream: bool, max_retries: int) -> str:
    """One request; returns the answer's whole text (a stream read to its end)."""
    if api == "chat":
        c = _openai(base, max_retries)
        msgs: Any = [{"role": "user", "content": prompt}]
        if stream:
            return "".join(ch.choices[0].delta.content or "" for ch in c.chat.completions.create(model=MODEL, messages=msgs, stream=True) if ch.choices)
        return c.chat.completions.create(model=MODEL, messages=msgs).choices[0].message.content or ""
    if api == "responses":
        c = _openai(base, max_retries)
        if stream:
            return "".join(ev.delta for ev in c.responses.create(model=MODEL, input=prompt, stream=True) if ev.type == "response.output_text.delta")
        return c.responses.create(model=MODEL, input=prompt).output_text
    a = _anthropic(base, max_retries)
    amsgs: Any = [{"role": "user", "content": prompt}]
    if stream:
        return "".join(
            ev.delta.text
            for ev in a.messages.create(model=MODEL, max_tokens=1024, messages=amsgs, stream=True)
            if ev.type == "content_block_delta" and ev.delta.type == "text_delta"
        )
    return "".join(b.text for b in a.messages.create(model=MODEL, max_tokens=1024, messages=amsgs).content if b.type == "text")


async def read_async(api: str, base: str, prompt: str, stream: bool, max_retries: int) -> str:
    """read_sync with AsyncOpenAI / AsyncAnthropic."""
    if api == "chat":
        c = openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=max_retries)
        msgs: Any = [{"role": "user", "content": prompt}]
        if stream:
            parts = []
            async for ch in await c.chat.completions.create(model=MODEL, messages=msgs, stream=True):
                if ch.choices:
                    parts.append(ch.choices[0].delta.content or "")
            return "".join(parts)
        return (await c.chat.completions.create(model=MODEL, messages=msgs)).choices[0].message.content or ""
    if api == "responses":
        c = openai.AsyncOpenAI(base_url=base + "/v1", api_key="unused", max_retries=max_retries)
        if stream:
            parts = []
            async for ev in await c.responses.create(model=MODEL, input=prompt, stream=True):
                if ev.type == "response.output_text.delta":
                    parts.append(ev.delta)
            return "".join(parts)
        return (await c.responses.create(model=MODEL, input=prompt)).output_text
    a = anthropic.AsyncAnthropic(base_url=base, api_key="unused", max_retries=max_retries)
    amsgs: Any = [{"role": "user", "content": prompt}]
    if stream:
        parts = []
        async for ev in await a.messages.create(model=MODEL, max_tokens=1024, messages=amsgs, stream=True):
            if ev.type == "content_block_delta" and ev.delta.type == "text_delta":
                parts.append(ev.delta.text)
        return "".join(parts)
    msg = await a.messages.create(model=MODEL, max_tokens=1024, messages=amsgs)
    return "".join(b.text for b in msg.content if b.type == "text")


def _check(
    mock: Mock, p: Proxy, link: Link, cutter: Cutter | None, prompt: str, text: str, retried_by: str, pattern: str, record: Callable[[str, Proxy, int], None]
) -> None:
    if cutter is not None:
        cutter.join()
    want = mock.text(prompt)
    assert text == want, "the caller did not get the generation's exact text"
    assert link.cuts == 1, f"the link cut {link.cuts} answers, want 1"
    # Without recognition the retry is a second generation, which settles
    # after the call returned.
    report = mock.settled(prompt, 1 if p.keyless else 2)
    n = report["entry"]["generations"]
    record(pattern, p, n)
    if p.keyless:
        assert n == 1, f"{pattern}: {n} upstream generations with keyless recognition, want 1 ({retried_by} retried once): {report['entry']}"
    else:
        assert n == 2, f"{pattern}: {n} upstream generations without recognition, want 2: {report['entry']}"


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("api", APIS)
def test_seed_retry_sync(
    api: str, stream: bool, either_proxy: Proxy, mock: Mock, cut_link: Callable[..., Link], prompt: Callable[[str], str], record_generations: Callable[[str, Proxy, int], None]
) -> None:
    """max_retries=0 and seed 004's with_retry around a call that reads the
    whole answer; the first answer is cut."""
    p = prompt(TOKENS if stream else TOKENS_WHOLE)
    link, cutter = arm(mock, either_proxy, cut_link, p, stream)

    @with_retry(max_attempts=5, base=0.05, cap=0.5, budget=30.0, retryable=RETRYABLE_ANTHROPIC if api == "messages" else RETRYABLE)
    def call() -> str:
        return read_sync(api, link.url, p, stream, max_retries=0)

    text = call()
    _check(mock, either_proxy, link, cutter, p, text, "with_retry", f"{api} {'stream' if stream else 'whole'} sync, with_retry", record_generations)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "whole"])
@pytest.mark.parametrize("api", APIS)
async def test_seed_retry_async(
    api: str, stream: bool, either_proxy: Proxy, mock: Mock, cut_link: Callable[..., Link], prompt: Callable[[str], str], record_generations: Callable[[str, Proxy, int], None]
) -> None:
    """test_seed_retry_sync with the async clients."""
    p = prompt(TOKENS if stream else TOKENS_WHOLE)
    link, cutter = arm(mock, either_proxy, cut_link, p, stream)

    @with_retry_async(max_attempts=5, base=0.05, cap=0.5, budget=30.0, retryable=RETRYABLE_ANTHROPIC if api == "messages" else RETRYABLE)
    async def call() -> str:
        return await read_async(api, link.url, p, stream, max_retries=0)

    text = await call()
    _check(mock, either_proxy, link, cutter, p, text, "with_retry", f"{api} {'stream' if stream else 'whole'} async, with_retry", record_generations)


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("api", APIS)
def test_sdk_retries_whole(
    api: str, mode: str, either_proxy: Proxy, mock: Mock, cut_link: Callable[..., Link], prompt: Callable[[str], str], record_generations: Callable[[str, Proxy, int], None]
) -> None:
    """Not streamed, the SDK's own retries (max_retries=2) after the
    connection was cut while the answer was generated."""
    p = prompt(TOKENS_WHOLE)
    link, cutter = arm(mock, either_proxy, cut_link, p, False)
    if mode == "sync":
        text = read_sync(api, link.url, p, False, max_retries=2)
    else:
        text = asyncio.run(read_async(api, link.url, p, False, max_retries=2))
    _check(mock, either_proxy, link, cutter, p, text, "the SDK", f"{api} whole {mode}, SDK max_retries=2", record_generations)
