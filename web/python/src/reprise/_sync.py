"""The sync transport: reprise.Transport."""

from __future__ import annotations

import time
from collections.abc import Iterator
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

    class _TransportBase(httpx.BaseTransport, httpx2.BaseTransport):  # type: ignore[misc]
        pass

    class _StreamBase(httpx.SyncByteStream, httpx2.SyncByteStream):
        pass

else:
    _TransportBase = httpx.BaseTransport
    _StreamBase = httpx.SyncByteStream


class Transport(_TransportBase):
    """An httpx transport that resumes reprise streams by itself.

    Use it as ``httpx.Client(transport=reprise.Transport())`` (or with an
    ``httpx2.Client``, which the current OpenAI and Anthropic SDKs take) and
    pass that client as ``http_client=`` to ``openai.OpenAI`` or
    ``anthropic.Anthropic``.

    For a POST to a journaled path (``/v1/chat/completions``,
    ``/v1/responses``, ``/v1/messages``, ``/v1/audio/speech``) it adds an
    ``Idempotency-Key`` unless the request has one, the same one again for
    the SDK's own retry of the same request. An event stream that breaks
    before its terminal event is continued from the answer's ``Location``
    with ``Last-Event-ID``: the caller reads every event once, in order. A
    non-streamed call whose POST times out or breaks is asked again under
    its key, and a JSON answer cut mid-body continues with a ``Range``
    request of the ``Location``. Closing an answer before its end cancels
    its generation (``cancel_on_abort``); a broken connection never does.
    Everything else goes to the inner transport unchanged.

    Args:
        transport: the transport that sends the requests (default
            ``httpx.HTTPTransport()``, or ``httpx2.HTTPTransport()`` for an
            httpx2 client).
        origin: when given (e.g. ``"https://reprise.example"``), requests to
            any other origin pass to the inner transport untouched.
        max_attempts: reconnections in a row without an event before the
            stream ends with ResumeError.
        retry_delay: the wait before the first reconnection, seconds, until
            the stream's ``retry:`` field says otherwise.
        max_delay: the longest wait between reconnections, seconds.
        post_attempts: how many times a non-streamed POST is sent under its
            key before its error is raised.
        cancel_on_abort: whether closing an answer before its end cancels
            the generation.
        cancel_timeout: how long a cancel may take, seconds.
    """

    def __init__(
        self,
        transport: httpx.BaseTransport | httpx2.BaseTransport | None = None,
        *,
        origin: str | None = None,
        max_attempts: int = 8,
        retry_delay: float = 1.0,
        max_delay: float = 10.0,
        post_attempts: int = 4,
        cancel_on_abort: bool = True,
        cancel_timeout: float = 2.0,
    ) -> None:
        self._inner = cast("httpx.BaseTransport | None", transport)
        self._defaults: dict[type, httpx.BaseTransport] = {}
        self._origin = parse_origin(origin)
        self._opts = Options(max_attempts, retry_delay, max_delay, post_attempts, cancel_on_abort, cancel_timeout)
        self._keys = RecentKeys()

    def _inner_for(self, request: httpx.Request) -> httpx.BaseTransport:
        if self._inner is not None:
            return self._inner
        kind = type(request)
        if kind not in self._defaults:
            if httpx2 is not None and isinstance(request, httpx2.Request):
                self._defaults[kind] = cast(httpx.BaseTransport, httpx2.HTTPTransport())
            else:
                self._defaults[kind] = httpx.HTTPTransport()
        return self._defaults[kind]

    @overload
    def handle_request(self, request: httpx.Request) -> httpx.Response: ...

    @overload
    def handle_request(self, request: httpx2.Request) -> httpx2.Response: ...

    def handle_request(self, request: httpx.Request | httpx2.Request) -> httpx.Response | httpx2.Response:
        """Sends request; resumes its answer when it is a journaled POST (see the class docstring)."""
        req = cast(httpx.Request, request)
        inner = self._inner_for(req)
        if not journaled(req, self._origin):
            return inner.handle_request(req)
        body = req.read()
        headers = req.headers.copy()
        if "idempotency-key" not in headers:
            headers["Idempotency-Key"] = self._keys.key(str(req.url), body, is_retry(headers))
        post = type(req)(req.method, req.url, headers=headers, content=body, extensions=req.extensions)
        return _Call(self._opts, inner, post, headers["idempotency-key"], asks_stream(body)).send()

    def close(self) -> None:
        """Closes the inner transport(s)."""
        if self._inner is not None:
            self._inner.close()
        for t in self._defaults.values():
            t.close()


class _Call:
    """One journaled POST and the requests that continue its answer."""

    def __init__(self, opts: Options, inner: httpx.BaseTransport, post: httpx.Request, key: str, streaming: bool) -> None:
        self.opts = opts
        self.inner = inner
        self.post = post
        self.key = key
        self.streaming = streaming
        self.location: httpx.URL | None = None
        self.same_origin = True
        self.cancelled = False

    def send(self) -> httpx.Response:
        asks = 0
        while True:
            asks += 1
            try:
                resp = self.inner.handle_request(self.post)
            except REASK:
                if self.streaming or asks >= self.opts.post_attempts:
                    raise
                time.sleep(min(self.opts.max_delay, POST_DELAY * 2 ** (asks - 1)))
                continue
            except BaseException as e:
                if not isinstance(e, Exception):
                    self.cancel()  # the caller's abort (KeyboardInterrupt)
                raise
            if resp.status_code == 409 and not self.streaming and asks < self.opts.post_attempts:
                # A duplicate of a running key: wait and ask again.
                resp.read()
                if b"idempotency_key_in_progress" in resp.content:
                    wait = retry_after(resp.headers)
                    time.sleep(min(self.opts.max_delay, POST_DELAY if wait is None else wait))
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
        first = cast(httpx.SyncByteStream, resp.stream)
        if is_event_stream(resp.headers):
            resp.stream = _Events(self, first)
        else:
            resp.stream = _Body(self, first)
        return resp

    def _get(self, headers: dict[str, str]) -> httpx.Response:
        assert self.location is not None
        ext = {"timeout": self.post.extensions["timeout"]} if "timeout" in self.post.extensions else {}
        return self.inner.handle_request(type(self.post)("GET", self.location, headers=headers, extensions=ext))

    def reconnect(self, st: StreamState) -> httpx.SyncByteStream | None:
        """The next reader of the event stream, or None when nothing follows the cursor (204)."""
        while True:
            st.tries += 1
            if st.tries > self.opts.max_attempts:
                raise ResumeError(
                    f"reprise: the stream broke and {self.opts.max_attempts} reconnections got no event",
                    status=st.status,
                    request=self.post,
                )
            time.sleep(self.opts.wait(st.delay, st.tries))
            headers = kept_headers(self.post.headers, self.same_origin, "text/event-stream")
            if st.parser.last_id:
                headers["Last-Event-ID"] = st.parser.last_id
            try:
                resp = self._get(headers)
            except BROKEN:
                continue  # the network again: next attempt
            if resp.status_code == 204:
                resp.close()
                return None
            if resp.status_code == 200 and is_event_stream(resp.headers) and identity(resp.headers):
                return cast(httpx.SyncByteStream, resp.stream)
            resp.close()
            st.status = resp.status_code
            if resp.status_code == 429 or resp.status_code >= 500:
                continue
            raise ResumeError(
                f"reprise: resuming the stream answered {resp.status_code}", status=resp.status_code, request=self.post
            )

    def continue_body(self, got: int, tries: int) -> tuple[httpx.SyncByteStream | None, int]:
        """A reader of the stored answer from byte got on (None: it had ended)
        and the bytes of it to skip; raises ResumeError once tries run out."""
        time.sleep(self.opts.wait(POST_DELAY, tries))
        headers = kept_headers(self.post.headers, self.same_origin, "*/*")
        headers["Accept-Encoding"] = "identity"
        headers["Range"] = f"bytes={got}-"
        resp = self._get(headers)
        stream = cast(httpx.SyncByteStream, resp.stream)
        if resp.status_code == 206 and range_start(resp.headers) == got:
            return stream, 0
        if resp.status_code == 200 and identity(resp.headers):
            return stream, got
        resp.close()
        if resp.status_code == 416 and range_total(resp.headers) == got:
            return None, 0
        if resp.status_code == 429 or resp.status_code >= 500:
            raise httpx.RemoteProtocolError(f"the Location answered {resp.status_code}")  # counted as a try
        raise ResumeError(
            f"reprise: continuing the answer got {resp.status_code}", status=resp.status_code, request=self.post
        )

    def cancel(self) -> None:
        """Cancels the generation, best-effort: POST …/cancel with a short timeout."""
        if self.cancelled or not self.opts.cancel_on_abort:
            return
        self.cancelled = True
        url = cancel_url(self.post.url, self.location, self.key)
        headers = kept_headers(self.post.headers, self.location is None or self.same_origin, "application/json")
        deadline = time.monotonic() + self.opts.cancel_timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            req = type(self.post)("POST", url, headers=headers, extensions={"timeout": timeout_ext(left)})
            try:
                resp = self.inner.handle_request(req)
                resp.close()
            except Exception:
                return
            if resp.status_code != 404 or self.location is not None:
                return
            time.sleep(0.05)  # the POST has not reached reprise yet: its key is unknown so far


class _Events(_StreamBase):
    """A resumed event stream: the POST's answer, then each reconnection's, whole events only."""

    def __init__(self, call: _Call, first: httpx.SyncByteStream) -> None:
        self._call = call
        self._cur = first
        self._st = StreamState(call.opts.retry_delay)
        self._over = False  # ended, failed or aborted: closing it cancels nothing

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._events()
        except BaseException as e:
            if isinstance(e, Exception):
                self._over = True
            else:
                self._abort()  # the caller's abort: GeneratorExit, KeyboardInterrupt
            raise

    def _events(self) -> Iterator[bytes]:
        st = self._st
        while True:
            action = ""
            try:
                for chunk in self._cur:
                    out, action = st.take(chunk)
                    if out:
                        yield out
                    if action:
                        break
            except BROKEN:
                pass  # the reader broke
            self._close_cur()
            if action == "reset":
                raise ResumeError(
                    "reprise: the generation this stream read failed; a new one started", request=self._call.post
                )
            if st.done:
                self._over = True
                return
            st.parser.drop_partial()  # a cut event is read again whole
            nxt = self._call.reconnect(st)
            if nxt is None:
                self._over = True
                return
            self._cur = nxt

    def _close_cur(self) -> None:
        try:
            self._cur.close()
        except Exception:
            pass

    def _abort(self) -> None:
        if self._over:
            return
        self._over = True
        self._close_cur()
        self._call.cancel()

    def close(self) -> None:
        """Closes the stream; before its end, that cancels the generation (the caller's stop)."""
        if self._over or self._st.done:
            self._over = True
            self._close_cur()
        else:
            self._abort()


class _Body(_StreamBase):
    """A non-streamed answer that continues with Range requests of the Location when it breaks."""

    def __init__(self, call: _Call, first: httpx.SyncByteStream) -> None:
        self._call = call
        self._cur: httpx.SyncByteStream | None = first
        self._over = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._body()
        except BaseException as e:
            if isinstance(e, Exception):
                self._over = True
            else:
                self._abort()
            raise

    def _body(self) -> Iterator[bytes]:
        got, tries, skip = 0, 0, 0
        first_error: BaseException | None = None
        while self._cur is not None:
            try:
                for chunk in self._cur:
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
                self._close_cur()
                self._cur = None
                while True:
                    tries += 1
                    if tries > self._call.opts.max_attempts:
                        raise first_error from None
                    try:
                        nxt, skip = self._call.continue_body(got, tries)
                    except BROKEN:
                        continue
                    break
                if nxt is None:
                    self._over = True
                    return
                self._cur = nxt

    def _close_cur(self) -> None:
        if self._cur is None:
            return
        try:
            self._cur.close()
        except Exception:
            pass

    def _abort(self) -> None:
        if self._over:
            return
        self._over = True
        self._close_cur()
        self._call.cancel()

    def close(self) -> None:
        """Closes the answer; before its end, that cancels the generation (the caller's stop)."""
        if self._over:
            self._close_cur()
        else:
            self._abort()
