"""Content-Transfer-Encoding decoding, streamed (RFC 2045 section 6).

IMAP's BINARY fetch items (RFC 3516) hand a client a part with its transfer encoding undone.
A part may be 50 MB of base64, so decoding works on chunks as they are read: a decoder takes
the encoded chunks and yields decoded ones, holding at most one incomplete base64 quantum or
one incomplete quoted-printable line between chunks.

The result is the same, octet for octet, as Python's whole-buffer decoders --
``base64.b64decode(data)`` (non-alphabet octets ignored, RFC 2045 6.8) and
``quopri.decodestring(data)`` (``binascii.a2b_qp``) -- whatever the chunking: base64 is cut
only after a complete 4-character quantum of alphabet characters, quoted-printable only after
a line feed, and both decoders work quantum by quantum and line by line.
"""

from __future__ import annotations

import binascii
import re
from collections.abc import Iterable, Iterator

IDENTITY = frozenset(("7bit", "8bit", "binary"))
"""Encodings whose decoding is the identity (RFC 2045 6.2): the octets pass through."""
DECODED = frozenset(("base64", "quoted-printable"))
"""Encodings this module decodes."""

_NOT_BASE64 = re.compile(rb"[^A-Za-z0-9+/=]+")


class UnknownEncoding(ValueError):
    """A Content-Transfer-Encoding that is neither an identity encoding nor one decoded here
    (``x-uuencode``, a misspelling, ...).  ``encoding`` is the value as written."""

    def __init__(self, encoding: str):
        super().__init__(f"unknown Content-Transfer-Encoding {encoding!r}")
        self.encoding = encoding


def normalise(encoding: str | None) -> str:
    """The encoding in lower case, ``7bit`` when absent (RFC 2045 6.1's default).

    :raises UnknownEncoding: for an encoding that is neither in :data:`IDENTITY` nor in
                             :data:`DECODED`
    """
    if encoding is None:
        return "7bit"
    value = encoding.strip().lower()
    if value not in IDENTITY and value not in DECODED:
        raise UnknownEncoding(encoding)
    return value


def decode_chunks(chunks: Iterable[bytes], encoding: str | None) -> Iterator[bytes]:
    """Decode ``chunks`` (the encoded body, in any pieces) and yield the decoded octets.

    Empty pieces are never yielded.  :raises UnknownEncoding: at once, before reading
    """
    kind = normalise(encoding)
    if kind == "base64":
        return _base64(chunks)
    if kind == "quoted-printable":
        return _quoted_printable(chunks)
    return (c for c in chunks if c)


def _base64(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Base64 as ``binascii.a2b_base64`` reads a whole buffer: octets outside the alphabet
    are skipped, and so is ``=`` -- except a ``=`` that completes a quantum's padding (two
    or three data characters so far), which ends the data: what follows is not decoded."""
    pending = b""  # data characters not yet decoded: fewer than 4 between chunks
    pads = 0  # the "=" seen since the last data character
    for chunk in chunks:
        text = _NOT_BASE64.sub(b"", chunk)
        if b"=" not in text:
            pending += text
            pads = 0 if text else pads
        else:
            for piece in re.split(rb"(=)", text):
                if piece == b"=":
                    quad = len(pending) % 4
                    pads += 1
                    if quad >= 2 and quad + pads >= 4:
                        out = binascii.a2b_base64(pending + b"=" * (4 - quad))
                        if out:
                            yield out
                        return
                elif piece:
                    pending += piece
                    pads = 0
        cut = len(pending) - len(pending) % 4
        if cut:
            out = binascii.a2b_base64(pending[:cut])
            pending = pending[cut:]
            if out:
                yield out
    if len(pending) >= 2:
        # Unpadded last quantum: b64decode refuses the part for it; a mail reader shows its
        # octets, and so do we (one lone character carries none).
        yield binascii.a2b_base64(pending + b"=" * (4 - len(pending)))


def _quoted_printable(chunks: Iterable[bytes]) -> Iterator[bytes]:
    pending = b""
    for chunk in chunks:
        pending += chunk
        cut = pending.rfind(b"\n") + 1
        if cut:
            out = binascii.a2b_qp(pending[:cut])
            pending = pending[cut:]
            if out:
                yield out
    if pending:
        out = binascii.a2b_qp(pending)
        if out:
            yield out


def measure(chunks: Iterable[bytes]) -> tuple[int, bool]:
    """``(octet count, whether a NUL is among them)`` of decoded chunks, holding none."""
    size = 0
    nul = False
    for chunk in chunks:
        size += len(chunk)
        nul = nul or b"\x00" in chunk
    return size, nul
