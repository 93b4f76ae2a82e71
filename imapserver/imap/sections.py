"""``BODY[section]<partial>``: which octets of a stored message a section names, and streaming them.

Grammar (RFC 3501 section 9)::

    section         = "[" [section-spec] "]"
    section-spec    = section-msgtext / (section-part ["." section-text])
    section-msgtext = "HEADER" / "HEADER.FIELDS" [".NOT"] SP header-list / "TEXT"
    section-part    = nz-number *("." nz-number)
    section-text    = section-msgtext / "MIME"
    header-list     = "(" header-fld-name *(SP header-fld-name) ")"
    header-fld-name = astring
    partial         = "<" number "." nz-number ">"     ; in fetch-att, after the section

Semantics (RFC 3501 section 6.4.5), as this module applies them to the structure stored at
delivery (:mod:`mailstore.mime`):

* Parts are numbered from 1 inside each multipart; a part that is not a multipart has a single
  part, 1, which is its body -- so ``BODY[1]`` of a plain message is its body, and
  ``BODY[1.MIME]`` its (top-level) header.  ``n.m`` below a ``message/rfc822`` part ``n``
  numbers the parts of the encapsulated message.  A path that goes on below a part that is
  neither a multipart nor a message/rfc822 names nothing.
* ``HEADER``, ``HEADER.FIELDS[.NOT]`` and ``TEXT`` apply to the whole message, or after a part
  number to the message encapsulated in a ``message/rfc822`` part; ``MIME`` needs a part number.
* ``HEADER.FIELDS (a b)`` is the fields named (case-insensitively), in message order, repeats
  kept, then the blank line that ended the header -- "except in the case of a message which has
  no body and no blank line".  ``HEADER.FIELDS.NOT`` is every other field, likewise.
* A section naming a part that does not exist is the empty string, as Dovecot answers (RFC
  3501 leaves it open; an error would abort a whole multi-message FETCH).
* ``<origin.length>`` cuts the section's octets; an origin past the end gives the empty string.

Design: :func:`resolve` turns a section into a :class:`Plan` without any I/O -- a list of
literal byte strings and ranges of the raw message (and, for header subsets of encapsulated
messages, a range to read and filter).  :func:`iter_section` then yields the octets in chunks
from a seekable reader (``MailStore.open_message``), reading only the ranges needed, so a
``BODY[2]<0.1024>`` of a 50 MB message reads about one chunk.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from mailstore.mime import header_fields

NUL_REPLACEMENT = b"\x80"
"""IMAP literals may not hold NUL (RFC 3501 CHAR8); like Dovecot we send 0x80 instead."""

_MAX_NUMBER = 2**32 - 1  # RFC 3501 number / nz-number: unsigned 32-bit
_NZ_NUMBER = re.compile(r"[1-9][0-9]*\Z")
_ASTRING_ATOM = re.compile(r'[^\x00-\x20\x7f-\xff(){%*"\\\]]+')


@dataclass(frozen=True, slots=True)
class Section:
    """A parsed section-spec.

    ``part`` is the part number path (``()`` for the whole message), ``text`` one of ``""``,
    ``"HEADER"``, ``"HEADER.FIELDS"``, ``"HEADER.FIELDS.NOT"``, ``"TEXT"``, ``"MIME"``,
    ``fields`` the upper-cased field names of a header-list, and ``name`` the section as it is
    written back in the FETCH response: keywords and field names upper-cased, one space
    between names, a name quoted if the client quoted it (as Dovecot writes it).
    """

    part: tuple[int, ...]
    text: str
    fields: tuple[bytes, ...] = ()
    name: str = ""


def parse_section(spec: str) -> Section:
    """Parse the text between the brackets of ``BODY[...]``.

    :param spec: e.g. ``""``, ``"1.2.MIME"``, ``"HEADER.FIELDS (From TO)"``
    :raises ValueError: with the reason, when ``spec`` does not follow the grammar above
    """
    rest = spec
    numbers: list[int] = []
    while rest[:1].isdigit():
        m = re.match(r"([0-9]+)(\.|\Z)", rest)
        if m is None or not _NZ_NUMBER.match(m.group(1)) or int(m.group(1)) > _MAX_NUMBER:
            raise ValueError(f"invalid part number in section {spec!r}")
        numbers.append(int(m.group(1)))
        rest = rest[m.end():]
        if m.group(2) == "." and not rest:
            raise ValueError(f"section {spec!r} ends with a dot")
    part = tuple(numbers)
    prefix = ".".join(map(str, part))
    upper = rest.upper()
    if not rest:
        return Section(part, "", (), prefix)
    if upper in ("HEADER", "TEXT") or (upper == "MIME" and part):
        return Section(part, upper, (), f"{prefix}.{upper}" if part else upper)
    m = re.match(r"HEADER\.FIELDS(\.NOT)? +", upper)
    if m is None:
        raise ValueError(f"invalid section {spec!r}")
    fields, quoted = _header_list(rest[m.end():], spec)
    text = "HEADER.FIELDS.NOT" if m.group(1) else "HEADER.FIELDS"
    names = " ".join(_quote(f) if q else f.decode("ascii") for f, q in zip(fields, quoted,
                                                                            strict=True))
    name = f"{text} ({names})"
    return Section(part, text, fields, f"{prefix}.{name}" if part else name)


def _header_list(text: str, spec: str) -> tuple[tuple[bytes, ...], tuple[bool, ...]]:
    """Parse ``(name name ...)``: astrings (atoms or quoted strings), at least one."""
    if not text.startswith("(") or not text.endswith(")"):
        raise ValueError(f"invalid header list in section {spec!r}")
    if not text.isascii():
        raise ValueError("8-bit characters in a header field name")
    body = text[1:-1]
    names: list[bytes] = []
    quoted: list[bool] = []
    pos = 0
    while pos < len(body):
        if body[pos] == " ":
            pos += 1
            continue
        if body[pos] == '"':
            m = re.compile(r'"((?:[^"\\]|\\["\\])*)"(?= |\Z)').match(body, pos)
            if m is None:
                raise ValueError(f"invalid quoted field name in section {spec!r}")
            value = re.sub(r'\\(["\\])', r"\1", m.group(1))
            quoted.append(True)
        else:
            m = _ASTRING_ATOM.match(body, pos)
            if m is None or (m.end() < len(body) and body[m.end()] != " "):
                raise ValueError(f"invalid field name in section {spec!r}")
            value = m.group()
            quoted.append(False)
        names.append(value.upper().encode("ascii"))
        pos = m.end()
    if not names:
        raise ValueError(f"empty header list in section {spec!r}")
    return tuple(names), tuple(quoted)


def _quote(value: bytes) -> str:
    return '"' + value.decode("ascii").replace("\\", "\\\\").replace('"', '\\"') + '"'


# -- plans ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Range:
    """``length`` octets of the raw message from ``start``."""

    start: int
    length: int


@dataclass(frozen=True, slots=True)
class HeaderSubset:
    """The header block at ``start`` (``length`` octets, blank line included), filtered."""

    start: int
    length: int
    fields: tuple[bytes, ...]
    exclude: bool


Piece = bytes | Range | HeaderSubset


@dataclass(frozen=True, slots=True)
class Plan:
    """What a section's octets are made of, in order; see :func:`iter_section`."""

    pieces: tuple[Piece, ...]

    @property
    def needs_content(self) -> bool:
        """Whether the raw message has to be read (else pass ``reader=None``)."""
        return any(not isinstance(p, bytes) for p in self.pieces)

    @property
    def known_length(self) -> int | None:
        """The octet count before any partial, if it is known without reading."""
        total = 0
        for piece in self.pieces:
            if isinstance(piece, HeaderSubset):
                return None
            total += len(piece) if isinstance(piece, bytes) else piece.length
        return total


EMPTY = Plan(())


def header_subset(block: bytes, fields: tuple[bytes, ...], exclude: bool) -> bytes:
    """The fields of ``block`` named in ``fields`` (or, with ``exclude``, all the others).

    Names match case-insensitively (ASCII); fields keep their order, repeats, folding and line
    ends.  The blank line ending the block follows, if the block has one (RFC 3501 section
    6.4.5: a message with no body and no blank line gets none).  Lines that are not fields
    (no colon) only ever appear in a HEADER.FIELDS.NOT result.
    """
    wanted = set(fields)
    out = []
    end = 0
    for name, raw in header_fields(block):
        end += len(raw)
        if (name.encode("latin-1").upper() in wanted) != exclude and (name or exclude):
            out.append(raw)
    out.append(block[end:])  # the blank line, or nothing
    return b"".join(out)


def resolve(section: str | Section, body: dict | None, header: bytes | None, size: int,
            header_size: int) -> Plan:
    """Work out which octets ``BODY[section]`` is, without reading the message.

    :param section: the text inside the brackets, or a :class:`Section` already parsed
    :param body: the stored root body part (``MessageView.body``, the JSON of
                 :class:`~mailstore.mime.BodyPart`); only needed when ``section`` has a part
                 number
    :param header: the top-level header block as stored (``MessageView.header``), or
                   ``None``; when it is shorter than ``header_size`` (the store caps it) the
                   header is read from the message instead
    :param size: the message's octet count (``record.size``)
    :param header_size: its header block's octet count, blank line included
    :raises ValueError: for a malformed section (a BAD response)
    """
    spec = section if isinstance(section, Section) else parse_section(section)
    if not spec.part:
        return _message_plan(spec, 0, header_size, size, header)
    if body is None:
        raise ValueError("the body structure is needed to resolve a part number")
    part = find_part(body, spec.part)
    if part is None:
        return EMPTY
    if spec.text == "":
        return _range(part["body_start"], part["body_end"])
    if spec.text == "MIME":
        return _range(part["header_start"], part["body_start"])
    inner = part.get("message") if _is_rfc822(part) else None
    if inner is None:
        return EMPTY  # HEADER/TEXT of a part that is not an encapsulated message
    root = inner["body"]
    return _message_plan(spec, root["header_start"], root["body_start"], root["body_end"], None)


def _message_plan(spec: Section, start: int, body_start: int, end: int,
                  header: bytes | None) -> Plan:
    """HEADER / HEADER.FIELDS[.NOT] / TEXT / everything of the message at ``start``."""
    if spec.text == "":
        return _range(start, end)
    if spec.text == "TEXT":
        return _range(body_start, end)
    complete = header is not None and len(header) == body_start - start
    if spec.text == "HEADER":
        return Plan((header,)) if complete else _range(start, body_start)
    exclude = spec.text == "HEADER.FIELDS.NOT"
    if complete:
        return Plan((header_subset(header, spec.fields, exclude),))
    return Plan((HeaderSubset(start, body_start - start, spec.fields, exclude),))


def _range(start: int, end: int) -> Plan:
    return Plan((Range(start, end - start),)) if end > start else EMPTY


def _is_rfc822(part: dict[str, Any]) -> bool:
    return part["type"].lower() == "message" and part["subtype"].lower() == "rfc822"


def find_part(body: dict, path: tuple[int, ...]) -> dict | None:
    """The body part (JSON dict) that the part number ``path`` names, or ``None``.

    Inside a multipart, ``n`` is its n-th child.  Any other part only has part 1, itself, and
    a path may only go on below it when it is a ``message/rfc822`` part, in which case the
    rest of the path is resolved in the encapsulated message (whose own top-level part is
    again "part 1" when it is not a multipart).  This is RFC 3501's numbering, and it is how
    Dovecot's ``imap_msgpart_find`` walks it.
    """
    part = body
    for index, number in enumerate(path):
        more = index + 1 < len(path)
        children = part.get("parts")
        if children is not None:
            if number > len(children):
                return None
            part = children[number - 1]
        elif number != 1 or (more and not _is_rfc822(part)):
            return None
        if more and _is_rfc822(part):
            inner = part.get("message")
            if inner is None:
                return None  # stored opaque (encoded, or over a limit): nothing inside
            part = inner["body"]
    return part


# -- streaming -----------------------------------------------------------------------------------

def _read_exact(reader: BinaryIO, start: int, length: int) -> Iterator[bytes]:
    """``length`` octets of ``reader`` from ``start``, in the chunks the reader returns."""
    reader.seek(start)
    # A chunked store's reader hands out its stored chunks as they are (a FETCH streaming a big
    # body writes them to the socket without joining them first); other readers, bytes.
    read_pieces = getattr(reader, "read_pieces", None)
    left = length
    while left > 0:
        pieces = read_pieces(left) if read_pieces is not None else [reader.read(left)]
        if not pieces or not pieces[0]:
            # The literal's length is already on the wire: a short message cannot be papered
            # over, the connection has to be dropped.
            raise OSError(f"message content ends {left} octets before its metadata says")
        for data in pieces:
            left -= len(data)
            yield data


def iter_section(plan: Plan, reader: BinaryIO | None, partial: tuple[int, int] | None = None,
                 chunk: int = 65536, raw: bool = False) -> tuple[int, Iterator[bytes]]:
    """The octets of a resolved section: their count, and an iterator yielding them.

    Header subsets of encapsulated messages are read and filtered here, before returning, so
    that the count is exact (header blocks are bounded, so this reads little); everything
    else is read lazily while the iterator is consumed, at most ``chunk`` octets at a time.
    NUL octets are sent as 0x80 (:data:`NUL_REPLACEMENT`), which keeps the count.

    :param plan: from :func:`resolve`
    :param reader: a seekable binary reader of the raw message; may be ``None`` when
                   ``plan.needs_content`` is false
    :param partial: ``(origin, length)`` from ``<origin.length>``, or ``None`` for all of it
    :param chunk: the largest piece read (and yielded) at once
    :param raw: keep NUL octets as they are (CATENATE copies a section into a new message,
                where it is not an IMAP literal: RFC 4469 3 builds the message from the
                section's octets)
    :return: ``(octet_count, iterator)``; the iterator yields exactly ``octet_count`` octets
             (it raises :class:`OSError` if the message turns out shorter than its metadata)
    """
    pieces: list[bytes | Range] = []
    for piece in plan.pieces:
        if isinstance(piece, HeaderSubset):
            block = b"".join(_read_exact(reader, piece.start, piece.length))
            pieces.append(header_subset(block, piece.fields, piece.exclude))
        else:
            pieces.append(piece)
    total = sum(len(p) if isinstance(p, bytes) else p.length for p in pieces)
    start, stop = 0, total
    if partial is not None:
        start = min(partial[0], total)
        stop = min(total, start + partial[1])
    return stop - start, _generate(pieces, reader, start, stop, chunk,
                                   b"\x00" if raw else NUL_REPLACEMENT)


def _generate(pieces: list[bytes | Range], reader: BinaryIO | None, start: int, stop: int,
              chunk: int, nul: bytes = NUL_REPLACEMENT) -> Iterator[bytes]:
    pos = 0  # offset of the current piece within the section
    for piece in pieces:
        length = len(piece) if isinstance(piece, bytes) else piece.length
        lo, hi = max(start, pos) - pos, min(stop, pos + length) - pos
        pos += length
        if lo >= hi:
            continue
        if isinstance(piece, bytes):
            for k in range(lo, hi, chunk):
                yield piece[k:min(hi, k + chunk)].replace(b"\x00", nul)
            continue
        for k in range(lo, hi, chunk):
            n = min(hi, k + chunk) - k
            for data in _read_exact(reader, piece.start + k, n):
                yield data.replace(b"\x00", nul)
