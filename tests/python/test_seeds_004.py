"""Seed 004's patterns as its readers run them, keyless, against reprise
with keyless recognition (proxy) and without (proxy_no_keyless):

  (a) the article's chat(): max_retries=0, its with_retry around a
      non-streamed call (and the same around a function that reads a whole
      stream), the connection cut;
  (b) an HTTP timeout shorter than the generation, with its with_retry;
  (c) the SDK's own retries (max_retries=2) with the short timeout.

Each logical call must cost one upstream generation where reprise
recognises the retries and give the complete exact text; the counts
without recognition are asserted too (they are what the seed's readers pay
behind a proxy that goes by keys alone).
"""

from __future__ import annotations

from typing import Any, Callable

import openai
import pytest

from conftest import Link, Mock, Proxy
from seed004 import RetryGiveUp, with_retry
from test_sdk_clients import CUT_STREAM, NEVER, TOKENS, cut_while_generating

MODEL = "deepseek-v4-flash-thinking"
# The tests' backoff: the article's with base and cap scaled down.
BACKOFF: dict[str, Any] = {"max_attempts": 5, "base": 0.05, "cap": 0.5, "budget": 30.0}
Record = Callable[[str, Proxy, int], None]


def seed_chat(client: openai.OpenAI) -> Callable[[str], str]:
    """The article's chat(), as written, on the given client."""

    @with_retry(**BACKOFF)
    def chat(prompt: str, model: str = MODEL) -> str:
        if not prompt or not prompt.strip():
            raise ValueError("prompt must not be empty")
        resp = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": prompt}],
            stream=False,
        )
        choices = getattr(resp, "choices", None)
        if not choices:
            raise RuntimeError("no choices from upstream")
        content = choices[0].message.content
        return content or ""

    return chat


def seed_chat_stream(client: openai.OpenAI) -> Callable[[str], str]:
    """chat() streamed: the decorated function reads the whole stream."""

    @with_retry(**BACKOFF)
    def chat(prompt: str, model: str = MODEL) -> str:
        stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": prompt}], stream=True)
        return "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices)

    return chat


def _generations(mock: Mock, p: Proxy, prompt: str, want_with: int, want_without: int, pattern: str, record: Record) -> None:
    report = mock.settled(prompt, want_with if p.keyless else want_without)
    n = report["entry"]["generations"]
    record(pattern, p, n)
    want = want_with if p.keyless else want_without
    label = "with" if p.keyless else "without"
    assert n == want, f"{pattern}: {n} upstream generations {label} keyless recognition, want {want}: {report['entry']}"


def test_a_chat_cut_while_generating(either_proxy: Proxy, mock: Mock, cut_link: Callable[..., Link], prompt: Callable[[str], str], record_generations: Record) -> None:
    """(a) The article's chat(): the connection is cut while the answer is
    generated; with_retry sends the same request again."""
    p = prompt("[tokens=40] [delay=10ms]")
    link = cut_link(either_proxy.url, cut_after=NEVER, times=0)
    cutter = cut_while_generating(mock, link, p)
    client = openai.OpenAI(api_key="unused", base_url=link.url + "/v1", max_retries=0, timeout=60.0)
    text = seed_chat(client)(p)
    cutter.join()
    assert text == mock.text(p)
    assert link.cuts == 1
    _generations(mock, either_proxy, p, 1, 2, "(a) seed chat(), whole, cut while generating", record_generations)


def test_a_chat_stream_cut(either_proxy: Proxy, mock: Mock, cut_link: Callable[..., Link], prompt: Callable[[str], str], record_generations: Record) -> None:
    """(a) chat() streamed: the stream is cut mid-way (openai raises
    APIConnectionError, which RETRYABLE has); with_retry reads it again."""
    p = prompt(TOKENS)
    link = cut_link(either_proxy.url, cut_after=CUT_STREAM, times=1)
    client = openai.OpenAI(api_key="unused", base_url=link.url + "/v1", max_retries=0, timeout=60.0)
    text = seed_chat_stream(client)(p)
    assert text == mock.text(p)
    assert link.cuts == 1
    _generations(mock, either_proxy, p, 1, 2, "(a) seed chat(), stream, cut mid-stream", record_generations)


# (b) and (c): a non-streamed answer that takes ~1.6 s (40 tokens, 40 ms
# apart) behind a 0.6 s client timeout.
SLOW = "[tokens=40] [delay=40ms]"
SHORT_TIMEOUT = 0.6
# (c): the SDK makes three attempts at most, so its answer takes ~0.8 s
# (20 tokens, 40 ms apart): still past each attempt's 0.6 s, and done
# well before the third even on a loaded box.
MEDIUM = "[tokens=20] [delay=40ms]"


def test_b_timeout_with_retry(either_proxy: Proxy, mock: Mock, prompt: Callable[[str], str], record_generations: Record) -> None:
    """(b) timeout=0.6 on the client, the article's chat(): each attempt
    times out (openai.APITimeoutError) until the generation is done. With
    recognition every retry waits for the first generation, and the one
    waiting when it ends gets it. Without, every attempt starts a new
    generation no attempt lives to see: the call gives up after 5."""
    p = prompt(SLOW)
    client = openai.OpenAI(api_key="unused", base_url=either_proxy.url + "/v1", max_retries=0, timeout=SHORT_TIMEOUT)
    chat = seed_chat(client)
    if either_proxy.keyless:
        assert chat(p) == mock.text(p)
    else:
        with pytest.raises(RetryGiveUp):
            chat(p)
    _generations(mock, either_proxy, p, 1, 5, "(b) seed chat(), timeout 0.6 s < generation 1.6 s", record_generations)


def test_c_sdk_retries_timeout(either_proxy: Proxy, mock: Mock, prompt: Callable[[str], str], record_generations: Record) -> None:
    """(c) The SDK's own retries (max_retries=2) with timeout=0.6 against a
    0.8 s answer: three attempts, ~0.5 s apart. With recognition a retry
    attaches to the first generation or replays it; without, each attempt is
    a generation of its own and the call fails (APITimeoutError) after
    three."""
    p = prompt(MEDIUM)
    client = openai.OpenAI(api_key="unused", base_url=either_proxy.url + "/v1", max_retries=2, timeout=SHORT_TIMEOUT)

    def call() -> str:
        resp = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": p}])
        return resp.choices[0].message.content or ""

    if either_proxy.keyless:
        assert call() == mock.text(p)
    else:
        with pytest.raises(openai.APITimeoutError):
            call()
    _generations(mock, either_proxy, p, 1, 3, "(c) SDK max_retries=2, timeout 0.6 s < generation 0.8 s", record_generations)


def test_whole_answer_cut_inside(either_proxy: Proxy, mock: Mock, cut_link: Callable[..., Link], prompt: Callable[[str], str], record_generations: Record) -> None:
    """A non-streamed answer (~950 bytes) cut inside its body, after reprise
    wrote it whole: the link (a middlebox) took it into its socket, and its
    TCP acknowledged it, so the answer counted as received — reprise's peer
    is the middlebox, not the client (docs/retries.md, "What it cannot
    see"). The retry is then a new generation, with recognition or without.
    A tail lost where the client's own TCP is the peer is not acknowledged,
    and its retry replays (tests/keyless_tailcut_test.go)."""
    p = prompt("[tokens=60]")
    link = cut_link(either_proxy.url, cut_after=500, times=1)
    client = openai.OpenAI(api_key="unused", base_url=link.url + "/v1", max_retries=0, timeout=60.0)
    text = seed_chat(client)(p)
    assert text == mock.text(p)
    assert link.cuts == 1
    _generations(mock, either_proxy, p, 2, 2, "(a) seed chat(), whole, cut inside the written answer", record_generations)
