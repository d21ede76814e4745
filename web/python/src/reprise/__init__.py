"""reprise: httpx transports that resume reprise streams by themselves.

    import httpx2, openai, reprise
    client = openai.OpenAI(base_url="https://your-reprise/v1",
                           http_client=httpx2.Client(transport=reprise.Transport()))

For a POST to a streaming endpoint (/v1/chat/completions, /v1/responses,
/v1/messages, /v1/audio/speech) the transport adds an Idempotency-Key when
the request has none (the same one again for the SDK's own retry of the
same request, so the retry attaches instead of generating twice). When the
event stream it answers breaks before the format's terminal event, it
reconnects to the answer's Location with the Last-Event-ID it saw, and goes
on: the caller reads one seamless stream, cut only at event boundaries,
every event exactly once, and the POST is never sent again. A non-streamed
call whose POST times out or breaks is asked again under its key; a JSON
answer cut mid-body continues with a Range request of its Location.
Everything else goes to the inner transport unchanged.

Stop is not a drop: closing an answer before its end (``stream.close()``,
leaving ``with`` early) or cancelling the task that awaits or reads it
cancels the generation (POST …/cancel), so the next identical request
generates afresh. A broken connection never cancels.

A reconnection sends the POST's credential (Authorization, x-api-key) again
only when the Location has the POST's origin: the same scheme, host and
port. A Location on another origin is still resumed, with none of the
caller's credential headers: its capability token (?token=) is all a reader
of the Location needs. A redirect answering a reconnection is not followed:
it ends the stream with a ResumeError.

It serves httpx and, when it is installed, httpx2 (the current OpenAI and
Anthropic SDKs take an ``httpx2.Client``); the same transport works in
either client. The Python twin of the JavaScript @reprise-dev/client and of
the Go package resume/roundtrip.
"""

from ._async import AsyncTransport
from ._common import ResumeError
from ._sse import Event, EventParser
from ._sync import Transport

__all__ = ["AsyncTransport", "Event", "EventParser", "ResumeError", "Transport"]
__version__ = "0.1.0"
