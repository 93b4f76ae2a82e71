"""Text as SEARCH sees it (RFC 3501 6.4.4): decoded header values, decoded body parts,
streamed substring search.  Shared by the SEARCH scan and the text index.

RFC 3501 6.4.4 asks for case-insensitive substring matching and leaves decoding to the server.
We decode as Dovecot does, so that a user searching for what they see finds it:

* Header values (:func:`decode_field`): unfolded, 8-bit octets read as UTF-8 (RFC 6532) or,
  failing that, as windows-1252, and RFC 2047 encoded words (``=?charset?B|Q?...?=``) decoded,
  the white space between two adjacent encoded words dropped.  An encoded word in an unknown
  charset is decoded as UTF-8-or-windows-1252; one that does not decode is left as written.
* Body parts (:class:`PartDecoder`): the Content-Transfer-Encoding undone (base64,
  quoted-printable; anything else taken as it is), then the charset parameter applied with
  Python's codecs (undecodable octets become U+FFFD).  ``us-ascii``, ``utf-8``, a missing or
  unknown charset read as UTF-8, switching to windows-1252 at the first octet that is not
  UTF-8 (mail labelled us-ascii is often neither).  ``iso-8859-1`` is read as windows-1252,
  its superset, as browsers do.  Both work incrementally, chunk by chunk.
* Matching (:class:`StreamMatcher`): :meth:`str.casefold` on both sides (so ``STRASSE`` finds
  ``Straße``); no Unicode normalisation and no white space folding.  A needle may straddle
  pieces: each piece is searched together with the end of the previous one.
"""

from __future__ import annotations

import binascii
import re

from .address import parse_address_list
from .encoded import (  # noqa: F401 (re-exported for tests and older imports)
    _codec_name,
    _text_decoder,
    _Utf8OrCp1252,
    decode_bytes,
    decode_field,
    decode_header_text,
)
from .headers import field_value, header_fields

_BASE64_JUNK = re.compile(rb"[^A-Za-z0-9+/]")


_ATEXT = re.compile(r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+")


def address_text(raw: bytes) -> str:
    """The addresses of a raw address field, written out again as Dovecot's SEARCH sees them
    (``"Name" <local@domain>, group: <a@b>;``): comments, folding and the spacing as written
    gone, display names decoded (RFC 2047) and quoted unless one atom, 8-bit text decoded as
    in :func:`decode_field`."""
    out: list[str] = []
    in_group = False
    for name, adl, mailbox, host in parse_address_list(field_value(raw)):
        if host is None:  # a group's start (mailbox is its name) or end (RFC 3501 7.4.2)
            if mailbox is None:
                out.append(";")
                in_group = False
            else:
                out.append(("" if not out else ", ") + _decode_latin1(mailbox) + ":")
                in_group = True
            continue
        addr = _decode_latin1(mailbox or "") + ("@" + _decode_latin1(host) if host else "")
        if adl:
            addr = _decode_latin1(adl) + ":" + addr
        text = "<" + addr + ">"
        if name:
            display = _decode_latin1(name)
            if not _ATEXT.fullmatch(display):
                display = '"' + display.replace("\\", "\\\\").replace('"', '\\"') + '"'
            text = display + " " + text
        if out and not out[-1].endswith(":"):
            text = ", " + text
        elif out:
            text = " " + text
        out.append(text)
    if in_group:
        out.append(";")
    return "".join(out)


def _decode_latin1(value: str) -> str:
    """A parsed address part (raw octets as latin-1) decoded as header text."""
    return decode_header_text(decode_bytes(value.encode("latin-1")))


class _Base64:
    """Incremental base64 decoding that skips line breaks and junk between quanta."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, data: bytes, final: bool = False) -> bytes:
        end = data.find(b"=")
        if end >= 0:  # padding: what follows is not part of this encoding
            data, final = data[:end], True
        data = self._rest + _BASE64_JUNK.sub(b"", data)
        cut = len(data) if final else len(data) - len(data) % 4
        self._rest = b"" if final else data[cut:]
        chunk = data[:cut]
        if final and len(chunk) % 4 == 1:
            chunk = chunk[:-1]  # a lone sextet carries no octet
        if not chunk:
            return b""
        try:
            return binascii.a2b_base64(chunk + b"=" * (-len(chunk) % 4))
        except binascii.Error:
            return b""


class _QuotedPrintable:
    """Incremental quoted-printable decoding: an escape split between pieces waits."""

    def __init__(self) -> None:
        self._rest = b""

    def feed(self, data: bytes, final: bool = False) -> bytes:
        data = self._rest + data
        cut = len(data)
        if not final:
            # "=XY" and the soft break "=\r\n" are three octets: an "=" among the last two
            # may be the start of one, so it waits for the next piece.
            tail = data[-2:].rfind(b"=")
            if tail >= 0:
                cut = len(data) - len(data[-2:]) + tail
        self._rest = data[cut:]
        return binascii.a2b_qp(data[:cut])


class _Identity:
    def feed(self, data: bytes, final: bool = False) -> bytes:
        return data


class PartDecoder:
    """Turns the octets of one body part, fed in pieces, into text.

    ``encoding`` is the part's Content-Transfer-Encoding, ``charset`` its charset parameter
    (either may be None).
    """

    def __init__(self, encoding: str | None, charset: str | None):
        kind = (encoding or "").strip().lower()
        if kind == "base64":
            self._transfer = _Base64()
        elif kind == "quoted-printable":
            self._transfer = _QuotedPrintable()
        else:
            self._transfer = _Identity()
        self._text = _text_decoder(charset)

    def feed(self, data: bytes, final: bool = False) -> str:
        try:
            return self._text.decode(self._transfer.feed(data, final), final)
        except Exception:  # a codec failing despite errors="replace": search it as octets
            self._text = _Utf8OrCp1252()
            return self._text.decode(data, final)


class StreamMatcher:
    """Looks for several case-folded needles in text that arrives in pieces (RFC 3501 6.4.4:
    a case-insensitive substring test).

    Call :meth:`feed` with each piece (any case) of one run of text, :meth:`reset` between
    runs that must not match across (body parts).  :attr:`found` holds the needles seen in
    the text fed so far.  Linear in the text fed, whatever the needles' lengths and however
    the text is cut: ``searched`` counts the code points searched, at most the text fed
    plus, per search, the longest needle's length -- and a search is made only once at least
    that much new text has come (or :attr:`found` is read), so at most twice the text.
    """

    def __init__(self, needles):
        self.needles = set(needles)
        self.searched = 0
        self._found: set[str] = set()
        self._keep = max((len(n) for n in self.needles), default=1) - 1
        self._carry = ""
        self._pending: list[str] = []
        self._pending_size = 0

    @property
    def found(self) -> set[str]:
        self._search()
        return self._found

    @property
    def done(self) -> bool:
        """Whether every needle was seen.  May lag :meth:`feed` by less than the longest
        needle's length of text (not searched yet); :attr:`found` never lags."""
        return self._found >= self.needles

    def reset(self) -> None:
        self._search()
        self._carry = ""

    def feed(self, text: str) -> None:
        text = text.casefold()
        self._pending.append(text)
        self._pending_size += len(text)
        # Searching each piece with the end of the previous text (the carry, up to the
        # longest needle less one) re-read the carry per piece: a 5,000-character needle fed
        # a character at a time cost 5,000 times the text.  Waiting for as much new text as
        # the carry bounds each search by twice the new text.
        if self._pending_size > self._keep:
            self._search()

    def _search(self) -> None:
        if not self._pending:
            return
        window = self._carry + "".join(self._pending)
        self._pending.clear()
        self._pending_size = 0
        self.searched += len(window)
        for needle in self.needles - self._found:
            # CPython's substring search is linear in the window (two-way for long needles).
            if len(needle) <= len(window) and needle in window:
                self._found.add(needle)
        self._carry = window[-self._keep:] if self._keep else ""


MAX_PART_HEADER = 256 * 1024
"""Most octets of a part's header block that TEXT searches (the MIME parser keeps as many)."""


def segments(body: dict | None, header_size: int, size: int):
    """``(is_header, start, end, encoding, charset)`` for every block TEXT/BODY search, in
    message order: header blocks, and the bodies of text and message leaf parts.  ``body``
    is the stored body structure (:mod:`mailstore.mime.structure`), None if none was kept."""
    if body is None:  # no structure kept: the header, then the rest as one text part
        yield True, 0, header_size, None, None
        yield False, header_size, size, None, None
        return
    stack = [body]
    while stack:
        part = stack.pop()
        yield True, part.get("header_start", 0), part.get("body_start", 0), None, None
        kind = part.get("type", "text").lower()
        children = part.get("parts")
        message = part.get("message")
        if children:
            stack += reversed(children)
        elif message and message.get("body"):
            stack.append(message["body"])
        elif kind in ("text", "message") or children is not None:
            # (a multipart without parts -- no boundary found -- is searched as text)
            charset = next((v for k, v in part.get("params", ()) if k.lower() == "charset"),
                           None)
            yield (False, part.get("body_start", 0), part.get("body_end", 0),
                   part.get("encoding"), charset)


def pieces(reader, start: int, end: int):
    """The octets ``[start, end)`` of a message reader, one content chunk at a time (never
    more in memory)."""
    chunk = getattr(reader, "chunk_size", 0) or 65536
    reader.seek(start)
    pos = start
    while pos < end:
        data = reader.read(min(end, (pos // chunk + 1) * chunk) - pos)
        if not data:
            return
        pos += len(data)
        yield data


def header_text(block: bytes) -> str:
    """A header block as TEXT searches it: ``name: decoded value`` lines."""
    return "\n".join(f"{name}: {decode_field(raw)}" if name else decode_bytes(raw)
                     for name, raw in header_fields(block))


__all__ = ["MAX_PART_HEADER", "PartDecoder", "header_text", "pieces", "segments",
           "StreamMatcher", "address_text", "decode_bytes", "decode_field",
           "decode_header_text"]
