"""The async transport: reprise.AsyncTransport."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, cast, overload

import httpx

from ._common import (
    BROKEN,
    POST_DELAY,
    REASK,
    Options,
    RecentKeys,
    ResumeError,
    StreamState,
    asks_stream,
    cancel_url,
    httpx2,
    identity,
    is_event_stream,
    is_retry,
    journaled,
    kept_headers,
    origin_of,
    parse_origin,
    range_start,
    range_total,
    retry_after,
    timeout_ext,
)

if TYPE_CHECKING or httpx2 is not None:

    class _TransportBase(httpx.AsyncBaseTransport, httpx2.AsyncBaseTransport):  # type: ignore[misc]
        pass

    class _StreamBase(httpx.AsyncByteStream, httpx2.AsyncByteStream):
        pass

else:
    _TransportBase = httpx.AsyncBaseTransport
    _StreamBase = httpx.AsyncByteStream

# Cancels sent in the background while their caller is being cancelled:
# kept here so that they are not collected before they are done.
_cancels: set[asyncio.Task[None]] = set()


class AsyncTransport(_TransportBase):
    """The async twin of :class:`reprise.Transport`, for ``httpx.AsyncClient``
    and ``httpx2.AsyncClient`` (``openai.AsyncOpenAI``,
    ``anthropic.AsyncAnthropic``): the same options, the same behaviour.

    The caller's abort also covers task cancellation: a task cancelled while
    it awaits the POST or reads the stream cancels the generation (when
    ``cancel_on_abort``), then the cancellation goes on. Runs on asyncio.
    """

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | httpx2.AsyncBaseTransport | None = None,
        *,
        origin: str | None = None,
        max_attempts: int = 8,
        retry_delay: float = 1.0,
        max_delay: float = 10.0,
        post_attempts: int = 4,
        cancel_on_abort: bool = True,
        cancel_timeout: float = 2.0,
    ) -> None:
        self._inner = cast("httpx.AsyncBaseTransport | None", transport)
        self._defaults: dict[type, httpx.AsyncBaseTransport] = {}
        self._origin = parse_origin(origin)
        self._opts = Options(max_attempts, retry_delay, max_delay, post_attempts, cancel_on_abort, cancel_timeout)
        self._keys = RecentKeys()

    def _inner_for(self, request: httpx.Request) -> httpx.AsyncBaseTransport:
        if self._inner is not None:
            return self._inner
        kind = type(request)
        if kind not in self._defaults:
            if httpx2 is not None and isinstance(request, httpx2.Request):
                self._defaults[kind] = cast(httpx.AsyncBaseTransport, httpx2.AsyncHTTPTransport())
            else:
                self._defaults[kind] = httpx.AsyncHTTPTransport()
        return self._defaults[kind]

    @overload
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response: ...

    @overload
    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response: ...

    async def handle_async_request(
        self, request: httpx.Request | httpx2.Request
    ) -> httpx.Response | httpx2.Response:
        """Sends request; resumes its answer when it is a journaled POST (see Transport)."""
        req = cast(httpx.Request, request)
        inner = self._inner_for(req)
        if not journaled(req, self._origin):
            return await inner.handle_async_request(req)
        body = await req.aread()
        headers = req.headers.copy()
        if "idempotency-key" not in headers:
            headers["Idempotency-Key"] = self._keys.key(str(req.url), body, is_retry(headers))
        post = type(req)(req.method, req.url, headers=headers, content=body, extensions=req.extensions)
        return await _Call(self._opts, inner, post, headers["idempotency-key"], asks_stream(body)).send()

    async def aclose(self) -> None:
        """Closes the inner transport(s)."""
        if self._inner is not None:
            await self._inner.aclose()
        for t in self._defaults.values():
            await t.aclose()


class _Call:
    """One journaled POST and the requests that continue its answer."""

    def __init__(
        self, opts: Options, inner: httpx.AsyncBaseTransport, post: httpx.Request, key: str, streaming: bool
    ) -> None:
        self.opts = opts
        self.inner = inner
        self.post = post
        self.key = key
        self.streaming = streaming
        self.location: httpx.URL | None = None
        self.same_origin = True
        self.cancelled = False

    async def send(self) -> httpx.Response:
        asks = 0
        while True:
            asks += 1
            try:
                resp = await self.inner.handle_async_request(self.post)
            except REASK:
                if self.streaming or asks >= self.opts.post_attempts:
                    raise
                await asyncio.sleep(min(self.opts.max_delay, POST_DELAY * 2 ** (asks - 1)))
                continue
            except BaseException as e:
                if not isinstance(e, Exception):
                    await self.abort()  # the caller's abort: task cancellation
                raise
            if resp.status_code == 409 and not self.streaming and asks < self.opts.post_attempts:
                # A duplicate of a running key: wait and ask again.
                await resp.aread()
                if b"idempotency_key_in_progress" in resp.content:
                    wait = retry_after(resp.headers)
                    await asyncio.sleep(min(self.opts.max_delay, POST_DELAY if wait is None else wait))
                    continue
            return self.wrap(resp)

    def wrap(self, resp: httpx.Response) -> httpx.Response:
        raw = resp.headers.get("location")
        if resp.status_code != 200 or not raw or not identity(resp.headers):
            return resp
        try:
            self.location = self.post.url.join(raw)
        except Exception:
            return resp  # a Location that is no URL: nothing to resume
        self.same_origin = origin_of(self.post.url) == origin_of(self.location)
        first = cast(httpx.AsyncByteStream, resp.stream)
        if is_event_stream(resp.headers):
            resp.stream = _Events(self, first)
        else:
            resp.stream = _Body(self, first)
        return resp

    async def _get(self, headers: dict[str, str]) -> httpx.Response:
        assert self.location is not None
        ext = {"timeout": self.post.extensions["timeout"]} if "timeout" in self.post.extensions else {}
        req = type(self.post)("GET", self.location, headers=headers, extensions=ext)
        return await self.inner.handle_async_request(req)

    async def reconnect(self, st: StreamState) -> httpx.AsyncByteStream | None:
        """The next reader of the event stream, or None when nothing follows the cursor (204)."""
        while True:
            st.tries += 1
            if st.tries > self.opts.max_attempts:
                raise ResumeError(
                    f"reprise: the stream broke and {self.opts.max_attempts} reconnections got no event",
                    status=st.status,
                    request=self.post,
                )
            await asyncio.sleep(self.opts.wait(st.delay, st.tries))
            headers = kept_headers(self.post.headers, self.same_origin, "text/event-stream")
            if st.parser.last_id:
                headers["Last-Event-ID"] = st.parser.last_id
            try:
                resp = await self._get(headers)
            except BROKEN:
                continue  # the network again: next attempt
            if resp.status_code == 204:
                await resp.aclose()
                return None
            if resp.status_code == 200 and is_event_stream(resp.headers) and identity(resp.headers):
                return cast(httpx.AsyncByteStream, resp.stream)
            await resp.aclose()
            st.status = resp.status_code
            if resp.status_code == 429 or resp.status_code >= 500:
                continue
            raise ResumeError(
                f"reprise: resuming the stream answered {resp.status_code}", status=resp.status_code, request=self.post
            )

    async def continue_body(self, got: int, tries: int) -> tuple[httpx.AsyncByteStream | None, int]:
        """A reader of the stored answer from byte got on (None: it had ended)
        and the bytes of it to skip."""
        await asyncio.sleep(self.opts.wait(POST_DELAY, tries))
        headers = kept_headers(self.post.headers, self.same_origin, "*/*")
        headers["Accept-Encoding"] = "identity"
        headers["Range"] = f"bytes={got}-"
        resp = await self._get(headers)
        stream = cast(httpx.AsyncByteStream, resp.stream)
        if resp.status_code == 206 and range_start(resp.headers) == got:
            return stream, 0
        if resp.status_code == 200 and identity(resp.headers):
            return stream, got
        await resp.aclose()
        if resp.status_code == 416 and range_total(resp.headers) == got:
            return None, 0
        if resp.status_code == 429 or resp.status_code >= 500:
            raise httpx.RemoteProtocolError(f"the Location answered {resp.status_code}")  # counted as a try
        raise ResumeError(
            f"reprise: continuing the answer got {resp.status_code}", status=resp.status_code, request=self.post
        )

    async def abort(self) -> None:
        """Cancels the generation on the caller's abort. The cancel runs as a
        task of its own, so that it goes out even while the caller's task
        is being cancelled; this waits for it up to cancel_timeout."""
        if self.cancelled or not self.opts.cancel_on_abort:
            return
        self.cancelled = True
        try:
            task = asyncio.get_running_loop().create_task(self._cancel())
        except RuntimeError:
            return
        _cancels.add(task)
        task.add_done_callback(_cancels.discard)
        try:
            await asyncio.wait({task}, timeout=self.opts.cancel_timeout)
        except BaseException:
            pass  # cancelled again: the cancel goes on in the background; the caller's exception is raised

    async def _cancel(self) -> None:
        url = cancel_url(self.post.url, self.location, self.key)
        headers = kept_headers(self.post.headers, self.location is None or self.same_origin, "application/json")
        deadline = time.monotonic() + self.opts.cancel_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            req = type(self.post)("POST", url, headers=headers, extensions={"timeout": timeout_ext(left)})
            try:
                resp = await self.inner.handle_async_request(req)
                await resp.aclose()
            except Exception:
                return
            if resp.status_code != 404 or self.location is not None:
                return
            await asyncio.sleep(0.05)  # the POST has not reached reprise yet: its key is unknown so far


class _Events(_StreamBase):
    """A resumed event stream: the POST's answer, then each reconnection's, whole events only."""

    def __init__(self, call: _Call, first: httpx.AsyncByteStream) -> None:
        self._call = call
        self._cur = first
        self._st = StreamState(call.opts.retry_delay)
        self._over = False  # ended, failed or aborted: closing it cancels nothing

    async def __aiter__(self) -> AsyncIterator[bytes]:
        st = self._st
        try:
            while True:
                action = ""
                try:
                    async for chunk in self._cur:
                        out, action = st.take(chunk)
                        if out:
                            yield out
                        if action:
                            break
                except BROKEN:
                    pass  # the reader broke
                await self._close_cur()
                if action == "reset":
                    raise ResumeError(
                        "reprise: the generation this stream read failed; a new one started", request=self._call.post
                    )
                if st.done:
                    self._over = True
                    return
                st.parser.drop_partial()  # a cut event is read again whole
                nxt = await self._call.reconnect(st)
                if nxt is None:
                    self._over = True
                    return
                self._cur = nxt
        except BaseException as e:
            if isinstance(e, Exception):
                self._over = True
            else:
                await self._abort()  # the caller's abort: task cancellation, aclose()
            raise

    async def _close_cur(self) -> None:
        try:
            await self._cur.aclose()
        except Exception:
            pass

    async def _abort(self) -> None:
        if self._over:
            return
        self._over = True
        await self._close_cur()
        await self._call.abort()

    async def aclose(self) -> None:
        """Closes the stream; before its end, that cancels the generation (the caller's stop)."""
        if self._over or self._st.done:
            self._over = True
            await self._close_cur()
        else:
            await self._abort()


class _Body(_StreamBase):
    """A non-streamed answer that continues with Range requests of the Location when it breaks."""

    def __init__(self, call: _Call, first: httpx.AsyncByteStream) -> None:
        self._call = call
        self._cur: httpx.AsyncByteStream | None = first
        self._over = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        got, tries, skip = 0, 0, 0
        first_error: BaseException | None = None
        try:
            while self._cur is not None:
                try:
                    async for chunk in self._cur:
                        if skip:
                            cut = min(skip, len(chunk))
                            chunk, skip = chunk[cut:], skip - cut
                        if chunk:
                            got += len(chunk)
                            tries = 0
                            yield chunk
                    self._over = True
                    return
                except BROKEN as err:
                    first_error = first_error or err
                    await self._close_cur()
                    self._cur = None
                    while True:
                        tries += 1
                        if tries > self._call.opts.max_attempts:
                            raise first_error from None
                        try:
                            nxt, skip = await self._call.continue_body(got, tries)
                        except BROKEN:
                            continue
                        break
                    if nxt is None:
                        self._over = True
                        return
                    self._cur = nxt
        except BaseException as e:
            if isinstance(e, Exception):
                self._over = True
            else:
                await self._abort()
            raise

    async def _close_cur(self) -> None:
        if self._cur is None:
            return
        try:
            await self._cur.aclose()
        except Exception:
            pass

    async def _abort(self) -> None:
        if self._over:
            return
        self._over = True
        await self._close_cur()
        await self._call.abort()

    async def aclose(self) -> None:
        """Closes the answer; before its end, that cancels the generation (the caller's stop)."""
        if self._over:
            await self._close_cur()
        else:
            await self._abort()
