"""Indexed text search: which messages SEARCH's text keys need to look at (issue 14).

RFC 3501 6.4.4 defines BODY, TEXT, SUBJECT, FROM, TO, CC, BCC and HEADER as case-insensitive
substring matches; :mod:`mailstore.mime.searchtext` says on what text (decoded parts, RFC 2047
words, addresses as Dovecot writes them).  Scanning that text is the reference.  The index
only narrows it (docs/decisions/0026-text-index.md):

* At append, delivery, import, copy and move, :func:`message_docs` extracts the very text the
  scan would read, case-folded the same way, into seven documents (``subject``, ``from``,
  ``to``, ``cc``, ``bcc``: the top-level fields' decoded values, and for address fields their
  addresses as the scan writes them; ``head``: every header block as TEXT reads it;
  ``body``: every decoded text part), and the backend's :class:`~.backends.base.TextIndex`
  stores them (SQLite FTS5 trigram, or trigram posting rows on HBase).
* At SEARCH, :meth:`TextSearch.candidates` gives, for each text key, the UIDs that may match:
  the index's matches among the indexed messages, plus every message the index cannot speak
  for (not marked as indexed: stored before the index existed, indexing failed or crashed,
  too big).  The evaluator then runs the real test on those only, so the answer is the
  scan's answer, by construction: a message whose text contains the needle has all of the
  needle's trigrams in its document.  A needle under three code points gets no narrowing.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .backends.base import TEXT_DOCS, TEXT_SEPARATOR, TextIndex
from .errors import MailStoreError
from .mime import header_fields
from .mime.searchtext import (
    MAX_PART_HEADER,
    PartDecoder,
    address_text,
    decode_field,
    header_text,
    pieces,
    segments,
)

log = logging.getLogger(__name__)

LAZY_BATCH = 500
"""Most messages one SEARCH indexes first with ``text_index = lazy`` (~0.5 ms each)."""

MAX_INDEXED_TEXT = 1024 * 1024
"""Most code points of decoded text indexed per message; a message with more is marked not
indexable, and SEARCH scans it (as it scans every message without the index).  Bounds the
indexer's memory: the text is held two or three times over while it is folded and written,
and FTS5 builds the trigrams of a document in memory -- at 8 MiB a 24 MB text message grew
the server by 40 MiB while the background indexer took it."""

MODES = ("background", "yes", "lazy", "no")
"""``[store] text_index``'s values (see :class:`TextSearch`)."""

ADDRESS_FIELDS = ("from", "to", "cc", "bcc")
_OWN_DOC = frozenset(("subject", *ADDRESS_FIELDS))


def docs_for_header(field: str, addresses: bool) -> tuple[tuple[str, ...], bool]:
    """The documents that hold every value of header field ``field`` (lower case), and
    whether they hold exactly what the scan matches (``addresses``: FROM/TO/CC/BCC, which
    match the addresses written out too) -- else a match must be verified."""
    if field == "subject":
        return ("subject",), True
    if field in ADDRESS_FIELDS:
        return (field,), addresses
    return ("head",), False


def docs_for_content(text: bool) -> tuple[tuple[str, ...], bool]:
    """BODY looks in the body document, TEXT in it and in every header block: exactly."""
    return (("body", "head") if text else ("body",)), True


@dataclass
class Candidates:
    """The index's answer for one text key over a session's UIDs: ``matches`` (marked UIDs
    the index found), ``unindexed`` (UIDs it cannot speak for: the scan decides), and whether
    a match needs no verifying (``exact``)."""

    matches: set[int]
    unindexed: set[int]
    exact: bool

    def possible(self) -> set[int]:
        return self.matches | self.unindexed

    def verdict(self, uid: int) -> bool | None:
        """True or False when the index decides, None when the scan must."""
        if uid in self.unindexed:
            return None
        if uid in self.matches:
            return True if self.exact else None
        return False


def _join(texts: list[str]) -> str:
    """One document from several texts a needle must not straddle (see TEXT_SEPARATOR)."""
    return TEXT_SEPARATOR.join(texts).replace("\x00", TEXT_SEPARATOR)


class _TooMuch(Exception):
    pass


def message_docs(header: bytes | None, body: dict | None, header_size: int, size: int,
                 open_reader: Callable[[], object]) -> dict[str, str] | None:
    """The seven case-folded documents of one message, or None if its text is larger than
    :data:`MAX_INDEXED_TEXT`.

    ``header`` is its stored header block, ``body`` its stored body structure, ``open_reader``
    opens a seekable reader of its octets (called only if a part must be read).  Mirrors
    ``search_eval._scan_content`` and ``_Message.values``/``addresses``: what is indexed is a
    superset of what the scan matches, block by block."""
    header = header or b""
    fields: dict[str, list[str]] = {name: [] for name in _OWN_DOC}
    for name, raw in header_fields(header):
        key = name.lower() if name else ""
        if key in fields:
            fields[key].append(decode_field(raw).casefold())
            if key in ADDRESS_FIELDS:
                fields[key].append(address_text(raw).casefold())
    docs = {name: _join(values) for name, values in fields.items()}
    heads: list[str] = []
    bodies: list[str] = []
    total = 0
    reader = None
    try:
        for is_header, start, end, encoding, charset in segments(body, header_size, size):
            if start >= end:
                continue
            if is_header:
                if start == 0:  # the stored header block, as the scan reads it
                    block = header
                else:
                    reader = reader or open_reader()
                    block = b"".join(pieces(reader, start, min(end, start + MAX_PART_HEADER)))
                text = header_text(block).casefold()
                heads.append(text)
            else:
                reader = reader or open_reader()
                decoder = PartDecoder(encoding, charset)
                out: list[str] = []
                held = 0
                for data in pieces(reader, start, end):
                    out.append(decoder.feed(data).casefold())
                    held += len(out[-1])
                    if total + held > MAX_INDEXED_TEXT:  # checked as it comes, not at the end
                        raise _TooMuch
                out.append(decoder.feed(b"", final=True).casefold())
                text = "".join(out)
                bodies.append(text)
            total += len(text)
            if total > MAX_INDEXED_TEXT:
                raise _TooMuch
    except _TooMuch:
        return None
    finally:
        if reader is not None:
            reader.close()
    docs["head"] = _join(heads)
    docs["body"] = _join(bodies)
    return docs


class TextSearch:
    """The mail store's side of the text index: keeping it and asking it.

    ``index`` is the backend's :class:`TextIndex`.  ``mode`` is ``[store] text_index``:
    ``background`` (the server's default) queues each message as it is stored, and a
    :class:`~.indexer.BackgroundIndexer` indexes the queue in batches (``queue``: the
    :class:`~.indexer.TextQueue`); ``yes`` indexes each message as it is stored, before the
    append is acknowledged; ``lazy`` indexes nothing then, and each
    SEARCH that meets messages not indexed first indexes up to :data:`LAZY_BATCH` of them in
    one transaction (``grouped``: the backend's), as Dovecot's fts does without autoindex --
    appends cost nothing, a mailbox never searched is never indexed; ``no`` stops both the
    writes and the lookups (SEARCH then scans, as before the index)."""

    def __init__(self, index: TextIndex | None, messages, mode: str = "yes",
                 grouped: Callable | None = None, queue=None):
        if mode not in MODES:
            raise ValueError(f"text_index must be one of {', '.join(MODES)}, not {mode!r}")
        self.index = index
        self.messages = messages
        self.enabled = mode != "no" and index is not None
        self.at_append = self.enabled and mode == "yes"
        self.lazy = self.enabled and mode == "lazy"
        self.queue = queue if self.enabled and mode == "background" else None
        self.grouped = grouped

    # -- keeping it ---------------------------------------------------------------------------

    def docs_of_stored(self, stored) -> dict[str, str] | None:
        """The documents of content just ingested (:class:`~.messages.StoredContent`),
        computed once however many recipients it is delivered to."""
        cached = getattr(stored, "_text_docs", False)
        if cached is not False:
            return cached
        body = stored.info.get("body")
        if stored.whole is not None:    # held whole: no read back (a round trip over HBase)
            def open_reader():
                return io.BytesIO(stored.whole)
        else:
            def open_reader():
                return self.messages.content.open(stored.content_id, stored.size,
                                                  stored.chunk_size)
        docs = message_docs(stored.header, body, stored.info.get("header_size", 0),
                            stored.size, open_reader)
        stored._text_docs = docs
        return docs

    def docs_of_view(self, view) -> dict[str, str] | None:
        """The documents of a stored message; ``view`` read with HEADER and BODY columns."""
        return message_docs(view.header, view.body, view.record.header_size, view.record.size,
                            lambda: self.messages.open_body(view))

    def add(self, mailbox_id: bytes, uid: int, docs_of: Callable[[], dict | None]) -> bool:
        """Index one message; return whether it is now marked.  Never raises: the message is
        stored whatever happens here, and an unmarked message is scanned (fsck reports it,
        ``mailadmin index rebuild`` or ``fsck --repair`` indexes it)."""
        if not self.enabled:
            return False
        try:
            self.index.put(mailbox_id, uid, docs_of())
            return True
        except Exception as exc:  # noqa: BLE001 - derived data: the append must not fail
            log.warning("text index: message %d not indexed: %s", uid, exc)
            return False

    def forget(self, mailbox_id: bytes, uids: Iterable[int]) -> None:
        """Drop expunged or moved-away messages (lingering entries would be harmless)."""
        uids = list(uids)
        if not self.enabled or not uids:
            return
        try:
            self.index.remove(mailbox_id, uids)
        except Exception as exc:  # noqa: BLE001
            log.warning("text index: expunged messages not removed: %s", exc)

    def queue_copies(self, mailbox_id: bytes, uids: list[int]) -> None:
        """``background``: queue messages a copy or move stored (never raises: an unqueued
        message is scanned, and fsck --repair indexes it)."""
        if self.queue is None or not uids:
            return
        try:
            self.queue.add(mailbox_id, uids)
        except Exception as exc:  # noqa: BLE001 - derived data
            log.warning("text index: copied messages not queued: %s", exc)

    def _dequeue(self, mailbox_id: bytes, uids: list[int]) -> None:
        """``background``: forget the queue cells of messages indexed otherwise than by the
        indexer (never raises: a cell left is indexed again by the indexer, harmlessly)."""
        if self.queue is None or not uids:
            return
        try:
            self.queue.done(mailbox_id, uids)
        except Exception as exc:  # noqa: BLE001 - derived data
            log.warning("text index: indexed messages left queued: %s", exc)

    def drop(self, mailbox_id: bytes) -> None:
        if self.index is None:
            return
        try:
            self.index.drop(mailbox_id)
            if self.queue is not None:
                self.queue.drop(mailbox_id)
        except Exception as exc:  # noqa: BLE001 - fsck removes what stays of a gone mailbox
            log.warning("text index: mailbox not dropped: %s", exc)

    # -- asking it ------------------------------------------------------------------------------

    def candidates(self, mailbox_id: bytes,
                   queries: Mapping[object, tuple[tuple[str, ...], str, bool]],
                   uids: list[int]) -> dict[object, Candidates]:
        """For each query ``key -> (docs, needle, exact)`` (``needle`` case-folded; ``exact``:
        the documents hold exactly what the key matches), the index's :class:`Candidates`
        over ``uids``.  Keys it cannot narrow (a needle under three code points or holding
        NUL or the separator, the index disabled or failing) are left out: the caller scans
        for them."""
        wanted = {key: q for key, q in queries.items()
                  if len(q[1]) >= 3 and "\x00" not in q[1] and TEXT_SEPARATOR not in q[1]}
        if not self.enabled or not wanted or not uids:
            return {}
        try:
            unindexed = self.index.unindexed(mailbox_id, uids)
            if unindexed and self.lazy:
                unindexed = self._catch_up(mailbox_id, unindexed)
            out: dict[object, Candidates] = {}
            for key, (docs, needle, exact) in wanted.items():
                found: set[int] = set()
                for doc in docs:
                    if doc not in TEXT_DOCS:
                        raise ValueError(f"no such text document: {doc!r}")
                    found |= self.index.match(mailbox_id, doc, needle)
                out[key] = Candidates(found, unindexed, exact and self.index.exact)
            return out
        except (MailStoreError, ValueError) as exc:
            log.warning("text index: not used for this search: %s", exc)
            return {}

    def _catch_up(self, mailbox_id: bytes, unindexed: set[int]) -> set[int]:
        """``lazy``: index the newest :data:`LAZY_BATCH` of ``unindexed`` now, in one
        transaction; return those still not indexed (scanned by this SEARCH)."""
        batch = sorted(unindexed)[-LAZY_BATCH:]
        try:
            with self.grouped() if self.grouped else contextlib.nullcontext():
                self.index_messages(mailbox_id, batch, batch=len(batch))
        except MailStoreError as exc:
            log.warning("text index: lazy indexing failed: %s", exc)
            return unindexed
        return unindexed - (set(batch) - self.index.unindexed(mailbox_id, batch))

    # -- repair and rebuild --------------------------------------------------------------------

    def check(self, mailbox_id: bytes, uids: list[int]) -> tuple[list[int], list[int]]:
        """``(missing, stale)``: the UIDs of ``uids`` (the mailbox's messages) that have no
        marker, and the marked UIDs that are not messages of the mailbox any more."""
        markers = self.index.markers(mailbox_id)
        present = set(uids)
        return ([uid for uid in uids if uid not in markers],
                sorted(uid for uid in markers if uid not in present))

    def index_messages(self, mailbox_id: bytes, uids: list[int], sync=None,
                       progress: Callable[[int], None] | None = None,
                       batch: int = 200) -> int:
        """Index the messages ``uids`` (read back from the store, ``batch`` at a time); return
        how many got a marker.  ``sync`` (the backend's) runs after each batch, so what a
        long rebuild did survives its interruption; ``progress`` gets the count done.

        ``background``: the queue cells of the messages marked are deleted after each batch
        (after ``sync``: a cell outlives its entry, never the reverse), so the indexer does
        not index them again -- which over HBase would add their posting cells again."""
        from .messages import BODY, HEADER, SUMMARY
        done = 0
        for start in range(0, len(uids), batch):
            views = self.messages.get(mailbox_id, uids[start:start + batch],
                                      [*SUMMARY, HEADER, BODY])
            marked = [view.uid for view in views
                      if self.add(mailbox_id, view.uid, lambda v=view: self.docs_of_view(v))]
            done += len(marked)
            if sync is not None:
                sync()
            self._dequeue(mailbox_id, marked)
            if progress is not None:
                progress(min(start + batch, len(uids)))
        return done
