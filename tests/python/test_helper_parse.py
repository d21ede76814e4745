"""The Python helper's event parser and stream state, alone: whole events
whatever the chunking, their bytes unchanged, and which events end a
stream, resume it or give it up."""

from __future__ import annotations

import pytest

from reprise import EventParser
from reprise._common import StreamState

STREAM = (
    b"id: 1-1-1\r\nretry: 250\r\ndata: {\"a\":1}\r\n\r\n"
    b": a comment\n\n"
    b"event: response.output_text.delta\rid: 1-2-1\rdata: x\r\r"
    b"id: 1-3-1\ndata: line one\ndata: line two\n\n"
)


@pytest.mark.parametrize("cut", range(len(STREAM) + 1))
def test_events_are_whole_whatever_the_chunking(cut: int) -> None:
    p = EventParser()
    events = p.push(STREAM[:cut]) + p.push(STREAM[cut:])
    assert b"".join(e.raw for e in events) == STREAM
    assert [e.type for e in events] == ["", "", "response.output_text.delta", ""]
    assert [e.has_id for e in events] == [True, False, True, True]
    assert events[0].retry == 0.25
    assert p.last_id == "1-3-1"


@pytest.mark.parametrize(
    "event, final",
    [
        (b"data: [DONE]\n\n", True),
        (b"event: response.completed\ndata: {}\n\n", True),
        (b"event: response.incomplete\ndata: {}\n\n", True),
        (b"event: message_stop\ndata: {}\n\n", True),
        (b'data: {"type":"speech.audio.done"}\n\n', True),
        (b'data: {"type":"message_stop"}\n\n', True),
        (b"id: 9\nevent: error\ndata: {}\n\n", True),
        (b"event: error\ndata: {}\n\n", False),
        (b"event: response.output_text.delta\ndata: {}\n\n", False),
        (b'data: {"type":"speech.audio.delta"}\n\n', False),
    ],
)
def test_which_events_end_a_stream(event: bytes, final: bool) -> None:
    (ev,) = EventParser().push(event)
    assert ev.final is final


def test_an_error_without_id_resumes_and_reset_gives_up() -> None:
    st = StreamState(1.0)
    out, action = st.take(b"id: 1\ndata: a\n\nevent: error\ndata: {}\n\nid: 2\ndata: b\n\n")
    assert (out, action) == (b"id: 1\ndata: a\n\n", "resume")
    st = StreamState(1.0)
    out, action = st.take(b"id: 1\ndata: a\n\nevent: reset\ndata: {}\n\n")
    assert (out, action) == (b"id: 1\ndata: a\n\n", "reset")
    assert not st.done


def test_a_partial_event_is_dropped_at_a_break() -> None:
    p = EventParser()
    assert p.push(b"id: 1\ndata: a\n\nid: 2\ndata: b") != []
    p.drop_partial()
    (ev,) = p.push(b"id: 2\ndata: b\n\n")
    assert ev.raw == b"id: 2\ndata: b\n\n"
    assert p.last_id == "2"


def test_comment_only_blocks_are_not_passed_on() -> None:
    st = StreamState(1.0)
    out, action = st.take(b"id: 1\ndata: a\n\n: ping\n\nid: 2\ndata: b\n\n")
    assert (out, action) == (b"id: 1\ndata: a\n\nid: 2\ndata: b\n\n", "")
