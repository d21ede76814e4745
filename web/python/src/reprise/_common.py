"""What the sync and async transports share: the flavours of httpx they
serve, the error, the key memory, and the rules for headers and URLs."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from ._sse import EventParser

if TYPE_CHECKING:
    import httpx2 as httpx2  # re-exported for the transports
else:
    try:
        import httpx2
    except ImportError:  # httpx2 is optional: httpx alone is served then
        httpx2 = None

# A journaled path: a POST to it gets a key and its stream is resumed.
JOURNALED = re.compile(r"/v1/(chat/completions|responses|messages|audio/speech)/?$")

# Headers a reconnection sends again: the caller's credential (to the POST's
# origin only) and the API version.
KEPT = ("authorization", "x-api-key", "anthropic-version", "anthropic-beta", "openai-organization", "openai-project")

# Headers that carry the caller's credential: never sent to another origin.
CREDENTIALS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie"})

# The wait before the first re-ask of a non-streamed POST (it doubles).
POST_DELAY = 0.25


def _flavours(name: str) -> tuple[type[BaseException], ...]:
    """The exception class called name in httpx, and in httpx2 when installed."""
    mods: list[Any] = [httpx] if httpx2 is None else [httpx, httpx2]
    return tuple(getattr(m, name) for m in mods)


# A response body that ends with one of these broke: resume it.
BROKEN: tuple[type[BaseException], ...] = (
    _flavours("NetworkError") + _flavours("TimeoutException") + _flavours("RemoteProtocolError")
)

# A non-streamed POST that fails with one of these is asked again under its
# key (a pool timeout is local: nothing was sent).
REASK: tuple[type[BaseException], ...] = (
    _flavours("ConnectError")
    + _flavours("ConnectTimeout")
    + _flavours("ReadTimeout")
    + _flavours("WriteTimeout")
    + _flavours("ReadError")
    + _flavours("WriteError")
    + _flavours("RemoteProtocolError")
)

if TYPE_CHECKING or httpx2 is not None:

    class _ResumeBase(httpx.RemoteProtocolError, httpx2.RemoteProtocolError):  # type: ignore[misc]
        pass

else:

    class _ResumeBase(httpx.RemoteProtocolError):
        pass


class ResumeError(_ResumeBase):
    """A resumed stream could not go on: the reconnections ran out, the
    Location answered a status a retry cannot change (a redirect included),
    or the generation being read failed and its key started another
    (``event: reset``).

    It is an ``httpx.RemoteProtocolError`` (and an
    ``httpx2.RemoteProtocolError`` when httpx2 is installed): what a broken
    stream raises without the helper, so code that handles that handles
    this. ``status`` is the HTTP status of the last reconnection, if it got
    one.
    """

    status: int | None

    def __init__(self, message: str, *, status: int | None = None, request: Any = None) -> None:
        super().__init__(message, request=request)
        self.status = status


class RecentKeys:
    """Keys given to requests lately, by URL and body, so an SDK's retry of
    the same request (``x-stainless-retry-count`` >= 1) gets the same key
    and attaches instead of generating again."""

    def __init__(self, size: int = 256, ttl: float = 600.0) -> None:
        self._size = size
        self._ttl = ttl
        self._lock = threading.Lock()
        self._by_request: OrderedDict[bytes, tuple[str, float]] = OrderedDict()

    def key(self, url: str, body: bytes, retry: bool) -> str:
        """A new key, or the one the first try of this retry got."""
        rid = hashlib.sha256(url.encode() + b"\n" + body).digest()
        now = time.monotonic()
        with self._lock:
            seen = self._by_request.get(rid)
            if retry and seen is not None and now - seen[1] < self._ttl:
                return seen[0]
            key = uuid.uuid4().hex
            self._by_request.pop(rid, None)
            self._by_request[rid] = (key, now)
            while len(self._by_request) > self._size:
                self._by_request.popitem(last=False)
            return key


@dataclass(frozen=True)
class Options:
    """The knobs of a transport (see Transport's docstring)."""

    max_attempts: int
    retry_delay: float
    max_delay: float
    post_attempts: int
    cancel_on_abort: bool
    cancel_timeout: float

    def wait(self, delay: float, tries: int) -> float:
        """The wait before a reconnection: delay doubled per try without an event, capped."""
        return float(min(self.max_delay, delay * 2 ** max(0, tries - 1)))


Origin = tuple[str, str, int]


def origin_of(url: httpx.URL) -> Origin:
    """The origin of url: scheme, host and port (the scheme's default when none is written)."""
    scheme = url.scheme.lower()
    port = url.port
    if port is None:
        port = {"http": 80, "ws": 80, "https": 443, "wss": 443}.get(scheme, 0)
    return scheme, url.host.lower(), port


def parse_origin(origin: str | None) -> Origin | None:
    if origin is None:
        return None
    return origin_of(httpx.URL(origin))


def journaled(request: httpx.Request, only: Origin | None) -> bool:
    """Whether request is a POST to a journaled path (of the given origin, if one is given)."""
    if request.method != "POST" or not JOURNALED.search(request.url.path):
        return False
    return only is None or origin_of(request.url) == only


def asks_stream(body: bytes) -> bool:
    """Whether a request body asks for an event stream (``"stream": true``, or speech's ``"stream_format": "sse"``)."""
    try:
        v = json.loads(body)
    except ValueError:
        return False
    return isinstance(v, dict) and (v.get("stream") is True or bool(v.get("stream_format") == "sse"))


def is_retry(headers: httpx.Headers) -> bool:
    """Whether the SDK marks this request as its retry of an earlier one."""
    try:
        return int(headers.get("x-stainless-retry-count", "0")) > 0
    except ValueError:
        return False


def is_event_stream(headers: httpx.Headers) -> bool:
    return str(headers.get("content-type", "")).split(";")[0].strip().lower() == "text/event-stream"


def identity(headers: httpx.Headers) -> bool:
    """Whether a body is sent as it is stored (no Content-Encoding): only then do byte offsets and events carry over."""
    return headers.get("content-encoding", "identity").strip().lower() in ("", "identity")


def kept_headers(sent: httpx.Headers, same_origin: bool, accept: str) -> dict[str, str]:
    """The headers a reconnection sends: the kept ones of the POST's, without
    its credentials unless the Location is of its origin."""
    out = {"Accept": accept}
    for name in KEPT:
        value = sent.get(name)
        if value is not None and (same_origin or name not in CREDENTIALS):
            out[name] = value
    return out


def cancel_url(post: httpx.URL, location: httpx.URL | None, key: str) -> httpx.URL:
    """Where a cancel goes: the Location's path + ``/cancel`` with its query
    (its token), or, with no Location yet, the key's stream on the POST's origin."""
    if location is not None:
        return location.copy_with(path=location.path.rstrip("/") + "/cancel")
    m = JOURNALED.search(post.path)
    prefix = post.path[: m.start()] if m else ""
    return post.copy_with(path=f"{prefix}/v1/streams/{key}/cancel", query=None)


def timeout_ext(seconds: float) -> dict[str, float]:
    return {"connect": seconds, "read": seconds, "write": seconds, "pool": seconds}


def retry_after(headers: httpx.Headers) -> float | None:
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None


def range_start(headers: httpx.Headers) -> int | None:
    """The first byte a 206 answer's Content-Range names."""
    m = re.match(r"\s*bytes\s+(\d+)-", headers.get("content-range", ""))
    return int(m.group(1)) if m else None


def range_total(headers: httpx.Headers) -> int | None:
    """The length a 416 answer's Content-Range (``bytes */N``) names."""
    m = re.match(r"\s*bytes\s+\*/(\d+)", headers.get("content-range", ""))
    return int(m.group(1)) if m else None


class StreamState:
    """Where a resumed event stream is: its parser (the cursor), the
    reconnection delay the stream asked for, the reconnections since its
    last event, and whether its end was passed on."""

    def __init__(self, delay: float) -> None:
        self.parser = EventParser()
        self.delay = delay
        self.tries = 0
        self.done = False  # a terminal or final error event was passed on
        self.status: int | None = None  # the last reconnection's status

    def take(self, chunk: bytes) -> tuple[bytes, str]:
        """The whole events chunk completes, as bytes to pass on, and what
        to do next: "" (read on), "resume" (an error event without an id:
        reprise cut this reader, its cursor stays) or "reset" (the
        generation read failed and its key started another)."""
        out = bytearray()
        for ev in self.parser.push(chunk):
            if ev.retry is not None:
                self.delay = ev.retry
            if ev.type == "error" and not ev.has_id:
                return bytes(out), "resume"
            if ev.type == "reset":
                return bytes(out), "reset"
            if ev.blank:
                # Comments only (a keep-alive): no event, and the OpenAI
                # SDK's decoder would take it for one with empty data
                # once it saw an id.
                continue
            if ev.is_data:
                self.tries = 0
            out += ev.raw
            if ev.final:
                self.done = True
        return bytes(out), ""
