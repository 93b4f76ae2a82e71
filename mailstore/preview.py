"""Message previews (RFC 8970), computed once when a message is stored.

RFC 8970 section 3 leaves the algorithm to the server: at most 256 characters of plain text,
UTF-8, no line breaks, an empty string for a message with nothing to preview.  Ours follows
Dovecot 2.3's ``message-snippet`` (the differential tests compare the two):

* the first ``text/plain`` or ``text/html`` leaf part, depth first (attachments included, as
  Dovecot does; an attached ``message/rfc822`` is not looked into); other messages (an image
  alone, say) have the empty preview;
* its Content-Transfer-Encoding undone, its charset applied (a missing or unknown one reads as
  UTF-8, falling back to windows-1252 at the first octet that is not UTF-8);
* plain text: lines that begin with ``>`` (quoted replies) are left out; HTML: comments,
  ``<style>`` and ``<script>`` contents and every tag are dropped (a ``<title>``'s text stays),
  entities decoded;
* NUL octets are dropped; each run of ASCII spaces and control characters (line breaks and
  tabs included) becomes one space, none at either end;
* at most :data:`MAX_CHARS` characters (Dovecot's 200, below RFC 8970's 256).

Only the first :data:`READ_LIMIT` octets of the part are read, so a large message costs one
chunk here.  Stored in the message row beside the envelope (``m:pv``, see
:mod:`mailstore.messages`); messages stored before previews were kept get theirs computed on
their first FETCH PREVIEW and stored then (:meth:`MailStore.preview`).
"""

from __future__ import annotations

import binascii
import codecs
import html
import re
from typing import Any

MAX_CHARS = 200
READ_LIMIT = 32 * 1024
"""Octets of the chosen part read at most: 200 characters of text are always in there, and
HTML with a long <head> rarely needs more."""

_SPACE = re.compile(r"[ \x00-\x1f\x7f]+")  # ASCII only: a no-break space stays, as in Dovecot
_HIDDEN = re.compile(r"<!--.*?(-->|\Z)|<(style|script)\b.*?(</\2\s*>|\Z)", re.S | re.I)
_TAG = re.compile(r"<[^>]*>?")
_BASE64_JUNK = re.compile(rb"[^A-Za-z0-9+/]")


def preview_part(body: dict[str, Any] | None) -> dict[str, Any] | None:
    """The part a preview is made of (a stored body-structure dict), or None."""
    stack = [body] if body else []
    while stack:
        part = stack.pop()
        children = part.get("parts")
        if children is not None:
            stack += reversed(children)
            continue
        if part.get("type", "").lower() == "text" and \
                part.get("subtype", "").lower() in ("plain", "html"):
            return part
    return None


def make_preview(body: dict[str, Any] | None, read) -> str:
    """The preview of a message.

    :param body: the message's stored body structure (``MessageView.body``)
    :param read: a function of ``(start, end)`` giving the message's octets in that range
    """
    part = preview_part(body)
    if part is None:
        return ""
    start = part.get("body_start", 0)
    end = min(part.get("body_end", 0), start + READ_LIMIT)
    if end <= start:
        return ""
    charset = next((v for k, v in part.get("params", ()) if k.lower() == "charset"), None)
    text = _decode(_undo_transfer(read(start, end), part.get("encoding")), charset)
    if part.get("subtype", "").lower() == "html":
        text = html.unescape(_TAG.sub(" ", _HIDDEN.sub(" ", text)))
    else:
        text = "\n".join(line for line in text.splitlines()
                         if not line.startswith(">"))
    return normalise(text)


def normalise(text: str) -> str:
    """White space collapsed, at most :data:`MAX_CHARS` characters, no space at the ends."""
    return _SPACE.sub(" ", text.replace("\x00", "")).strip(" ")[:MAX_CHARS].rstrip(" ")


def _undo_transfer(data: bytes, encoding: str | None) -> bytes:
    name = (encoding or "").strip().lower()
    if name == "base64":
        clean = _BASE64_JUNK.sub(b"", data)  # padding too: it is put back below
        rest = len(clean) % 4
        # A last group cut off by READ_LIMIT (or missing its padding) decodes as far as it can.
        clean = clean[:-1] if rest == 1 else clean + b"=" * ((4 - rest) % 4)
        try:
            return binascii.a2b_base64(clean)
        except binascii.Error:
            return b""
    if name == "quoted-printable":
        return binascii.a2b_qp(data)
    return data


def _decode(data: bytes, charset: str | None) -> str:
    name = (charset or "").strip().lower()
    if name in ("iso-8859-1", "latin1", "latin-1"):
        name = "cp1252"  # its superset, as browsers read it
    if name and name not in ("us-ascii", "ascii", "utf-8", "utf8"):
        try:
            if getattr(codecs.lookup(name), "_is_text_encoding", True):
                return data.decode(name, "replace")
        except (LookupError, ValueError):
            pass
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # Cut at a character boundary by READ_LIMIT: keep what decodes.
        if exc.start >= len(data) - 3 and exc.reason.startswith("unexpected end"):
            return data[:exc.start].decode("utf-8")
        return data.decode("cp1252", "replace")


def encode_cell(text: str) -> bytes:
    """The ``m:pv`` cell: a version byte, then UTF-8 (never empty: HBase cannot tell an empty
    cell from a missing one, and an empty preview is a real answer)."""
    return b"1" + text.encode("utf-8")


def decode_cell(raw: bytes | None) -> str | None:
    """The preview in an ``m:pv`` cell, None for a missing (or unknown) one."""
    if not raw or raw[:1] != b"1":
        return None
    return raw[1:].decode("utf-8", "replace")


__all__ = ["MAX_CHARS", "decode_cell", "encode_cell", "make_preview", "normalise",
           "preview_part"]
