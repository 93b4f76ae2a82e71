"""Header blocks: splitting them into fields and reading the MIME fields IMAP reports.

IMAP hands out header text in two ways.  ``BODY[HEADER.FIELDS (...)]`` wants the fields
byte for byte, in order, repeated ones included, which is what :func:`header_fields` gives.
ENVELOPE and BODYSTRUCTURE want a handful of *values*, raw but unfolded (RFC 3501 section
7.4.2 returns header text as it is, it does not decode it); the ``parse_*`` helpers here read
those values without the lossy normalising that :mod:`email` applies (it decodes encoded
words, lower-cases types and re-quotes parameters).

Everything here works on bounded input (a header block is capped by the structure parser) and
never raises on malformed text.
"""

from __future__ import annotations

import re

from .address import skip_comment

_FOLD = re.compile(rb"\r?\n(?=[ \t])")
_WSP = b" \t"


def header_fields(block: bytes) -> list[tuple[str, bytes]]:
    """Split a raw header block into its fields, in order, repeated fields kept.

    Each field is ``(name, raw)`` where ``raw`` is the whole field as it appears in the
    message -- name, colon, value, continuation lines and the final line ending -- so that
    ``b"".join(raw for _, raw in fields)`` is the block up to its blank line.  ``name`` is the
    field name as written (latin-1 ``str``, case kept, whitespace before the colon dropped);
    compare it case-insensitively.

    A line that is not a field (no colon, or a "name" with spaces in it, such as an mbox
    ``From`` line) and continuation lines with no field to continue become fields named ``""``:
    they are kept so that ``HEADER.FIELDS.NOT`` still returns them, and they match no name.
    Splitting stops at the first empty line, which ends the header (RFC 5322 section 2.1).
    Bare LF line endings are accepted.

    :param block: the raw header block, with or without its terminating blank line
    :return: list of ``(name, raw_field_bytes)``
    """
    fields: list[tuple[str, bytes]] = []
    n = len(block)
    pos = 0
    start = -1
    name = ""
    while pos < n:
        end = block.find(b"\n", pos)
        end = n if end < 0 else end + 1
        first = block[pos]
        if first in _WSP and start >= 0:
            pos = end  # continuation of the current field
            continue
        if block[pos:end] in (b"\n", b"\r\n"):
            break
        if start >= 0:
            fields.append((name, block[start:pos]))
        start = pos
        name = ""
        if first not in _WSP:
            colon = block.find(b":", pos, end)
            if colon > pos:
                candidate = block[pos:colon].rstrip(_WSP)
                if candidate and b" " not in candidate and b"\t" not in candidate:
                    name = candidate.decode("latin-1")
        pos = end
    if start >= 0:
        fields.append((name, block[start:pos]))
    return fields


def field_value(raw: bytes) -> str:
    """The value of a raw field: what follows the colon, unfolded and trimmed.

    Unfolding removes each line break that is followed by whitespace and nothing else
    (RFC 5322 section 2.2.3); the whitespace around the value is trimmed because no IMAP
    server returns it.  Anything else, encoded words and 8-bit octets included, is kept.
    """
    colon = raw.find(b":")
    value = raw[colon + 1:] if colon >= 0 else raw
    if b"\n " in value or b"\n\t" in value:  # most fields are one line: no regex for them
        value = _FOLD.sub(b"", value)
    return value.strip(b" \t\r\n").decode("latin-1")


_MIME_TOKEN = re.compile(
    r"""
      (?P<ws>[ \t\r\n]+)
    | (?P<q>"(?P<qbody>(?:[^"\\]|\\.)*)(?:"|\\?\Z))
    | (?P<c>\()
    | (?P<s>[;=/,])
    | (?P<a>[^ \t\r\n(";=/,][^ \t\r\n";=/,]*)
    | (?P<x>.)
    """,
    re.S | re.X,
)
_QUOTED_PAIR = re.compile(r"\\(.)", re.S)

# A comment is only recognised where a new token may start: a "(" inside a word is kept, as
# in the unquoted (and invalid, but common) ``name=report(1).pdf``.


def _mime_tokens(value: str) -> list[tuple[str, str, bool]]:
    """Tokens of a structured MIME value: ``(kind, text, space_before)``, comments dropped."""
    out: list[tuple[str, str, bool]] = []
    pos = 0
    n = len(value)
    sp = False
    while pos < n:
        m = _MIME_TOKEN.match(value, pos)
        kind = m.lastgroup
        if kind == "ws":
            sp = True
            pos = m.end()
        elif kind == "c":
            pos, _ = skip_comment(value, pos)
            sp = True
        else:
            text = m.group()
            if kind == "q":
                text = m.group("qbody")
                if "\\" in text:
                    text = _QUOTED_PAIR.sub(r"\1", text)
            elif kind == "x":
                kind = "a"
            out.append((kind, text, sp))
            sp = False
            pos = m.end()
    return out


def _join(toks: list[tuple[str, str, bool]]) -> str:
    out: list[str] = []
    for _kind, text, sp in toks:
        if out and sp:
            out.append(" ")
        out.append(text)
    return "".join(out)


def _split_params(value: str) -> tuple[list[tuple[str, str, bool]], list[tuple[str, str]]]:
    """Split ``head; a=b; c="d"`` into the head's tokens and the parameters.

    Parameter names are kept as written, as Dovecot returns them in BODYSTRUCTURE (RFC 2045
    section 5.1 makes them case-insensitive, so readers compare them that way); values keep
    their case, lose the quotes and have quoted pairs resolved.  A parameter without ``=`` or
    without a name is skipped.  RFC 2231 continuations (``name*0``, ``name*``) are left as
    separate, raw parameters.
    """
    toks = _mime_tokens(value)
    segments: list[list[tuple[str, str, bool]]] = [[]]
    for tok in toks:
        if tok[0] == "s" and tok[1] == ";":
            segments.append([])
        else:
            segments[-1].append(tok)
    params: list[tuple[str, str]] = []
    for seg in segments[1:]:
        eq = next((k for k, tok in enumerate(seg) if tok[0] == "s" and tok[1] == "="), -1)
        if eq <= 0:
            continue
        name = _join(seg[:eq])
        rest = seg[eq + 1:]
        if rest:
            rest[0] = (rest[0][0], rest[0][1], False)
        params.append((name, _join(rest)))
    return segments[0], params


def parse_content_type(value: str) -> tuple[str, str, list[tuple[str, str]]] | None:
    """Parse a Content-Type value into ``(type, subtype, params)``, case kept.

    :return: ``None`` when the value has no valid ``type/subtype``; RFC 2045 section 5.2 says
             to treat the part as if it had no Content-Type at all then.
    """
    head, params = _split_params(value)
    if len(head) != 3:
        return None
    (kind1, type_, _), (kind2, slash, _), (kind3, subtype, _) = head
    if kind1 != "a" or kind2 != "s" or slash != "/" or kind3 != "a":
        return None
    return type_, subtype, params


def parse_disposition(value: str) -> tuple[str, list[tuple[str, str]]] | None:
    """Parse a Content-Disposition value (RFC 2183) into ``(type, params)``, case kept."""
    head, params = _split_params(value)
    type_ = _join(head).strip()
    if not type_:
        return None
    return type_, params


def parse_language(value: str) -> list[str] | None:
    """Parse Content-Language (RFC 3282): comma-separated tags, comments dropped."""
    tags: list[str] = []
    current: list[tuple[str, str, bool]] = []
    for tok in _mime_tokens(value) + [("s", ",", False)]:
        if tok[0] == "s" and tok[1] == ",":
            tag = _join(current).strip()
            if tag:
                tags.append(tag)
            current = []
        else:
            current.append(tok)
    return tags or None


def parse_encoding(value: str) -> str | None:
    """The first word of Content-Transfer-Encoding, case kept; ``None`` if there is none."""
    for kind, text, _sp in _mime_tokens(value):
        if kind in ("a", "q") and text:
            return text
        return None
    return None
