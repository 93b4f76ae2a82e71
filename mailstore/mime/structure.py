"""The streaming MIME structure parser.

A message is read once, at delivery, possibly 50 MB of it in chunks; this parser watches the
bytes go by and builds a :class:`~mailstore.mime.model.MessageInfo`.  It keeps header blocks
(capped) and a few counters, never bodies, so its memory does not grow with the message.

How it stays fast: body text is never looked at line by line.  Inside a leaf part the only
lines that matter are boundary lines, and those start with ``--``, so the parser jumps from one
``b"\\n--"`` to the next with :meth:`bytes.find` and counts the line feeds in between with
:meth:`bytes.count`; outside any multipart it only counts line feeds.  Header lines, which are
few, are handled one at a time.

How it stays bounded: the buffer only ever holds the start of one incomplete line, and only
while that line might still turn out to be a blank line or a boundary line; any other line is
consumed as it arrives.  A line of :data:`MAX_LINE` octets or more is never a boundary or blank
line (RFC 5322 caps lines at 998 octets anyway), so the wait is bounded, and deciding on the
*line's* length rather than on how much has arrived keeps the result independent of how the
message was split into chunks.  Each part's header block is stored up to :data:`MAX_HEADER`
octets (and all of them together up to :data:`MAX_HEADER_TOTAL`); beyond that it is counted but
not kept.  Nesting is tracked on an explicit stack, limited to :data:`MAX_DEPTH` entities, and
at most :data:`MAX_PARTS` parts are described; past either limit content is treated as opaque
body.

Line ends are LF, with or without CR before it, so bare-LF messages work; offsets are always
exact octet offsets into the original bytes.
"""

from __future__ import annotations

import re

from .address import parse_address_list
from .headers import (
    field_value,
    header_fields,
    parse_content_type,
    parse_disposition,
    parse_encoding,
    parse_language,
)
from .model import BodyPart, Envelope, MessageInfo

MAX_DEPTH = 64
"""Most entities open at once (a ``message/rfc822`` part and its message count as two)."""
MAX_PARTS = 5000
"""Most body parts described in one message; the rest is opaque."""
MAX_HEADER = 256 * 1024
"""Most octets of one header block kept for parsing."""
MAX_HEADER_TOTAL = 16 * 1024 * 1024
"""Most header octets kept over the whole message, which bounds the size of the result."""
MAX_LINE = 64 * 1024
"""Lines this long or longer are never taken for boundary or blank lines."""

_IDENTITY = frozenset(("7bit", "8bit", "binary"))
_PART_FIELDS = frozenset(("content-type", "content-transfer-encoding", "content-id",
                          "content-description", "content-md5", "content-disposition",
                          "content-language", "content-location"))
_MESSAGE_FIELDS = frozenset(("date", "subject", "from", "sender", "reply-to", "to", "cc", "bcc",
                             "in-reply-to", "message-id"))
_ALL_FIELDS = _PART_FIELDS | _MESSAGE_FIELDS
_ADDRESS_FIELDS = frozenset(("from", "sender", "reply-to", "to", "cc", "bcc"))


class _Frame:
    """An open entity on the parser's stack: the part being described and its parse state."""

    __slots__ = ("part", "msg", "hdr", "in_header", "nl_body", "boundary", "close", "digest",
                 "default_rfc822")

    def __init__(self, part: BodyPart, msg: MessageInfo | None, hdr: bytearray | None,
                 default_rfc822: bool):
        self.part = part
        self.msg = msg              # set when this entity is a message (top or encapsulated)
        self.hdr = hdr              # stored header octets, None once parsed or over budget
        self.in_header = True
        self.nl_body = 0            # line feeds seen before the body started
        self.boundary: bytes | None = None   # active multipart boundary (without "--")
        self.close = b""            # boundary + "--", the close delimiter's tail
        self.digest = False         # multipart/digest: children default to message/rfc822
        self.default_rfc822 = default_rfc822


def _count_lf(data: bytes) -> int:
    """The line feeds in ``data``.  ``bytes.count`` of one octet walks it octet by octet;
    ``replace`` finds them with memchr: 50 MB in 9 ms instead of 41 (issue 14), for one
    transient copy of a chunk."""
    return len(data) - len(data.replace(b"\n", b""))


class StructureParser:
    """Incremental parser: :meth:`feed` it the message in chunks, then :meth:`close` it.

    Chunks may split the message anywhere -- inside a CRLF, a header or a boundary line -- and
    the result is the same as for a single chunk.  Nothing in the input makes it raise.
    """

    def __init__(self) -> None:
        self._buf = bytearray()  # the start of the current line, while it may be special
        self._base = 0           # offset in the message of _buf[0]
        self._scan = 0           # _buf[:_scan] holds no line feed (saves rescanning)
        self._nl = 0             # line feeds consumed so far
        self._last = -1          # the last octet consumed
        self._prev_eol = 0       # the length of the last complete line's ending (1 or 2)
        self._midline = False    # in a line already known to be ordinary
        self._nactive = 0        # frames with an active boundary
        self._pattern: re.Pattern[bytes] | None = None   # finds their delimiter lines
        self._patterns: dict[frozenset[bytes], re.Pattern[bytes]] = {}
        self._nparts = 0
        self._hdr_total = 0
        self._truncated = False
        self._result: MessageInfo | None = None
        self._info = MessageInfo()
        root = self._new_frame(0, False, self._info)
        self._info.body = root.part
        self._stack = [root]

    # -- public -------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Parse the next chunk of the message.

        :param data: any number of octets (bytes-like), continuing where the last chunk ended
        """
        if self._result is not None:
            raise ValueError("feed() after close()")
        if not data:
            return
        buf = self._buf
        if not buf and not self._nactive and not self._midline and isinstance(data, bytes) \
                and not self._stack[-1].in_header:
            # A body no boundary can end (one-part mail, the bulk of a big one): only its
            # lines are counted, as _run would, without copying the chunk into the buffer.
            self._nl += _count_lf(data)
            self._last = data[-1]
            self._base += len(data)
            self._scan = 0
            return
        buf += data
        pos = self._run(buf)
        if pos:
            del buf[:pos]
            self._base += pos
        self._scan = len(buf)

    def close(self) -> MessageInfo:
        """Finish parsing (the message ends here) and return what was found.

        Calling it again returns the same object.
        """
        if self._result is not None:
            return self._result
        buf = self._buf
        if buf:
            # The last line has no line feed; it can still be a boundary (a close delimiter
            # without CRLF at the very end is common).
            n = len(buf)
            top = self._stack[-1]
            m = self._match(buf, 0, n) if n < MAX_LINE and self._nactive else None
            if m is not None:
                self._boundary(m, self._base, self._base + n)
            elif top.in_header:
                self._store(top, buf, 0, n)
            self._last = buf[n - 1]
            self._base += n
            self._buf = bytearray()
        size = self._base
        while self._stack:
            self._close_frame(self._stack.pop(), size, True)
        self._info.truncated = self._truncated
        self._result = self._info
        return self._info

    # -- the line machine ---------------------------------------------------------------------

    def _run(self, buf: bytearray) -> int:
        """Consume what can be consumed of ``buf``; return how many octets were."""
        n = len(buf)
        pos = 0
        lo = self._scan
        stack = self._stack
        while pos < n:
            top = stack[-1]
            if self._midline:
                j = buf.find(b"\n", max(pos, lo))
                if j < 0:
                    if top.in_header:
                        self._store(top, buf, pos, n)
                    self._last = buf[n - 1]
                    return n
                if top.in_header:
                    self._store(top, buf, pos, j + 1)
                self._end_line(buf, j)
                self._midline = False
                pos = j + 1
            elif top.in_header:
                if not self._nactive:
                    # No boundary can end this header: if its blank line is here, every line
                    # before it is just stored and counted, so take them all at once (what
                    # _header_line does line by line; a message arrives whole in one feed).
                    blank = _blank_line(buf, pos)
                    if blank >= 0:
                        self._store(top, buf, pos, blank)
                        self._nl += buf.count(b"\n", pos, blank)
                        j = buf.find(b"\n", blank)
                        self._end_line(buf, j)
                        self._finish_header(top, self._base + j + 1)
                        pos = j + 1
                        continue
                j = buf.find(b"\n", max(pos, lo))
                if j >= 0:
                    pos = self._header_line(top, buf, pos, j)
                    continue
                if n - pos < MAX_LINE and (
                        (n - pos == 1 and buf[pos] == 13)
                        or (self._nactive and buf[pos] == 45
                            and (n - pos == 1 or buf[pos + 1] == 45))):
                    return pos  # may still become a blank line or a boundary
                self._store(top, buf, pos, n)
                self._start_midline(buf)
                return n
            elif not self._nactive:
                # Nothing can start or end before the end of the message: just count lines.
                self._nl += buf.count(b"\n", pos)
                self._last = buf[n - 1]
                return n
            elif pos == 0 and buf.startswith(b"--"):
                # A line at the start of the buffer has no LF before it for the pattern.
                j = buf.find(b"\n", lo)
                if j < 0:
                    if n < MAX_LINE:
                        return 0
                    self._start_midline(buf)
                    return n
                self._delimiter_line(buf, 0, j)
                pos = j + 1
            else:
                pattern = self._pattern or self._compile()
                m = pattern.search(buf, max(pos - 1, lo))
                if m is not None:
                    c = m.start()  # the LF before the delimiter line
                    if c >= pos:
                        self._plain_lines(buf, pos, c)
                    j = m.end() - 1
                    self._delimiter_line(buf, c + 1, j)
                    pos = j + 1
                    continue
                j = buf.rfind(b"\n", max(pos, lo))
                if j >= 0:
                    self._plain_lines(buf, pos, j)
                    pos = j + 1
                if pos < n:
                    if n - pos < MAX_LINE and buf[pos] == 45 and (
                            n - pos == 1 or buf[pos + 1] == 45):
                        return pos  # may still become a delimiter line
                    self._start_midline(buf)
                return n
        return pos

    def _delimiter_line(self, buf: bytearray, pos: int, j: int) -> None:
        """Handle the body line ``buf[pos:j + 1]``, which may be a delimiter line."""
        m = self._match(buf, pos, j) if j - pos < MAX_LINE else None
        if m is not None:
            self._boundary(m, self._base + pos, self._base + j + 1)
        self._end_line(buf, j)

    def _start_midline(self, buf: bytearray) -> None:
        self._midline = True
        self._last = buf[-1]

    def _end_line(self, buf: bytearray, j: int) -> None:
        """Account for one line ending with the line feed at ``buf[j]``."""
        self._nl += 1
        self._prev_eol = 2 if (buf[j - 1] if j > 0 else self._last) == 13 else 1
        self._last = 10

    def _plain_lines(self, buf: bytearray, pos: int, j: int) -> None:
        """Account for whole ordinary lines from ``buf[pos]`` (a line start) to ``buf[j]``."""
        self._nl += buf.count(b"\n", pos, j + 1)
        self._prev_eol = 2 if (buf[j - 1] if j > 0 else self._last) == 13 else 1
        self._last = 10

    def _header_line(self, top: _Frame, buf: bytearray, pos: int, j: int) -> int:
        """Handle one complete header line ``buf[pos:j + 1]``; return where the next starts."""
        length = j - pos
        if length < MAX_LINE:
            if length == 0 or (length == 1 and buf[pos] == 13):
                self._end_line(buf, j)
                self._finish_header(top, self._base + j + 1)
                return j + 1
            if self._nactive and buf.startswith(b"--", pos):
                m = self._match(buf, pos, j)
                if m is not None:
                    self._boundary(m, self._base + pos, self._base + j + 1)
                    self._end_line(buf, j)
                    return j + 1
        self._store(top, buf, pos, j + 1)
        self._end_line(buf, j)
        return j + 1

    def _store(self, frame: _Frame, buf: bytearray, start: int, end: int) -> None:
        hdr = frame.hdr
        if hdr is None:
            return
        room = min(MAX_HEADER - len(hdr), MAX_HEADER_TOTAL - self._hdr_total)
        take = end - start
        if take > room:
            take = max(room, 0)
            self._truncated = True
        if take:
            hdr += buf[start:start + take]
            self._hdr_total += take

    # -- boundaries ---------------------------------------------------------------------------

    def _match(self, buf: bytearray, pos: int, end: int) -> tuple[int, bool] | None:
        """Is ``buf[pos:end]`` a delimiter line of an open multipart?

        RFC 2046 section 5.1.1: ``--boundary`` or ``--boundary--``, then optional whitespace.
        The innermost multipart wins when boundaries clash.

        :return: ``(stack index, is_close_delimiter)`` or ``None``
        """
        if not buf.startswith(b"--", pos):
            return None
        rest = bytes(buf[pos + 2:end]).rstrip(b" \t\r")
        stack = self._stack
        for k in range(len(stack) - 1, -1, -1):
            boundary = stack[k].boundary
            if boundary is None:
                continue
            if rest == boundary:
                return k, False
            if rest == stack[k].close:
                return k, True
        return None

    def _compile(self) -> re.Pattern[bytes]:
        """A pattern finding whole delimiter lines of every active boundary.

        Searching for complete delimiter lines rather than for any ``LF--`` keeps text full of
        ``--`` lines (signatures, ASCII art, diff output, even ``--boundary-lookalikes``) on
        the fast path: the regular expression engine skips them in C.  A delimiter line cut by
        the end of the buffer does not match, but it starts with ``--`` and so is kept for the
        next chunk.  Patterns are cached per set of boundaries.
        """
        key = frozenset(f.boundary for f in self._stack if f.boundary is not None)
        pattern = self._patterns.get(key)
        if pattern is None:
            alternatives = b"|".join(re.escape(b) for b in sorted(key))
            pattern = re.compile(b"\n--(?:" + alternatives + b")(?:--)?[ \t\r]*\n")
            self._patterns[key] = pattern
        self._pattern = pattern
        return pattern

    def _boundary(self, m: tuple[int, bool], start: int, after: int) -> None:
        """A delimiter line of the multipart ``stack[k]`` runs from ``start`` to ``after``.

        Everything opened inside that multipart ends just before the line break preceding the
        delimiter; then either a new part starts after the line or, for a close delimiter,
        the epilogue does (and the boundary stops being recognised).
        """
        k, close = m
        stack = self._stack
        floor = 0
        while len(stack) > k + 1:
            floor = self._close_frame(stack.pop(), start, False, floor)
        frame = stack[k]
        if not close and self._nparts >= MAX_PARTS:
            self._truncated = True
            close = True
        if close:
            frame.boundary = None
            self._nactive -= 1
            self._pattern = None
            return
        child = self._new_frame(after, frame.digest)
        frame.part.parts.append(child.part)
        stack.append(child)

    # -- entities -----------------------------------------------------------------------------

    def _new_frame(self, header_start: int, default_rfc822: bool,
                   msg: MessageInfo | None = None) -> _Frame:
        self._nparts += 1
        hdr = bytearray() if self._hdr_total < MAX_HEADER_TOTAL else None
        if hdr is None:
            self._truncated = True
        return _Frame(BodyPart(header_start=header_start), msg, hdr, default_rfc822)

    def _finish_header(self, frame: _Frame, body_start: int) -> None:
        """The header of ``frame`` ended at a blank line: describe it and open its body."""
        part = frame.part
        part.body_start = body_start
        self._apply_header(frame)
        frame.in_header = False
        frame.nl_body = self._nl
        type_ = part.type.lower()
        room = len(self._stack) < MAX_DEPTH and self._nparts < MAX_PARTS
        if part.parts is not None:
            boundary = part.boundary.rstrip(" \t") if part.boundary else ""
            if not boundary:
                return
            if not room:
                self._truncated = True
                return
            frame.boundary = boundary.encode("latin-1")
            frame.close = frame.boundary + b"--"
            frame.digest = part.subtype.lower() == "digest"
            self._nactive += 1
            self._pattern = None
        elif type_ == "message" and part.subtype.lower() == "rfc822":
            if (part.encoding or "7bit").lower() not in _IDENTITY:
                return  # cannot be parsed in place; opaque
            if not room:
                self._truncated = True
                return
            msg = MessageInfo()
            child = self._new_frame(body_start, False, msg)
            msg.body = child.part
            part.message = msg
            self._stack.append(child)

    def _apply_header(self, frame: _Frame) -> None:
        """Parse the stored header block of ``frame`` into its part (and envelope)."""
        block = bytes(frame.hdr) if frame.hdr is not None else b""
        frame.hdr = None
        wanted = _ALL_FIELDS if frame.msg is not None else _PART_FIELDS
        values: dict[str, str] = {}
        addresses: dict[str, list[str]] = {}  # every occurrence of each address field
        for name, raw in header_fields(block):
            key = name.lower()
            if key not in wanted:
                continue
            if key in _ADDRESS_FIELDS:
                addresses.setdefault(key, []).append(field_value(raw))
            if key not in values:
                values[key] = field_value(raw)
        part = frame.part
        ctype = values.get("content-type")
        parsed = parse_content_type(ctype) if ctype is not None else None
        if parsed is not None:
            part.type, part.subtype, part.params = parsed
        elif frame.default_rfc822:
            part.type, part.subtype, part.params = "message", "rfc822", []
        else:
            part.type, part.subtype, part.params = "text", "plain", [("charset", "us-ascii")]
        if part.type.lower() == "multipart":
            part.parts = []
            part.boundary = part.param("boundary")
        part.id = values.get("content-id")
        part.description = values.get("content-description")
        encoding = values.get("content-transfer-encoding")
        # Kept as written, None when defaulted: Dovecot writes a default as "7bit" and an
        # explicit encoding as the message spells it, and the two must stay apart for that.
        part.encoding = parse_encoding(encoding) if encoding is not None else None
        part.md5 = values.get("content-md5")
        disposition = values.get("content-disposition")
        part.disposition = parse_disposition(disposition) if disposition is not None else None
        language = values.get("content-language")
        part.language = parse_language(language) if language is not None else None
        part.location = values.get("content-location")
        if frame.msg is not None:
            frame.msg.envelope = _envelope(values, addresses)

    def _close_frame(self, frame: _Frame, at: int, eof: bool, floor: int = 0) -> int:
        """End ``frame`` at a delimiter line starting at ``at``, or at the end of the message.

        Before a delimiter, the entity ends before the line break preceding it (RFC 2046
        section 5.1.1), unless there is no line in the entity at all.  One line break can
        both end a header block and precede a delimiter (``--b LF LF --b``); the header keeps
        it, since a header's blank line is part of it.  When that header belongs to an
        encapsulated message, its ``message/rfc822`` part must still contain it: ``floor``
        is where the entity closed just before (inside) this one ended, and this one does not
        end before it.

        :return: where the entity ended
        """
        part = frame.part
        start = part.header_start if frame.in_header else part.body_start
        # Lines are the body's line feeds; an unterminated last line does not count, as in
        # Dovecot and UW-IMAP (RFC 3501 does not say how to count one).
        lines = 0
        if eof:
            end = at
            if not frame.in_header:
                lines = self._nl - frame.nl_body
        elif at > start:
            end = at - self._prev_eol
            if not frame.in_header:
                # The line feed before the delimiter belongs to the delimiter.
                lines = self._nl - 1 - frame.nl_body
        else:
            end = start
        if end < floor:  # only ever at == floor: the body is everything up to the delimiter
            end = floor
            lines = self._nl - frame.nl_body
        if frame.in_header:
            part.body_start = end
            self._apply_header(frame)
        part.body_end = end
        part.size = end - part.body_start
        type_ = part.type.lower()
        if type_ == "text" or (type_ == "message" and part.subtype.lower() == "rfc822"):
            part.lines = lines
        if frame.boundary is not None:
            frame.boundary = None
            self._nactive -= 1
            self._pattern = None
        msg = frame.msg
        if msg is not None:
            msg.size = end - part.header_start
            msg.header_size = part.body_start - part.header_start
            msg.lines = lines
        return end


def _blank_line(buf: bytearray, pos: int) -> int:
    """Where the first blank line (LF or CR LF alone) at or after the line start ``pos`` of
    ``buf`` starts, or -1 if none has ended in ``buf`` yet."""
    if buf.startswith(b"\n", pos) or buf.startswith(b"\r\n", pos):
        return pos
    # CRLF first, and a bare-LF blank line only before it: searching a CRLF message's whole
    # body for LF LF (every line ending a candidate) cost more than the lines it saves.
    crlf = buf.find(b"\n\r\n", pos)
    lf = buf.find(b"\n\n", pos, len(buf) if crlf < 0 else crlf + 2)
    if lf >= 0:
        return lf + 1
    return crlf + 1 if crlf >= 0 else -1


def _addresses(fields: dict[str, list[str]], name: str):
    """The addresses of every ``name`` field, in order (None when there is none)."""
    out = [address for value in fields.get(name, ()) for address in parse_address_list(value)]
    return out or None


def _envelope(values: dict[str, str], addresses: dict[str, list[str]]) -> Envelope:
    """Build ENVELOPE (RFC 3501 7.4.2) from a message's header fields.

    RFC 5322 3.6 allows each of these fields once.  When an address field is repeated (a
    message with ``Cc: a@x``, ``CC: b@x`` and ``cc: c@x``), the addresses of all of them are
    listed in order, so that no recipient is lost -- as Dovecot does for from, sender,
    reply-to, to, cc and bcc.  Date, subject, in-reply-to and message-id come from the first
    occurrence (Dovecot takes the last; the first is the one SENTBEFORE/SENTON/SENTSINCE read
    and Python's email package returns).

    The envelope is computed once, at append or delivery, and stored: messages stored before
    a change here keep the envelope they were stored with.
    """
    from_ = _addresses(addresses, "from")
    return Envelope(
        date=values.get("date"), subject=values.get("subject"), from_=from_,
        sender=_addresses(addresses, "sender") or from_,
        reply_to=_addresses(addresses, "reply-to") or from_,
        to=_addresses(addresses, "to"), cc=_addresses(addresses, "cc"),
        bcc=_addresses(addresses, "bcc"),
        in_reply_to=values.get("in-reply-to"), message_id=values.get("message-id"),
    )


def parse_bytes(data: bytes) -> MessageInfo:
    """Parse a whole message held in memory (convenience for tests and small messages)."""
    parser = StructureParser()
    parser.feed(data)
    return parser.close()
