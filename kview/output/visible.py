"""Text from a trace, a snapshot or a file name made safe for a terminal: every control
character (C0, DEL, C1) shown as `\\x1b`, never sent as itself.

A kernel name holding `ESC ] 52 ; c ; ... BEL` would otherwise set the user's clipboard, and
`ESC [ 2J` clear the screen. The rule is made here once and applied where text leaves kview:
`visible` for one value (a name, a title: line breaks and tabs too), `visible_lines` and
`VisibleStream` for a document (its own line breaks and tabs kept), `json_visible` for JSON,
which keeps every byte faithfully as a `\\u` escape.
"""

from __future__ import annotations

import re
from typing import BinaryIO

# what one value may not hold as itself: every control character (C0, DEL, C1), line breaks
# and tabs too (also polars' regex syntax, for a column test)
ANY = r"[\x00-\x1f\x7f-\x9f]"
_ANY = re.compile(ANY)
# the same characters' ASCII part (C1 besides: text_bytes.lacks(..., c1=True))
ANY_ASCII = "".join(map(chr, [*range(0x20), 0x7F]))
# what a document may not hold as itself: C0 but tab and line feed, DEL, C1 (also polars' regex
# syntax, for a column test that spares the writers' output a scan)
IN_LINES = r"[\x00-\x08\x0b-\x1f\x7f-\x9f]"
_IN_LINES = re.compile(IN_LINES)
# the same characters' ASCII part (C1 besides: text_bytes.lacks(..., c1=True))
IN_LINES_ASCII = "".join(map(chr, [*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F]))
# the same characters in UTF-8: C0 but tab and line feed, DEL, and C1 (U+0080..U+009F = C2 80..9F)
_IN_LINES_BYTES = re.compile(b"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")
# what JSON may hold raw but a terminal acts on (the writers escape C0 themselves)
_JSON_RAW = re.compile(b"\x7f|\xc2[\x80-\x9f]")


def _shown(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def _shown_bytes(m: re.Match[bytes]) -> bytes:
    return b"\\x%02x" % m.group()[-1]


def visible(text: str) -> str:
    """One value as one printable line: every control character, line breaks and tabs too, as `\\xNN`."""
    return _ANY.sub(_shown, text) if _ANY.search(text) else text


def visible_lines(text: str) -> str:
    """A document: control characters as `\\xNN`, its line breaks and tabs kept."""
    return _IN_LINES.sub(_shown, text) if _IN_LINES.search(text) else text


def json_visible(data: bytes) -> bytes:
    """JSON text (UTF-8) whose DEL and C1 characters, which JSON may hold raw, are `\\u` escapes:
    the same document to a parser, nothing a terminal acts on. Outside strings JSON is ASCII
    without them, so every one found is inside a string."""
    # the two lead bytes looked for alone first: a search for one byte runs at memory speed,
    # where the pattern is tried at every byte (nvtx_sum's 1.6 GB of JSON: 12 CPU s)
    if b"\x7f" not in data and b"\xc2" not in data:
        return data
    return _JSON_RAW.sub(lambda m: b"\\u%04x" % (m.group()[-1]), data) if _JSON_RAW.search(data) else data


class VisibleStream:
    """A binary stream that writes a UTF-8 document into `out` as `visible_lines` would show it,
    chunk by chunk (a C1 character split between two writes is held back until its second
    byte comes). `finish()` writes what is held back."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.held = b""

    def write(self, data) -> int:
        n = memoryview(data).nbytes
        chunk = self.held + bytes(data) if self.held else data
        self.held = b""
        if chunk[-1:] == b"\xc2":
            chunk, self.held = chunk[:-1], b"\xc2"
        if _IN_LINES_BYTES.search(chunk):
            chunk = _IN_LINES_BYTES.sub(_shown_bytes, bytes(chunk))
        if chunk:
            self.out.write(chunk)
        return n

    def flush(self) -> None:
        pass

    def finish(self) -> None:
        if self.held:
            self.out.write(self.held)
            self.held = b""


class VisibleText:
    """A text stream (stderr) that writes every line as `visible_lines` shows it: the messages
    that name a file or quote a trace can hold neither."""

    def __init__(self, out) -> None:
        self.out = out

    def write(self, text: str) -> int:
        self.out.write(visible_lines(text))
        return len(text)

    def __getattr__(self, name: str):
        return getattr(self.out, name)
