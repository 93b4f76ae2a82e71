"""mbox files, read and written one message at a time (mboxrd).

Reading: a message starts at a ``From `` line that either follows a blank line or carries a
date (so an unquoted ``From `` in a body written by a careless mboxo writer stays body text).
Lines matching ``>+From `` lose one ``>`` (mboxrd; on an mboxo file this also unquotes what
mboxo quoted, and changes a body line that really began with ``>>From `` -- rare and harmless).
The blank line that ends each message is the separator, not part of the message.

The mbox metadata headers of the first header block (``Status``, ``X-Status``, ``X-Keywords``,
and the ``X-UID``/``X-IMAPbase`` that UW-IMAP and Dovecot add) become flags and are not stored,
as Dovecot does; a message carrying ``X-IMAP`` is UW-IMAP's folder pseudo-message and is
skipped.  The internal date comes from the ``From `` line, read as UTC (failing that, from
the ``Date`` header).

Writing (export) is mboxrd: every line matching ``>*From `` gets one more ``>``, so reading the
file back gives the same bytes.  Flags are written as ``Status``/``X-Status``/``X-Keywords`` just
before the blank line that ends the header, which reading strips again.

Line ends: messages are stored with CRLF (see :mod:`.spool`); export writes LF again.

Memory: the file is read in blocks of :data:`BLOCK` bytes and scanned with ``bytes.find`` and one
regular expression; a message is held in a :class:`Spool`, in memory up to ``spill`` bytes and
in an anonymous temporary file beyond.  A 2 GB file never sits in memory, nor a 2 GB message.
"""

from __future__ import annotations

import calendar
import email.utils
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from .spool import Spool

BLOCK = 1024 * 1024
MAX_HEADER_LINE = 64 * 1024
"""A header line longer than this ends the header block (the rest is taken as body)."""

_BODY_MARK = re.compile(rb"\n(>*)From ")
_QUOTE = re.compile(rb"(?m)^(>*From )")
_HEADER = re.compile(rb"[!-9;-~]+[ \t]*:")
_MONTHS = {m.encode(): i for i, m in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}
_FROM_DATE = re.compile(
    rb"(?P<mon>[A-Za-z]{3})\s+(?P<day>\d{1,2})\s+(?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2}))?"
    rb"\s+(?:(?P<tz1>[A-Za-z]{1,5}|[+-]\d{4})\s+)?(?P<year>\d{4})(?:\s+(?P<tz2>[+-]\d{4}))?")
_META = {b"status", b"x-status", b"x-keywords", b"x-uid", b"x-imapbase", b"x-imap"}
_X_STATUS = {"A": "\\Answered", "F": "\\Flagged", "T": "\\Draft", "D": "\\Deleted"}
_ATOM_BAD = re.compile(r'[\x00-\x20\x7f(){%*"\\\]]')


def parse_from_line(line: bytes) -> float | None:
    """The date of an mbox ``From `` line as a Unix time, or None if it has none.

    Accepts ``From sender Sat Nov 21 12:00:00 2026``, with or without seconds and weekday, and
    with a time zone name or a numeric offset before or after the year.  No zone means UTC.
    """
    m = _FROM_DATE.search(line, 5)
    if not m or m.group("mon").lower() not in _MONTHS:
        return None
    try:
        stamp = calendar.timegm((int(m.group("year")), _MONTHS[m.group("mon").lower()],
                                 int(m.group("day")), int(m.group("h")), int(m.group("m")),
                                 int(m.group("s") or 0), 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    zone = m.group("tz2") or m.group("tz1") or b""
    if zone[:1] in (b"+", b"-"):
        offset = int(zone[1:3]) * 3600 + int(zone[3:5]) * 60
        stamp -= offset if zone[:1] == b"+" else -offset
    return float(stamp)


def _header_date(value: bytes) -> float | None:
    """A Date header's time, for a ``From `` line without a readable date."""
    parsed = email.utils.parsedate_tz(value.decode("ascii", "replace").strip())
    if parsed is None:
        return None
    try:
        return float(email.utils.mktime_tz(parsed))
    except (OverflowError, ValueError):
        return None


def flags_from_headers(name: bytes, value: bytes) -> set[str]:
    """The IMAP flags an mbox metadata header stands for."""
    text = value.decode("ascii", "replace")
    if name == b"status":
        return {"\\Seen"} if "R" in text else set()
    if name == b"x-status":
        return {flag for ch, flag in _X_STATUS.items() if ch in text}
    if name == b"x-keywords":
        return {k for k in re.split(r"[\s,]+", text) if k and not _ATOM_BAD.search(k)
                and not k.startswith("\\")}
    return set()


def metadata_headers(flags, newline: bytes = b"\n") -> bytes:
    """``Status``/``X-Status``/``X-Keywords`` lines for ``flags`` (what :func:`flags_from_headers`
    reads back).  None at all for a message without flags, so that a plain mbox of unread
    messages comes back from import and export unchanged."""
    out = b"Status: RO" + newline if "\\Seen" in flags else b""
    x_status = "".join(ch for ch, flag in _X_STATUS.items() if flag in flags)
    if x_status:
        out += b"X-Status: " + x_status.encode() + newline
    keywords = sorted(f for f in flags if not f.startswith("\\"))
    if keywords:
        out += b"X-Keywords: " + " ".join(keywords).encode() + newline
    return out


@dataclass
class MboxMessage:
    """One message read from an mbox file."""

    number: int
    """1-based position in the file."""
    offset: int
    """Byte offset of its ``From `` line."""
    spool: Spool
    flags: set[str] = field(default_factory=set)
    internal_date: float | None = None
    error: str | None = None
    """Why the message cannot be imported (it is reported and skipped)."""
    skip: str | None = None
    """Why the message is deliberately not imported (not an error)."""


class MboxReader:
    """Iterate over the messages of an mbox file opened in binary mode.

    ``crlf`` makes bare LFs CRLF in the messages (as they are stored); ``max_size`` is the
    largest message spooled, in stored bytes.  :attr:`position` is the number of bytes
    consumed so far (for progress).  Bytes before the first ``From `` line are reported as
    :attr:`leading_garbage` (their count).
    """

    def __init__(self, f: BinaryIO, spill: int = 1024 * 1024, max_size: int | None = None,
                 crlf: bool = True):
        self.f = f
        self.spill = spill
        self.max_size = max_size
        self.crlf = crlf
        self.buf = b""
        self.i = 0           # first unconsumed byte of buf
        self.base = 0        # file offset of buf[0]
        self.eof = False
        self.leading_garbage = 0

    @property
    def position(self) -> int:
        return self.base + self.i

    # -- buffer ---------------------------------------------------------------------------------

    def _fill(self) -> bool:
        """Read another block; keep three consumed bytes before ``i`` for look-behind."""
        if self.eof:
            return False
        data = self.f.read(BLOCK)
        if not data:
            self.eof = True
            return False
        keep = max(0, self.i - 3)
        self.buf = self.buf[keep:] + data
        self.base += keep
        self.i -= keep
        return True

    def _readline(self, limit: int) -> bytes:
        """The next line (with its newline), at most ``limit`` bytes; b"" at end of file."""
        while True:
            j = self.buf.find(b"\n", self.i, self.i + limit)
            if j >= 0:
                line = self.buf[self.i:j + 1]
                self.i = j + 1
                return line
            if len(self.buf) - self.i >= limit or not self._fill():
                line = self.buf[self.i:self.i + limit]
                self.i += len(line)
                return line

    def _line_ahead(self) -> bytes | None:
        """The complete line at ``i`` without consuming it; None if longer than a header line
        may be.  May refill the buffer (``i`` stays on the same byte)."""
        while True:
            j = self.buf.find(b"\n", self.i)
            if j >= 0:
                return self.buf[self.i:j + 1]
            if len(self.buf) - self.i > MAX_HEADER_LINE:
                return None
            if not self._fill():
                return self.buf[self.i:]

    # -- messages -------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[MboxMessage]:
        line = self._readline(MAX_HEADER_LINE)
        while line and not line.startswith(b"From "):
            self.leading_garbage += len(line)
            line = self._readline(MAX_HEADER_LINE)
        number = 0
        while line:
            number += 1
            message, line = self._message(number, line)
            yield message

    def _message(self, number: int, from_line: bytes) -> tuple[MboxMessage, bytes]:
        """Read one message after its ``From `` line; return it and the next ``From `` line."""
        offset = self.position - len(from_line)
        msg = MboxMessage(number, offset, Spool(self.spill, self.max_size, self.crlf),
                          internal_date=parse_from_line(from_line))
        spool = msg.spool
        # The header block, line by line: metadata headers become flags and are left out.
        # Kept lines are collected and handed to the spool in one write.
        kept: list[bytes] = []
        dropping = False
        first = True
        while True:
            start = self.position
            line = self._readline(MAX_HEADER_LINE)
            if not line or line.startswith(b"From ") and parse_from_line(line) is not None:
                spool.write(b"".join(kept))
                return self._end(msg, blank=not line), line
            if line in (b"\n", b"\r\n"):
                kept.append(line)
                break
            if line[:1] in (b" ", b"\t") and not first:
                if not dropping:
                    kept.append(line)
                continue
            colon = line.find(b":")
            if colon < 1 or not line.endswith(b"\n") or _HEADER.match(line) is None:
                if first:
                    msg.error = "not a mail message: its first line is not a header field"
                self.i = start - self.base  # the header ended without a blank line: body
                break
            first = False
            name = line[:colon].rstrip().lower()
            dropping = name in _META
            if dropping:
                if name == b"x-imap":
                    msg.skip = "folder internal data (UW-IMAP pseudo message)"
                msg.flags |= flags_from_headers(name, line[colon + 1:])
                continue
            if name == b"date" and msg.internal_date is None:
                msg.internal_date = _header_date(line[colon + 1:])
            kept.append(line)
        spool.write(b"".join(kept))
        return self._body(msg)

    def _body(self, msg: MboxMessage) -> tuple[MboxMessage, bytes]:
        """Copy the body to the spool, unquoting ``>+From ``, up to the next message."""
        spool = msg.spool
        search = self.i - 1  # the newline before the first body line (kept by _fill)
        while True:
            m = _BODY_MARK.search(self.buf, max(search, 0))
            if m is None:
                if self.eof or not self._more_body(spool):
                    spool.write(self.buf[self.i:])
                    self.i = len(self.buf)
                    return self._end(msg, blank=True), b""
                search = self.i - 1
                continue
            line_start = m.start() + 1
            # Whatever comes before the line is this message's, separator or not.
            spool.write(self.buf[self.i:line_start])
            self.i = line_start
            if m.group(1):  # a quoted From line: drop one '>'
                self.i += 1
                search = self.i
                continue
            blank_before = self.buf[max(0, self.i - 2):self.i] == b"\n\n" or \
                self.buf[max(0, self.i - 3):self.i] == b"\n\r\n"
            line = self._line_ahead()
            if line is not None and (blank_before or parse_from_line(line) is not None):
                self.i += len(line)
                return self._end(msg, blank=blank_before), line
            search = self.i  # an unquoted From in the body: body text

    def _more_body(self, spool: Spool) -> bool:
        """Hand the complete lines of the buffer to the spool and read another block."""
        cut = self.buf.rfind(b"\n", self.i) + 1
        if cut <= self.i and len(self.buf) - self.i > BLOCK:
            cut = len(self.buf) - MAX_HEADER_LINE  # one huge line: keep only its tail
        if cut > self.i:
            spool.write(self.buf[self.i:cut])
            self.i = cut
        return self._fill()

    def _end(self, msg: MboxMessage, blank: bool) -> MboxMessage:
        """Finish a message; ``blank``: it ended at a blank line, which is the separator."""
        msg.spool.finish(drop_blank_line=blank)
        if msg.error is None and msg.spool.size == 0:
            msg.error = "empty message"
        return msg


class MboxWriter:
    """Write messages to an mbox file (mboxrd), each from a binary reader."""

    def __init__(self, f: BinaryIO):
        self.f = f

    def write(self, reader, flags, internal_date: float, sender: str = "MAILER-DAEMON") -> int:
        """Append one message read from ``reader``; return the bytes written."""
        out = self.f
        start = out.tell()
        out.write(b"From %s %s\n" % (sender.encode("ascii", "replace") or b"MAILER-DAEMON",
                                     time.asctime(time.gmtime(internal_date)).encode()))
        block = _with_metadata(reader, flags)
        at_line_start = True
        pending = b""  # the start of a line that may turn out to be a From line
        last = b"\n"
        while True:
            chunk = pending + block
            if not chunk:
                break
            cut = chunk.rfind(b"\n") + 1
            if block and _PARTIAL_FROM.fullmatch(chunk, cut) and (cut or at_line_start):
                chunk, pending = chunk[:cut], chunk[cut:]
            else:
                pending = b""
            if chunk:
                out.write(_quote(chunk, at_line_start))
                last = chunk[-1:]
                at_line_start = last == b"\n"
            if not block and not pending:
                break
            block = reader.read(BLOCK)
        if last != b"\n":
            out.write(b"\n")
        out.write(b"\n")
        return out.tell() - start


_PARTIAL_FROM = re.compile(rb">*(?:F|Fr|Fro|From)?")


def _quote(data: bytes, at_line_start: bool) -> bytes:
    """mboxrd quoting of ``data``; its first line is quoted only if it starts a line."""
    if at_line_start:
        return _QUOTE.sub(rb">\1", data)
    nl = data.find(b"\n") + 1
    return data[:nl] + _QUOTE.sub(rb">\1", data[nl:]) if nl else data


def _with_metadata(reader, flags) -> bytes:
    """The first bytes of the message, read up to the end of its header, with the metadata
    headers inserted before the blank line that ends it."""
    data = b""
    while True:
        block = reader.read(BLOCK)
        data += block
        end = _header_end(data)
        if end is not None or not block or len(data) > MAX_HEADER_LINE * 16:
            break
    if end is None:  # no blank line: the whole message is header
        newline = b"\r\n" if data.endswith(b"\r\n") else b"\n"
        if data and not data.endswith(b"\n"):
            data += b"\n"
        return data + metadata_headers(flags, newline)
    blank = b"\r\n" if data[end - 2:end] == b"\r\n" else b"\n"
    return data[:end - len(blank)] + metadata_headers(flags, blank) + data[end - len(blank):]


def _header_end(data: bytes) -> int | None:
    """Offset just past the blank line that ends the header block, if it is in ``data``."""
    if data.startswith(b"\r\n"):
        return 2
    if data.startswith(b"\n"):
        return 1
    ends = [i + n for i, n in ((data.find(b"\n\r\n"), 3), (data.find(b"\n\n"), 2)) if i >= 0]
    return min(ends) if ends else None
