"""The retry code of seed 004 (a Chinese article on retrying AI API calls:
"exponential backoff with full jitter, a retry decorator you can put on
chat()"), as its readers copy it: the RETRYABLE whitelist, RetryGiveUp, and
with_retry with full jitter, a cap and a total time budget, around a client
made with max_retries=0.

Deviations from the article, all mechanical:
  - with_retry takes the whitelist as an argument (default: the article's
    RETRYABLE), so an Anthropic reader's copy (RETRYABLE_ANTHROPIC, the same
    list with anthropic's classes) is the same decorator;
  - with_retry_async is the same loop for AsyncOpenAI / AsyncAnthropic
    (asyncio.sleep instead of time.sleep);
  - log messages in English.

With openai 3.x and anthropic 2.x the SDKs run on httpx2, not httpx: the
article's httpx.* entries never match what they raise. A cut or a timeout
arrives as openai.APIConnectionError / openai.APITimeoutError (its
subclass), which the list has; the httpx entries are kept as written.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
from collections.abc import Awaitable
from typing import Any, Callable, TypeVar

import anthropic
import httpx
import openai

log = logging.getLogger("seed004.retry")

# Only these are worth a retry; everything else is raised as is.
RETRYABLE: tuple[type[BaseException], ...] = (
    openai.RateLimitError,  # 429
    openai.InternalServerError,  # 500 / 502 / 503 / 504
    openai.APITimeoutError,  # the SDK's request timeout
    openai.APIConnectionError,  # connecting failed or was reset
    httpx.ConnectTimeout,
    httpx.ReadTimeout,
    httpx.RemoteProtocolError,  # connection cut mid-way
)

# The same list as an Anthropic SDK user writes it.
RETRYABLE_ANTHROPIC: tuple[type[BaseException], ...] = (
    anthropic.RateLimitError,
    anthropic.InternalServerError,
    anthropic.APITimeoutError,
    anthropic.APIConnectionError,
    httpx.ConnectTimeout,
    httpx.ReadTimeout,
    httpx.RemoteProtocolError,
)


class RetryGiveUp(Exception):
    """Attempts or the total budget used up: give up."""


T = TypeVar("T")


def _delay(attempt: int, base: float, cap: float) -> float:
    # Full jitter: wait a uniform time between 0 and the backoff.
    raw = min(cap, base * (2 ** (attempt - 1)))
    return random.uniform(0.0, raw)


def with_retry(
    max_attempts: int = 5,
    base: float = 1.0,
    cap: float = 30.0,
    budget: float = 120.0,
    retryable: tuple[type[BaseException], ...] = RETRYABLE,
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")

    def deco(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> T:
            started = time.monotonic()
            for attempt in range(1, max_attempts + 1):
                try:
                    return fn(*args, **kwargs)
                except retryable as exc:
                    used = time.monotonic() - started
                    delay = _delay(attempt, base, cap)
                    if attempt >= max_attempts:
                        log.error("attempt=%d/%d give up (attempts) used=%.1fs %s: %s", attempt, max_attempts, used, type(exc).__name__, exc)
                        raise RetryGiveUp("attempts used up attempt=%d" % attempt) from exc
                    if used + delay >= budget:
                        log.error("attempt=%d/%d give up (budget) used=%.1fs wait=%.2fs", attempt, max_attempts, used, delay)
                        raise RetryGiveUp("budget used up used=%.1fs" % used) from exc
                    log.warning("attempt=%d/%d failed %s: %s -> wait %.2fs", attempt, max_attempts, type(exc).__name__, exc, delay)
                    time.sleep(delay)
            raise RetryGiveUp("loop ended")  # unreachable

        return wrapper

    return deco


def with_retry_async(
    max_attempts: int = 5,
    base: float = 1.0,
    cap: float = 30.0,
    budget: float = 120.0,
    retryable: tuple[type[BaseException], ...] = RETRYABLE,
) -> Callable[[Callable[..., Awaitable[T]]], Callable[..., Awaitable[T]]]:
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")

    def deco(fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> T:
            started = time.monotonic()
            for attempt in range(1, max_attempts + 1):
                try:
                    return await fn(*args, **kwargs)
                except retryable as exc:
                    used = time.monotonic() - started
                    delay = _delay(attempt, base, cap)
                    if attempt >= max_attempts:
                        log.error("attempt=%d/%d give up (attempts) used=%.1fs %s: %s", attempt, max_attempts, used, type(exc).__name__, exc)
                        raise RetryGiveUp("attempts used up attempt=%d" % attempt) from exc
                    if used + delay >= budget:
                        log.error("attempt=%d/%d give up (budget) used=%.1fs wait=%.2fs", attempt, max_attempts, used, delay)
                        raise RetryGiveUp("budget used up used=%.1fs" % used) from exc
                    log.warning("attempt=%d/%d failed %s: %s -> wait %.2fs", attempt, max_attempts, type(exc).__name__, exc, delay)
                    await asyncio.sleep(delay)
            raise RetryGiveUp("loop ended")  # unreachable

        return wrapper

    return deco
