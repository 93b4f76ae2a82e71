"""CATENATE (RFC 4469): an APPEND whose message is built from literals and URLs of messages
already on the server.

    append-data  =/ "CATENATE" SP "(" cat-part *(SP cat-part) ")"    ; RFC 4469 5
    cat-part      = text-literal / url
    text-literal  = "TEXT" SP literal
    url           = "URL" SP astring
    resp-text-code =/ "TOOBIG" / "BADURL" SP url-resp-text

The URLs are checked before anything is written (:mod:`imapserver.imap.urlparts`): a URL that
does not resolve -- malformed, another user's mail without URLAUTH, wrong UIDVALIDITY, an
expunged UID, a section the message does not have -- fails the whole APPEND (MULTIAPPEND
included, RFC 3502) with ``NO [BADURL url]`` (RFC 4469 3).  The new message's size is then
known, so a message over APPENDLIMIT or the store's limit is ``NO [TOOBIG]`` and one over
quota ``NO [OVERQUOTA]`` before a chunk is written.  The parts are read in order, a chunk at a
time, through one file-like :class:`CatenatedSource` that the store's ordinary ingest reads:
TEXT literals from memory or the receiver's spool file, URL parts from the content table.  A
50 MB message forwarded by URL never sits in memory.  A URL part's octets are copied as stored
(NULs included): it is not an IMAP literal.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

from .context import Bad, No
from .imapurl import ImapUrl, UrlError, parse_url, resp_text
from .urlparts import BadUrl, UrlPart, open_url
from .wire import Atom, Literal

_CHUNK = 64 * 1024


@dataclass
class Catenate:
    """A parsed CATENATE list: ``("TEXT", bytes or file)`` and ``("URL", text, ImapUrl or
    None when it did not parse)`` in order."""

    parts: list = field(default_factory=list)

    def close(self) -> None:
        """Close the spool files of TEXT literals (the receiver's temporary files)."""
        for part in self.parts:
            if part[0] == "TEXT" and hasattr(part[1], "close"):
                part[1].close()


def parse_catenate(items, selected: tuple[str, int] | None) -> Catenate:
    """The cat-part list of ``CATENATE (...)``; BAD for anything RFC 4469 5's grammar does
    not allow.  ``selected`` is the (name, UIDVALIDITY) relative ``;UID=`` URLs refer to.
    A URL that does not parse is kept and answered with BADURL when the command runs, as a
    URL that names nothing is (RFC 4469 3)."""
    if not isinstance(items, list) or not items:
        raise Bad("CATENATE takes a list of TEXT and URL parts")
    out = Catenate()
    it = iter(items)
    for kind in it:
        value = next(it, None)
        name = kind.upper() if isinstance(kind, Atom) else ""
        if name == "TEXT":
            if not (isinstance(value, Literal) or hasattr(value, "read")):
                raise Bad("CATENATE TEXT takes a literal")
            out.parts.append(("TEXT", value))
        elif name == "URL":
            if isinstance(value, Atom):
                text = str(value)
            elif isinstance(value, bytes):
                text = value.decode("utf-8", "replace")
            else:
                raise Bad("CATENATE URL takes a string")
            try:
                url = parse_url(text, selected=selected[0] if selected else None)
                if url.mailbox is not None and selected and url.uidvalidity is None \
                        and text.startswith(";"):
                    url = _with_uidvalidity(url, selected[1])
            except UrlError:
                url = None
            out.parts.append(("URL", text, url))
        else:
            raise Bad("CATENATE parts are TEXT or URL")
    return out


def _with_uidvalidity(url: ImapUrl, validity: int) -> ImapUrl:
    """A ``;UID=`` URL is relative to the selected mailbox's URL, UIDVALIDITY included."""
    return replace(url, uidvalidity=validity)


def _text_size(value) -> int:
    if isinstance(value, bytes):
        return len(value)
    return os.fstat(value.fileno()).st_size


def check_parts(store, cat: Catenate, user: str, submit_users: list[str],
                now: float) -> list[tuple[str, object, int]]:
    """Every part checked, in order: ``(kind, source, octets)``; NO [BADURL url] for the
    first URL that does not resolve (RFC 4469 3)."""
    checked = []
    for part in cat.parts:
        if part[0] == "TEXT":
            checked.append(("TEXT", part[1], _text_size(part[1])))
            continue
        _kind, text, url = part
        try:
            if url is None:
                raise BadUrl("malformed URL")
            found = open_url(store, url, user, submit_users, now, plain_allowed=True)
        except BadUrl:
            raise No("Bad URL in CATENATE", f"BADURL {resp_text(text)}") from None
        checked.append(("URL", found, found.length))
    return checked


def _chunks(checked: list[tuple[str, object, int]]) -> Iterator[bytes]:
    for kind, source, _size in checked:
        if kind == "URL":
            part: UrlPart = source
            yield from part.chunks(raw=True, chunk=_CHUNK)
        elif isinstance(source, bytes):
            for k in range(0, len(source), _CHUNK):
                yield source[k:k + _CHUNK]
        else:
            source.seek(0)
            while True:
                data = source.read(_CHUNK)
                if not data:
                    break
                yield data


class CatenatedSource(io.RawIOBase):
    """The parts of a CATENATE as one readable stream, read lazily in order."""

    def __init__(self, checked: list[tuple[str, object, int]]):
        super().__init__()
        self.size = sum(size for _k, _s, size in checked)
        self._chunks = _chunks(checked)
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            nxt = next(self._chunks, None)
            if nxt is None:
                return 0
            self._pending = nxt
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def close(self) -> None:
        self._chunks.close()  # closes a URL part's content reader left half read
        super().close()


def build_message(store, cat: Catenate, user: str, submit_users: list[str], now: float,
                  limit: int, check_quota: bool = True):
    """The message a CATENATE describes, ready for ``MailStore.append``: bytes when it fits
    in one content chunk, else a :class:`CatenatedSource` (the caller closes it).  NO
    [BADURL] / [TOOBIG] / [OVERQUOTA] before anything is read or written.  ``check_quota``
    False leaves the quota to the store call (REPLACE credits the message it replaces)."""
    checked = check_parts(store, cat, user, submit_users, now)
    size = sum(s for _k, _s, s in checked)
    if size > limit:
        raise No(f"Message larger than {limit} octets", "TOOBIG")
    if check_quota:
        store.check_quota(user, size, 1)
    source = CatenatedSource(checked)
    if size <= store.content.chunk_size:
        try:
            return source.read()
        finally:
            source.close()
    return source
