"""``BINARY[section-binary]<partial>``, ``BINARY.PEEK[...]`` and ``BINARY.SIZE[...]`` (RFC 3516).

Grammar (RFC 3516 section 8, RFC 4466 section 2.3 for literal8 in APPEND)::

    fetch-att      =/ "BINARY" [".PEEK"] section-binary [partial] /
                      "BINARY.SIZE" section-binary
    section-binary = "[" [section-part] "]"
    msg-att-static =/ "BINARY" section-binary SP (nstring / literal8) /
                      "BINARY.SIZE" section-binary SP number
    literal8       = "~{" number "}" CRLF *OCTET
    resp-text-code =/ "UNKNOWN-CTE"

Semantics (RFC 3516 section 4.2), applied to the structure stored at delivery:

* ``BINARY[n]`` of a leaf part is its body with the Content-Transfer-Encoding undone
  (:mod:`mailstore.mime.decode`): base64 and quoted-printable decoded, 7bit/8bit/binary
  passed through.  Any other encoding fails the command with ``NO [UNKNOWN-CTE]`` (RFC 3516
  4.2); the other messages and items are still answered, as Dovecot does.
* ``BINARY[]`` of a whole message, and ``BINARY[n]`` of a multipart or message/rfc822 part,
  are not a single body: RFC 3516's grammar allows them but its text only describes a part's
  decoding.  We answer as Dovecot 2.3 does: the entity's octets with every encoded leaf
  decoded and its Content-Transfer-Encoding field rewritten to ``binary``, so the result is
  still a MIME entity that says what it holds (RFC 2045 6.2).
* ``<origin.length>`` cuts the *decoded* octets (RFC 3516 4.2).  ``BINARY`` sets \\Seen as
  ``BODY[]`` does, ``BINARY.PEEK`` does not (RFC 3516 4.2, RFC 3501 6.4.5).
* A literal8 (``~{n}``) is used when the octets sent contain NUL, which a literal cannot
  carry (RFC 3516 4.2: the server MUST then use literal8); otherwise a plain literal.

Sizes: a decoded size is not stored at delivery; it is found by decoding (streamed, nothing
held) and remembered in a small per-process cache keyed by the message's content id, which
never changes for a stored message.  Storing decoded sizes in the structure at append time
would save the first decode, but messages already stored have none and would need a
migration; clients ask BINARY.SIZE right before BINARY of the same part, so the cache serves
the second ask.  A section of at most ``STREAM_ABOVE`` octets is decoded once into memory; a
larger one is decoded twice (once to count, once while it is written) and never held.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

from mailstore.mime import header_fields
from mailstore.mime.decode import IDENTITY, decode_chunks, normalise

from .render import BODY, CONTENT, FetchItem
from .sections import Section, find_part

STREAM_ABOVE = 1024 * 1024
"""As fetch.STREAM_ABOVE: decoded sections up to this size are built in memory."""
CHUNK = 65536
CACHE_ENTRIES = 4096

_ITEM = re.compile(r"(BINARY(?:\.PEEK|\.SIZE)?)\[([0-9.]*)\](.*)\Z", re.S | re.I)
_PART = re.compile(r"[1-9][0-9]*(\.[1-9][0-9]*)*\Z")
_PARTIAL = re.compile(r"<([0-9]+)\.([0-9]+)>\Z")
_NEEDS = frozenset({BODY, CONTENT})


class UnknownCte(Exception):
    """A part's Content-Transfer-Encoding cannot be undone (``NO [UNKNOWN-CTE]``)."""


def parse_binary_item(text: str) -> FetchItem | None:
    """``BINARY[...]``, ``BINARY.PEEK[...]`` or ``BINARY.SIZE[...]`` parsed; ``None`` when
    ``text`` is none of them.

    ``kind`` is ``BINARY`` or ``BINARY.SIZE``; ``section`` holds the part path only.
    :raises ValueError: for a section other than a part number (``BINARY[1.MIME]``,
                        ``BINARY[HEADER]``: not in section-binary) or a partial on
                        BINARY.SIZE (RFC 3516 grammar: a BAD response)
    """
    upper = text.upper()
    if not upper.startswith("BINARY"):
        return None
    m = _ITEM.match(text)
    if m is None:
        raise ValueError(f"unknown FETCH item {str(text)!r}")
    name, spec, rest = m.group(1).upper(), m.group(2), m.group(3)
    if spec and (not _PART.match(spec) or any(int(n) > 2**32 - 1 for n in spec.split("."))):
        raise ValueError(f"invalid binary section {spec!r} (a part number, RFC 3516)")
    part = tuple(int(n) for n in spec.split(".")) if spec else ()
    section = Section(part, "", (), spec)
    if name == "BINARY.SIZE":
        if rest:
            raise ValueError("BINARY.SIZE takes no partial (RFC 3516 section 8)")
        return FetchItem("BINARY.SIZE", f"BINARY.SIZE[{spec}]", False, _NEEDS, section)
    label = f"BINARY[{spec}]"
    partial = None
    if rest:
        p = _PARTIAL.match(rest)
        if p is None:
            raise ValueError(f"malformed partial {rest!r} (want <origin.length>)")
        origin, length = int(p.group(1)), int(p.group(2))
        if origin > 2**32 - 1 or length > 2**32 - 1:
            raise ValueError(f"partial range out of bounds in {str(text)!r}")
        partial = (origin, length)
        label += f"<{origin}>"
    return FetchItem("BINARY", label, name == "BINARY", _NEEDS, section, partial)


# -- what a section is made of -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Raw:
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Header:
    """A leaf's header block, its Content-Transfer-Encoding field(s) rewritten to binary."""

    start: int
    end: int


@dataclass(frozen=True, slots=True)
class _Decoded:
    start: int
    end: int
    encoding: str


def plan(body: dict, path: tuple[int, ...], size: int) -> list:
    """The pieces of ``BINARY[path]`` in order (no I/O).

    :raises UnknownCte: when a part to decode has an encoding we cannot undo
    """
    if not path:
        entity, lo, hi = body, 0, size
    else:
        entity = find_part(body, path)
        if entity is None:
            return []  # no such part: the empty string, as BODY[] answers (and Dovecot)
        if _is_leaf(entity):
            return [_Decoded(entity["body_start"], entity["body_end"], _encoding(entity))]
        lo, hi = entity["body_start"], entity["body_end"]
        entity = entity["message"]["body"] if entity.get("parts") is None else entity
    leaves: list[dict] = []
    _encoded_leaves(entity, leaves)
    pieces: list = []
    pos = lo
    for leaf in leaves:
        if leaf["header_start"] < pos or leaf["body_end"] > hi:
            continue  # not inside the region (cannot happen for stored offsets)
        pieces.append(_Raw(pos, leaf["header_start"]))
        pieces.append(_Header(leaf["header_start"], leaf["body_start"]))
        pieces.append(_Decoded(leaf["body_start"], leaf["body_end"], _encoding(leaf)))
        pos = leaf["body_end"]
    pieces.append(_Raw(pos, hi))
    return [p for p in pieces if p.end > p.start]


def _is_leaf(part: dict) -> bool:
    return part.get("parts") is None and part.get("message") is None


def _encoding(part: dict) -> str:
    try:
        return normalise(part.get("encoding"))
    except ValueError:
        raise UnknownCte(part.get("encoding")) from None


def _encoded_leaves(entity: dict, out: list[dict]) -> None:
    """The leaves under ``entity`` whose encoding is not an identity, in message order."""
    if entity.get("parts") is not None:
        for child in entity["parts"]:
            _encoded_leaves(child, out)
    elif entity.get("message") is not None:
        _encoded_leaves(entity["message"]["body"], out)
    elif _encoding(entity) not in IDENTITY:
        out.append(entity)


def _rewrite_header(block: bytes) -> bytes:
    out = []
    end = 0
    for name, raw in header_fields(block):
        end += len(raw)
        if name.lower() == "content-transfer-encoding":
            eol = b"\r\n" if raw.endswith(b"\r\n") else b"\n"
            raw = b"Content-Transfer-Encoding: binary" + eol
        out.append(raw)
    out.append(block[end:])
    return b"".join(out)


def _read(reader: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    """The raw octets ``[start, end)``, a chunk at a time, seeking before each (another item
    of the same response may have moved the reader in between)."""
    for k in range(start, end, CHUNK):
        n = min(end, k + CHUNK) - k
        reader.seek(k)
        while n > 0:
            data = reader.read(n)
            if not data:
                raise OSError("message content ends before its metadata says")
            n -= len(data)
            yield data


def octets(pieces: list, reader: BinaryIO) -> Iterator[bytes]:
    """All the octets of a planned section, decoded, in chunks."""
    for piece in pieces:
        if isinstance(piece, _Raw):
            yield from _read(reader, piece.start, piece.end)
        elif isinstance(piece, _Header):
            yield _rewrite_header(b"".join(_read(reader, piece.start, piece.end)))
        else:
            yield from decode_chunks(_read(reader, piece.start, piece.end), piece.encoding)


def _window(chunks: Iterator[bytes], start: int, stop: int | None) -> Iterator[bytes]:
    pos = 0
    for chunk in chunks:
        lo, hi = pos, pos + len(chunk)
        pos = hi
        if stop is not None and lo >= stop:
            return
        if hi <= start:
            continue
        piece = chunk[max(0, start - lo):len(chunk) if stop is None else min(len(chunk),
                                                                              stop - lo)]
        if piece:
            yield piece


# -- the per-process cache of decoded sizes ----------------------------------------------------

_cache: OrderedDict = OrderedDict()
_cache_lock = threading.Lock()


def _cached(key):
    with _cache_lock:
        value = _cache.get(key)
        if value is not None:
            _cache.move_to_end(key)
        return value


def _remember(key, value) -> None:
    with _cache_lock:
        _cache[key] = value
        _cache.move_to_end(key)
        while len(_cache) > CACHE_ENTRIES:
            _cache.popitem(last=False)


def _measure(chunks: Iterator[bytes]) -> tuple[int, bool]:
    size, nul = 0, False
    for chunk in chunks:
        size += len(chunk)
        nul = nul or b"\x00" in chunk
    return size, nul


# -- answering -----------------------------------------------------------------------------------

def binary_size(view, item: FetchItem, open_reader) -> bytes:
    """``BINARY.SIZE[...] n`` for one message (RFC 3516 4.2).

    :param open_reader: called without arguments for the message's seekable reader
    :raises UnknownCte: see :func:`plan`
    """
    path = item.section.part
    key = (view.record.content, path, 0, None)
    known = _cached(key)
    if known is None:
        pieces = plan(view.body, path, view.record.size)
        known = _measure(octets(pieces, open_reader())) if pieces else (0, False)
        _remember(key, known)
    return b"%s %d" % (item.name.encode(), known[0])


def binary_literal(view, item: FetchItem, open_reader) -> tuple[bytes, int, Iterator[bytes]]:
    """``BINARY[...]``: the literal's head (``BINARY[1] ~{n}\\r\\n`` or ``{n}``), its octet
    count and an iterator of its octets, as :func:`fetch._literal` takes them.

    Up to ``STREAM_ABOVE`` octets are decoded here, into memory; a larger section is
    counted here (or found in the cache) and decoded again while it is streamed.
    :raises UnknownCte: see :func:`plan`
    """
    path = item.section.part
    pieces = plan(view.body, path, view.record.size)
    start, stop = (0, None) if item.partial is None else \
        (item.partial[0], item.partial[0] + item.partial[1])
    if not pieces:
        return _head(item, 0, False), 0, iter(())
    reader = open_reader()
    first = _window(octets(pieces, reader), start, stop)
    held: list[bytes] = []
    count = 0
    for chunk in first:
        held.append(chunk)
        count += len(chunk)
        if count > STREAM_ABOVE:
            break
    else:
        data = b"".join(held)
        return _head(item, len(data), b"\x00" in data), len(data), iter((data,) if data else ())
    key = (view.record.content, path, start, stop)
    known = _cached(key)
    if known is None:
        size, nul = _measure(first)
        known = (count + size, nul or any(b"\x00" in c for c in held))
        _remember(key, known)
    del held
    total, nul = known
    return _head(item, total, nul), total, _window(octets(pieces, reader), start, stop)


def _head(item: FetchItem, count: int, nul: bool) -> bytes:
    return item.name.encode() + (b" ~{%d}\r\n" if nul else b" {%d}\r\n") % count
