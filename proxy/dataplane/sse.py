"""Server-sent events, framed without I/O: bytes in, events out (``Framer``), and an event as the
proxy writes it (``encode``).

The rules kept are the WHATWG HTML standard's ("Parsing an event stream"):
- a line ends with CRLF, LF or CR; a CR that ends one read and an LF that starts the next are
  one line end;
- a blank line ends an event; a line starting with ``:`` is a comment, anywhere;
- a field line is ``name:value``, one space after the colon dropped (``name`` alone: an empty
  value); the ``data`` lines of one event join with ``"\\n"``.
Left to the caller: what the data means. Comments and the other fields (``event``, ``id``,
``retry``) are kept as lines, in order, not interpreted. Bytes after the last blank line wait for
the next read; at the end of the stream they are an incomplete event, which the standard drops.
Not done (no replica sends it): stripping a byte-order mark at the start.

Written here rather than taken from a library: the kept SSE parsers (httpx-sse's decoder,
sseclient-py) read decoded ``str`` lines and build an object per event, while the relay forwards
the payload's bytes as they came, fed from the reads it already has.

Cost: ``single`` tells in four C-level checks whether a read is one whole event of one ``data:``
line with nothing pending (vLLM writes one per token), which its caller may take as it came. In
``feed``, a read without a CR is joined to the incomplete tail and split at blank lines, C-level
work linear in the read, and an event of one ``data: `` line is then its payload; a read with a
CR costs two more C-level passes (CRLF and CR become LF); only an event of several lines is
split into lines in Python.
"""

from __future__ import annotations

END = b"\n\n"
_DATA = b"data: "
_LF = ord("\n")

# One event: its data lines joined with "\n" (None: it had no data line), and its other lines
# (comments, other fields), each ended by "\n", in order. A tuple: one is made per token.
Event = tuple[bytes | None, bytes]


class Framer:
    """One stream's framing state: the incomplete event's bytes (LF line ends) and whether the
    last read ended with a CR."""

    __slots__ = ("_cr", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._cr = False

    def feed(self, data: bytes) -> list[Event]:
        """The events that ``data`` completes, in order."""
        if self._cr or b"\r" in data:
            data = self._lf(data)
        blocks = (self._tail + data).split(END) if self._tail else data.split(END)
        self._tail = blocks.pop()
        events: list[Event] = []
        for block in blocks:
            if block.startswith(_DATA) and b"\n" not in block:  # vLLM's: one data line
                events.append((block[6:], b""))
            elif block.strip(b"\n"):
                events.append(_fields(block))
        return events

    def single(self, data: bytes) -> bool:
        """``data`` is one whole event of one ``data: `` line and nothing is pending (vLLM writes
        one such event per token): the caller may take it as it is, without ``feed``."""
        return (
            not self._tail
            and not self._cr
            and data.find(b"\n") == len(data) - 2
            and data[-1] == _LF
            and data.startswith(_DATA)
            and b"\r" not in data
        )

    def _lf(self, data: bytes) -> bytes:
        """``data`` with LF line ends (CRLF and CR become LF; the LF of a CRLF whose CR ended
        the last read is dropped)."""
        if not data:  # nothing read: a CR that ended the last read still may begin a CRLF
            return data
        if self._cr and data[:1] == b"\n":
            data = data[1:]
        self._cr = data[-1:] == b"\r"
        return data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def _fields(block: bytes) -> Event:
    """The event of ``block``'s lines (a leading blank one, left by a run of blank lines, ends
    an empty event: skipped)."""
    data: list[bytes] = []
    other: list[bytes] = []
    for line in block.removeprefix(b"\n").split(b"\n"):
        name, _, value = line.partition(b":")
        if name == b"data":
            data.append(value[1:] if value[:1] == b" " else value)
        else:  # a comment (no name) or another field
            other.append(line + b"\n")
    return (b"\n".join(data) if data else None), b"".join(other)


def encode(data: bytes, lines: bytes = b"") -> bytes:
    """An event as the proxy writes it: ``lines``, then ``data`` as ``data: `` lines, then the
    blank line; LF line ends."""
    return lines + _DATA + data.replace(b"\n", b"\ndata: ") + END
