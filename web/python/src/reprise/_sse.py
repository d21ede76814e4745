"""Splitting an SSE byte stream into whole events (WHATWG HTML §9.2.6)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

# Event types that end a stream with its result.
TERMINAL = frozenset({"response.completed", "response.incomplete", "message_stop", "speech.audio.done"})

_EOL = re.compile(rb"[\r\n]")
_DIGITS = re.compile(r"[0-9]+")


@dataclass(frozen=True)
class Event:
    """One whole event as received, and the fields a resume needs."""

    raw: bytes  # its bytes, the blank line that ends it included
    type: str  # its event: field, "" when absent
    has_id: bool  # it had a non-empty id: field
    is_data: bool  # it had a data: field
    final: bool  # a terminal event, or an error that ends the generation
    retry: float | None  # its retry: field, in seconds
    blank: bool = False  # no field at all: comments only (reprise's ": ping"), it dispatches nothing


class EventParser:
    """Splits an SSE byte stream into whole events, their bytes unchanged.

    Lines end in CRLF, LF or CR; a blank line ends an event. ``last_id`` is
    the id of the last event that had one: the stream's cursor.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._scan = 0  # where the next line starts in _buf
        self.last_id = ""
        self._clear()

    def _clear(self) -> None:
        self._type = ""
        self._data: list[str] = []
        self._id: str | None = None
        self._retry: float | None = None
        self._is_data = False

    def drop_partial(self) -> None:
        """Forgets the bytes of an event that did not end."""
        self._buf.clear()
        self._scan = 0
        self._clear()

    def push(self, chunk: bytes) -> list[Event]:
        """Takes the next bytes; returns the events they complete."""
        buf = self._buf
        buf += chunk
        events: list[Event] = []
        start = 0
        while True:
            m = _EOL.search(buf, self._scan)
            if m is None:
                break
            end = m.start()
            nxt = end + 1
            if buf[end] == 0x0D:
                if nxt >= len(buf):
                    break  # a CRLF may be split: wait for the next byte
                if buf[nxt] == 0x0A:
                    nxt += 1
            line = bytes(buf[self._scan : end])
            self._scan = nxt
            if not line:
                events.append(self._dispatch(bytes(buf[start:nxt])))
                start = nxt
                continue
            self._field(line.decode("utf-8", "replace"))
        del buf[:start]
        self._scan -= start
        return events

    def _field(self, line: str) -> None:
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
            self._is_data = True
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry":
            if _DIGITS.fullmatch(value):
                self._retry = int(value) / 1000

    def _dispatch(self, raw: bytes) -> Event:
        if self._id is not None:
            self.last_id = self._id
        has_id = bool(self._id)
        data = "\n".join(self._data)
        final = is_terminal(self._type, data) or (self._type == "error" and has_id)
        blank = self._id is None and not self._type and not self._is_data and self._retry is None
        ev = Event(raw, self._type, has_id, self._is_data, final, self._retry, blank)
        self._clear()
        return ev


def is_terminal(type_: str, data: str) -> bool:
    """Whether an event ends its stream with a result: chat's ``data: [DONE]``,
    or a terminal type (as ``event:`` or as the data's ``"type"``)."""
    if data == "[DONE]" and type_ in ("", "message"):
        return True
    if type_ in TERMINAL:
        return True
    if type_ or not data.startswith("{") or '"type"' not in data:
        return False
    try:
        v = json.loads(data)
    except ValueError:
        return False
    return isinstance(v, dict) and v.get("type") in TERMINAL
