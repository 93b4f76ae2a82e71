"""Header text as people read it: 8-bit octets and RFC 2047 encoded words decoded.

Moved here from ``imapserver/imap/search_text.py`` so that the store can decode a Subject at
delivery (the base subject SORT and THREAD use, RFC 5256 2.1) without the protocol layer;
SEARCH imports the same functions from here, so both see one decoding.

* :func:`decode_bytes`: octets in a MIME charset; ``us-ascii``, ``utf-8``, a missing or unknown
  charset are read as UTF-8, switching to windows-1252 at the first octet that is not UTF-8;
  ``iso-8859-1`` is read as windows-1252, its superset.
* :func:`decode_header_text`: RFC 2047 encoded words decoded, the white space between two
  adjacent ones dropped (RFC 2047 6.2); a word that does not decode is left as written.
* :func:`decode_field`: a raw header field, unfolded and trimmed, both of the above applied.
"""

from __future__ import annotations

import binascii
import codecs
import re

from .headers import field_value

_ENCODED_WORD = re.compile(r"=\?([^?\s]+)\?([bBqQ])\?([^?\s]*)\?=")
_ALIASES = {"iso-8859-1": "cp1252", "iso8859-1": "cp1252", "latin1": "cp1252",
            "latin-1": "cp1252", "us-ascii": "", "ascii": "", "utf-8": "", "utf8": ""}
"""Charsets read another way: "" means UTF-8 falling back to windows-1252."""


def _codec_name(charset: str | None) -> str:
    """A Python text codec for a MIME charset name; "" for UTF-8-or-windows-1252."""
    if not charset:
        return ""
    name = charset.strip().lower()
    name = _ALIASES.get(name, name)
    if not name:
        return ""
    try:
        info = codecs.lookup(name)
    except (LookupError, ValueError):
        return ""
    # Refuse bytes-to-bytes codecs ("base64", "zlib", "hex"...): a charset parameter must not
    # make us decompress or un-hex anything.
    if not getattr(info, "_is_text_encoding", True):
        return ""
    return info.name


class _Utf8OrCp1252:
    """Incremental decoder: UTF-8 until the first octet that is not, windows-1252 after."""

    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._fallback = False

    def decode(self, data: bytes, final: bool = False) -> str:
        if self._fallback:
            return data.decode("cp1252", errors="replace")
        pending = self._utf8.getstate()[0]
        try:
            return self._utf8.decode(data, final)
        except UnicodeDecodeError as exc:
            self._fallback = True
            whole = pending + data
            return (whole[:exc.start].decode("utf-8", errors="replace")
                    + whole[exc.start:].decode("cp1252", errors="replace"))


def _text_decoder(charset: str | None):
    name = _codec_name(charset)
    if not name:
        return _Utf8OrCp1252()
    return codecs.getincrementaldecoder(name)(errors="replace")


def decode_bytes(data: bytes, charset: str | None = None) -> str:
    """``data`` in ``charset`` (see the module docstring for unknown and missing ones)."""
    try:
        return _text_decoder(charset).decode(data, True)
    except Exception:  # a codec that fails even with errors="replace"
        return _Utf8OrCp1252().decode(data, True)


def _decode_word(match: re.Match) -> str | None:
    charset, kind, text = match.group(1), match.group(2).upper(), match.group(3)
    charset = charset.split("*", 1)[0]  # RFC 2231 section 5: charset*language
    raw = text.encode("ascii", errors="replace")
    try:
        if kind == "B":
            data = binascii.a2b_base64(raw + b"=" * (-len(raw) % 4))
        else:
            data = binascii.a2b_qp(raw, header=True)
    except (binascii.Error, ValueError):
        return None
    return decode_bytes(data, charset)


def decode_header_text(value: str) -> str:
    """Decode the RFC 2047 encoded words in a header value (already text)."""
    if "=?" not in value:
        return value
    out: list[str] = []
    pos = 0
    after_word = False
    for match in _ENCODED_WORD.finditer(value):
        between = value[pos:match.start()]
        word = _decode_word(match)
        # RFC 2047 section 6.2: white space between adjacent encoded words is not displayed.
        if not (after_word and word is not None and not between.strip()):
            out.append(between)
        out.append(match.group() if word is None else word)
        after_word = word is not None
        pos = match.end()
    out.append(value[pos:])
    return "".join(out)


def decode_field(raw: bytes) -> str:
    """The decoded value of a raw header field (as :func:`mailstore.mime.header_fields` gives
    it): unfolded, trimmed, 8-bit octets and encoded words decoded."""
    return decode_header_text(decode_bytes(field_value(raw).encode("latin-1")))
