"""Messages in a mailbox: storing, publishing in UID order, reading, flags.

The life of an append (see docs/decisions/0001-visibility-and-uids.md):

1. The content is streamed into ``JAMES_CONTENT`` (chunks, then its info) and parsed on the way
   for ENVELOPE and BODYSTRUCTURE.
2. A UID and a MODSEQ come from atomic increments on the mailbox row, in the same call that
   counts the message in the mailbox's counters (before it is committed, so that a crash
   leaves them too high, never too low; see docs/decisions/0004).
3. The message row's big cells (envelope, body structure, raw header, flags) are put, then its
   commit record ``m:s`` by check-and-put on its absence (one call:
   ``put_then_check_and_put``).  Only now can the message be seen -- but only once the
   mailbox's *watermark* reaches its UID.
4. The watermark ``c:visible`` is advanced past the UID.

Over HBase's Thrift2 API (``Backend.counts_at_allocation``, docs/decisions/0029) steps 2 and 3
are one call each: the counts go with the UID and MODSEQ in one increment, and the row's
counted marker with its cells and commit record in one atomic check-and-mutate.

The watermark is what keeps RFC 3501 2.3.1.1's promise when appends commit out of order: a
reader shows only UIDs at or below it, and it only moves past a UID once that UID is committed
or abandoned.  A writer that died between steps 2 and 3 would hold it back forever, so a UID
that stays unwritten for ``abandon_after`` seconds is marked abandoned (``X``) by check-and-put
on the same cell the writer would commit: exactly one of the two wins.
"""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import orjson

from . import keys, sortkeys
from .backends.base import Backend, Mutation, decode_counter, encode_counter
from .content import ContentStore
from .errors import BackendUnavailable, Conflict, TooLarge, Unpublished
from .mailboxes import (
    COUNT,
    MODSEQ,
    SIZE,
    UID,
    UNSEEN,
    VISIBLE,
    Mailbox,
    Mailboxes,
    step_column,
)
from .mime import StructureParser, parse_bytes
from .preview import READ_LIMIT as PREVIEW_READ
from .preview import decode_cell, encode_cell, make_preview
from .records import (
    ABANDONED,
    COMMITTED,
    VISIBLE_STATES,
    Flags,
    MessageRecord,
    state_of,
)
from .schema import MAILBOXES, MESSAGES

log = logging.getLogger(__name__)

STATE = b"m:s"
ENVELOPE = b"m:env"
BODY = b"m:bs"
HEADER = b"m:hdr"
SORTKEYS = b"m:sk"
"""SORT and THREAD keys (mailstore/sortkeys.py), computed at append; rows older than this cell
have them computed from ``m:env`` and ``m:hdr`` when read (mailstore/sortcache.py)."""
FLAGS = b"f:v"
PREVIEW = b"m:pv"
"""The message's preview (RFC 8970, :mod:`mailstore.preview`); absent in rows stored before
previews were kept."""
COUNTED = b"m:cnt"
"""What an append counted in its mailbox row for this UID, as a counter cell: 0 or absent for
nothing, else ``2 * size + unseen + 1``.  Incremented in the same call as the mailbox counters
(:meth:`Backend.increment_rows`), so whoever gives the UID up knows exactly what to take back;
the take-back is claimed by check-and-put of this cell to 0, so it happens once (decision 0004)."""
PENDING_CELLS = (ENVELOPE, BODY, HEADER, FLAGS, PREVIEW, SORTKEYS, COUNTED)

SYSTEM_FLAGS = {f.lower(): f for f in ("\\Seen", "\\Answered", "\\Flagged", "\\Deleted",
                                        "\\Draft")}
HEADER_CAP = 1024 * 1024
"""Largest top-level header block kept as a cell; a longer one is read from the content."""

# Envelopes and body structures are JSON; orjson writes the two of an append in 0.5 us where
# the standard library took 6, and reads them (every FETCH ENVELOPE or BODYSTRUCTURE) 4 times
# faster.  Its output is plain UTF-8 JSON, so cells written by either read the same.
_to_json = orjson.dumps

# Column selections for reads.
SUMMARY = [STATE, FLAGS]
LISTING = [STATE, FLAGS, ENVELOPE, HEADER]
EVERYTHING = None


def flag_target(mode: str, wanted: frozenset[str], current: frozenset[str],
                changeable=None) -> frozenset[str]:
    """The flags a message has after STORE ``mode`` (add / remove / replace) of ``wanted``.

    ``changeable``: if given, a predicate saying which flags the caller may change (RFC 4314
    4: \\Seen needs ``s``, \\Deleted ``t``, the others ``w``); the rest keep their current
    state, silently, as Dovecot's acl plugin does."""
    if mode == "add":
        target = current | wanted
    elif mode == "remove":
        target = current - wanted
    elif mode == "replace":
        target = wanted
    else:
        raise ValueError(f"bad flag mode {mode}")
    if changeable is None:
        return target
    return frozenset({f for f in target if changeable(f)}
                     | {f for f in current if not changeable(f)})


def canonical_flags(flags: Iterable[str]) -> frozenset[str]:
    """System flags in their canonical case; keywords as given.  ``\\Recent`` is never stored."""
    out = set()
    for flag in flags:
        if flag.startswith("\\"):
            canonical = SYSTEM_FLAGS.get(flag.lower())
            if canonical is None:
                if flag.lower() == "\\recent":
                    continue
                raise ValueError(f"unknown system flag {flag}")
            out.add(canonical)
        elif flag:
            out.add(flag)
    return frozenset(out)


@dataclass
class StoredContent:
    """Content written to the store and parsed, ready to be referenced by message rows."""

    content_id: bytes
    size: int
    chunk_size: int
    info: dict
    header: bytes
    preview: str | None = None
    whole: bytes | None = None
    """The octets themselves when the message was held whole (at most a chunk), so that
    what is derived from it at append (the text index) need not read them back: over HBase
    that read is a round trip of every append."""


@dataclass
class MessageView:
    """One visible message as read from its row; the optional parts only if selected."""

    uid: int
    record: MessageRecord
    flags: Flags
    state_raw: bytes
    envelope: dict | None = None
    body: dict | None = None
    header: bytes | None = None
    preview: str | None = None
    """RFC 8970 preview; None when not selected or not stored (an older row)."""

    @property
    def modseq(self) -> int:
        return max(self.record.modseq, self.flags.modseq)


def known_size(source) -> int | None:
    """The octets of a message given in memory (bytes, bytearray, memoryview); None for a
    file, whose size is known once it has been read."""
    if isinstance(source, memoryview):
        return source.nbytes  # len() counts items, which may be wider than a byte
    if isinstance(source, (bytes, bytearray)):
        return len(source)
    return None


def _header_end(data: bytearray) -> int | None:
    """Offset just past the blank line that ends a header block, if it is in ``data``."""
    if data.startswith(b"\r\n"):
        return 2
    if data.startswith(b"\n"):
        return 1
    crlf = data.find(b"\n\r\n")
    # A bare-LF blank line matters only if it comes first, so it is looked for only up to the
    # CRLF one: a CRLF message has none, and searching all of it cost a tenth of an append's
    # parsing.
    lf = data.find(b"\n\n", 0, len(data) if crlf < 0 else crlf + 2)
    if lf >= 0:
        return lf + 2
    return crlf + 3 if crlf >= 0 else None


def _safe_preview(info: dict, read) -> str | None:
    """The preview of a message being stored, or None if making it failed: a preview is
    never worth losing the message over (its first FETCH PREVIEW tries again)."""
    try:
        return make_preview(info.get("body"), read)
    except Exception:
        return None


def _safe_structure(head: bytes) -> dict | None:
    """The body structure of a message's first octets (a preview needs no more)."""
    try:
        return parse_bytes(head).to_json().get("body")
    except Exception:
        return None


def _range_reader(reader):
    """``read(start, end)`` over a seekable reader of a message's octets."""
    def read(start: int, end: int) -> bytes:
        reader.seek(start)
        return reader.read(end - start)
    return read


def view_from_row(key: bytes, row: dict[bytes, bytes]) -> MessageView | None:
    """A MessageView, or None when the row is not visible (pending, abandoned, deleting)."""
    raw = row.get(STATE)
    if state_of(raw) not in VISIBLE_STATES:
        return None
    record = MessageRecord.decode(raw)
    return MessageView(
        uid=keys.message_key_uid(key), record=record, flags=Flags.decode(row.get(FLAGS)),
        state_raw=raw,
        envelope=orjson.loads(row[ENVELOPE]) if ENVELOPE in row else None,
        body=orjson.loads(row[BODY]) if BODY in row else None,
        header=row.get(HEADER), preview=decode_cell(row.get(PREVIEW)))


class Messages:
    def __init__(self, backend: Backend, mailboxes: Mailboxes, content: ContentStore,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep, abandon_after: float = 10.0):
        self.table = backend.table(MESSAGES.name)
        self.backend = backend
        self.boxes = mailboxes
        self.content = content
        self.clock = clock
        self.sleep = sleep
        self.abandon_after = abandon_after
        # UIDs a reader found allocated but unwritten: (mailbox, uid) -> first seen (settle).
        self._stalled: dict[tuple[bytes, int], float] = {}
        # Count take-backs (see _uncount) the backend refused before they reached it, replayed
        # by the next add: like ContentStore's reference drops, only those known unsent.
        self._uncounted: list[tuple[bytes, int, int, int]] = []
        self._uncounted_lock = threading.Lock()
        # Set by the mail store: more increments for the counting call of each new message
        # (mailbox id, UID) -> [(table, row, deltas)] -- the background text indexer's queue
        # cell rides in it, durable before the message is, at no extra round trip.
        self.count_also: Callable[[bytes, int], list] | None = None
        # Appends whose commit call failed and whose outcome the store could not tell
        # (Unpublished): (mailbox, row key, commit record, counts taken with the UID or
        # None).  Settled by retry_owed once the store answers: if the commit was not made,
        # the UID is given up, the counts its writer took at allocation (Thrift2: no marker
        # records them, so no one else takes them back) taken back, and the content
        # reference the append held given back, once (issue 16).
        self._unsettled: list[tuple[bytes, bytes, bytes, tuple[int, bool] | None]] = []
        # Take-backs of claimed counts not confirmed by the store: (mailbox, size, unseen,
        # marker), see _take_back_once.
        self._owed_counts: list[tuple[bytes, int, int, bytes]] = []
        self._owed_strips: list[bytes] = []

    # -- content --------------------------------------------------------------------------------

    def ingest(self, source: bytes | io.RawIOBase | io.BufferedIOBase, refs: int = 1,
               max_size: int | None = None) -> StoredContent:
        """Stream a message into the content table, parsing it on the way.

        ``source`` is bytes or a readable binary file.  Raises TooLarge (having removed what was
        written) as soon as more than ``max_size`` bytes have been read.
        """
        size = known_size(source)
        if size is not None:
            if size <= self.content.chunk_size:
                return self._ingest_whole(bytes(source), refs, max_size)
            source = io.BytesIO(source)
        ingestion = self.ingestion(refs, max_size)
        try:
            while True:
                piece = source.read(ingestion.chunk_size)
                if not piece:
                    break
                ingestion.feed(piece)
            return ingestion.finish()
        except BaseException:
            ingestion.abort()
            raise

    def ingestion(self, refs: int = 1, max_size: int | None = None) -> Ingestion:
        """:meth:`ingest` a piece at a time, for a source that is not a file: a literal
        being received (imapserver/imap/literal_stream.py).  Nothing refers to the content
        until the caller's message row does; ``abort`` removes it."""
        return Ingestion(self, self.content.writer(refs), max_size)

    def _stored_preview(self, content_id: bytes, size: int, chunk_size: int,
                        info: dict) -> str | None:
        """The preview of content just written, or None if that failed (the content is
        committed and referenced: nothing here may raise and leak it)."""
        try:
            reader = self.content.open(content_id, size, chunk_size)
            try:
                return _safe_preview(info, _range_reader(reader))
            finally:
                reader.close()
        except Exception:
            return None

    def _ingest_whole(self, data: bytes, refs: int, max_size: int | None) -> StoredContent:
        """:meth:`ingest` of a message held whole that fits in one chunk (most mail): the
        same result without the streaming machinery (a file wrapper, reads, a header buffer)."""
        if max_size is not None and len(data) > max_size:
            raise TooLarge(f"message larger than {max_size} bytes")
        parser = StructureParser()
        parser.feed(data)
        info = parser.close()
        content_id = self.content.store(data, refs)
        head = data[:HEADER_CAP]
        end = _header_end(head)
        if end is not None:
            head = head[:end]
        json_info = info.to_json()
        preview = _safe_preview(json_info, lambda start, stop: data[start:stop])
        return StoredContent(content_id, len(data), self.content.chunk_size, json_info,
                             head[:info.header_size], preview, data)

    def preview(self, mailbox_id: bytes, view: MessageView) -> str:
        """The preview of ``view`` (RFC 8970): as stored, or, for a row stored before previews
        were kept, computed from its content now and stored for next time.  The store is by
        check-and-put on the commit record as read, so a row expunged or moved meanwhile is
        never brought back as a stray cell."""
        if view.preview is not None:
            return view.preview
        reader = self.open_body(view)
        try:
            body = view.body if view.body is not None else self._body(mailbox_id, view.uid)
            if body is None:
                # The row went (expunged since it was read) while its content stays readable
                # for a while (docs/decisions/0011): the structure comes from the content.
                head = reader.read(4 * PREVIEW_READ)
                body = _safe_structure(head)
            text = make_preview(body, _range_reader(reader))
        finally:
            reader.close()
        self.table.check_and_put(keys.message_key(mailbox_id, view.uid), STATE,
                                 view.state_raw, PREVIEW, encode_cell(text))
        view.preview = text
        return text

    def _body(self, mailbox_id: bytes, uid: int) -> dict | None:
        raw = self.table.row(keys.message_key(mailbox_id, uid), [BODY]).get(BODY)
        return orjson.loads(raw) if raw else None

    def open_body(self, view: MessageView):
        """A seekable reader over a message's bytes (fetches chunks on demand)."""
        return self.content.open(view.record.content, view.record.size,
                                 view.record.chunk_size or self.content.chunk_size)

    # -- adding ---------------------------------------------------------------------------------

    def add(self, mailbox: Mailbox, stored: StoredContent, flags: Iterable[str] = (),
            internal_date: float | None = None) -> tuple[int, int]:
        """Make one reference to ``stored`` a message of ``mailbox``; return (uid, modseq).
        Returns only once the message is visible to every reader of the mailbox.
        """
        self._replay_uncounted()
        self.retry_owed()
        flag_set = canonical_flags(flags)
        date = self.clock() if internal_date is None else internal_date
        seen = "\\Seen" in flag_set
        # Where the backend counts at allocation (HBase's Thrift2: decision 0029), the counts
        # go with the UID and the row's counted marker with the commit, and a writer whose
        # commit did not happen takes its own counts back (no marker: no one else does).
        at_allocation = self.backend.counts_at_allocation
        for _attempt in range(5):
            if at_allocation:
                uid, modseq = self.boxes.allocate(mailbox.id, stored.size, unseen=not seen)
            else:
                uid, modseq = self.boxes.allocate(mailbox.id)
            key = keys.message_key(mailbox.id, uid)
            cells = self._pending_cells(stored, Flags(modseq, flag_set))
            if at_allocation:
                cells[COUNTED] = encode_counter(2 * stored.size + (not seen) + 1)
            else:
                # The message is counted before it is committed (a reader may see the count
                # a moment early, never late), and its row marked as counted in the same
                # call: a writer killed before its commit leaves counts that whoever gives
                # the UID up takes back exactly (decision 0004).
                self._count(mailbox.id, key, stored.size, seen)
            record = MessageRecord(uid=uid, content=stored.content_id, size=stored.size,
                                   internal_date=date, modseq=modseq,
                                   header_size=stored.info.get("header_size", 0),
                                   lines=stored.info.get("lines", 0),
                                   chunk_size=stored.chunk_size, save_date=self.clock())
            encoded = record.encode()
            own = (stored.size, seen) if at_allocation else None
            try:
                committed = self._commit(mailbox.id, key, cells, encoded, at_allocation)
            except BaseException:
                if not self._committed_after_all(mailbox.id, key, encoded, own):
                    raise
                committed = True
            if committed:
                break
            # We were too slow and a reader gave our UID up (and, or we now, its counts).
            self._release(mailbox.id, key)
            if own:
                self._uncount(mailbox.id, *own)
        else:
            raise Conflict("could not commit the message: UIDs kept being abandoned")
        try:
            self.publish(mailbox.id, uid, uid)
        except Exception as exc:
            # Committed: the row owns its content reference now, whatever callers undo.
            raise Unpublished(f"message {uid} stored, not yet visible: {exc}", uid) from exc
        return uid, modseq

    def _commit(self, mailbox_id: bytes, key: bytes, cells: dict[bytes, bytes],
                encoded: bytes, at_allocation: bool) -> bool:
        """The commit call of an append: whether it committed.  Where the counts went with
        the UID (no :meth:`_count`, whose call carries :attr:`count_also`), what rides there
        -- the background indexer's queue cell -- is written beside the commit, overlapped
        with it (one call more, none more in a row).  Queued before or with the commit, as
        over Thrift1: a UID queued but not committed is dropped by the indexer (at or below
        the watermark without a visible message); one committed and not queued would never
        be indexed until fsck --repair."""
        def commit() -> bool:
            return self.table.put_then_check_and_put(key, cells, STATE, encoded)
        if not at_allocation or self.count_also is None:
            return commit()
        also = self.count_also(mailbox_id, keys.message_key_uid(key))

        def queue() -> None:
            try:
                self.backend.increment_rows(also)
            except Exception as exc:  # noqa: BLE001 - derived data: scanned, fsck queues it
                log.warning("message %d not queued for the text index: %s",
                            keys.message_key_uid(key), exc)
        return self.backend.concurrently(commit, queue)[0]

    def _count(self, mailbox_id: bytes, key: bytes, size: int, seen: bool) -> None:
        """Count one message of ``size`` octets in the mailbox and mark its row ``key`` as
        counted (:data:`COUNTED`), in one call."""
        deltas = {COUNT: 1}
        if size:
            deltas[SIZE] = size
        if not seen:
            deltas[UNSEEN] = 1
        increments = [(MAILBOXES.name, mailbox_id, deltas),
                      (MESSAGES.name, key, {COUNTED: 2 * size + (not seen) + 1})]
        if self.count_also is not None:
            increments += self.count_also(mailbox_id, keys.message_key_uid(key))
        self.backend.increment_rows(increments)

    def _committed_after_all(self, mailbox_id: bytes, key: bytes, record: bytes,
                             own: tuple[int, bool] | None = None) -> bool:
        """After a commit call failed: True if it was applied all the same (its answer was
        lost); else give the UID up and take its counts back, and return False.  ``own``:
        (size, seen) of counts taken with the UID, which no marker records (decision 0029).

        Raises :class:`Unpublished` when the store cannot tell: the message may be there, so
        its content reference must stay, and its counts stay with the row's :data:`COUNTED`
        for whoever gives the UID up later if it was not committed; counts taken with the UID
        (``own``), which no marker records, are taken back by this process's
        :meth:`retry_owed` once the store answers (too high, for fsck, only if it dies first)."""
        try:
            return self._commit_outcome(mailbox_id, key, record, own=own)
        except Exception as exc:
            with self._uncounted_lock:
                self._unsettled.append((mailbox_id, key, record, own))
            raise Unpublished(f"message {keys.message_key_uid(key)} may be stored: {exc}",
                              keys.message_key_uid(key)) from exc

    def _commit_outcome(self, mailbox_id: bytes, key: bytes, record: bytes,
                        later: bool = False, own: tuple[int, bool] | None = None) -> bool:
        """Whether the commit ``record`` of ``key`` was made; if not, the UID is given up
        and its counts taken back.  ``later``: asked after the append had returned, when the
        message may have been shown and removed since: a row gone at or below the watermark
        (read first) was committed (decision 0003's rule for a move's target)."""
        if later:
            marks = self.boxes.rows.row(mailbox_id, [VISIBLE, UID])
            uid = keys.message_key_uid(key)
            if uid > decode_counter(marks.get(UID)):
                return False    # never allocated: rolled back with its unit of work
            if uid <= decode_counter(marks.get(VISIBLE)) and STATE not in self.table.row(
                    key, [STATE]):
                return True
        if self.table.check_and_put(key, STATE, None, STATE, ABANDONED):
            self._release(mailbox_id, key)
            if own:
                self._uncount(mailbox_id, *own)
            return False
        state = self.table.row(key, [STATE]).get(STATE)
        if state == record or (later and state_of(state) != ABANDONED):
            return True     # committed (and perhaps claimed by a move or expunge since)
        self._release(mailbox_id, key)      # given up by another: ours to take back
        if own:
            self._uncount(mailbox_id, *own)
        return False

    def retry_owed(self) -> None:
        """Settle the appends left :class:`Unpublished` (see __init__) and replay what the
        content store owes; what fails again stays owed.  Never raises."""
        self.content.retry_owed()
        with self._uncounted_lock:
            if not (self._unsettled or self._owed_counts or self._owed_strips):
                return
            pending, self._unsettled = self._unsettled, []
            counts, self._owed_counts = self._owed_counts, []
            strips, self._owed_strips = self._owed_strips, []
        for entry in counts:
            self._take_back_once(*entry)
        for key in strips:
            self._strip(key)
        for mailbox_id, key, record, own in pending:
            try:
                if not self._commit_outcome(mailbox_id, key, record, later=True, own=own):
                    self.content.give_back(MessageRecord.decode(record).content)
            except Exception:  # still failing: settled next time
                with self._uncounted_lock:
                    self._unsettled.append((mailbox_id, key, record, own))

    def _release(self, mailbox_id: bytes, key: bytes, counted: bytes | None = None) -> None:
        """Take back what an append counted for the abandoned UID ``key`` (once, whoever calls:
        the claim is a check-and-put of :data:`COUNTED` to 0), then strip what its writer had
        put in the row.  ``counted``: the cell as already read, if it was."""
        if counted is None:
            counted = self.table.row(key, [COUNTED]).get(COUNTED)
        code = decode_counter(counted)
        if code > 0 and self.table.check_and_put(key, COUNTED, counted, COUNTED,
                                                 encode_counter(0)):
            size, unseen = divmod(code - 1, 2)
            # A crash just here leaves the counts too high (fsck), never too low.
            self._take_back_once(mailbox_id, size, unseen,
                                 step_column(b"c", keys.new_id(), "take-back"), fresh=True)
        self._strip(key)

    def _strip(self, key: bytes) -> None:
        """Delete what the writer of an abandoned UID had put in its row; owed (and made
        again by retry_owed: deleting twice is harmless) if the store fails."""
        try:
            self.table.delete(key, list(PENDING_CELLS))
        except Exception:
            with self._uncounted_lock:
                self._owed_strips.append(key)

    def _take_back_once(self, mailbox_id: bytes, size: int, unseen: int, marker: bytes,
                        fresh: bool = False) -> None:
        """Uncount one message claimed by :meth:`_release`, exactly once whatever the store
        answers: with a marker cell of its own in the same call (Mailboxes.count_once), so a
        take-back whose outcome is unknown (the gateway died with the call; issue 16) is
        replayed by :meth:`retry_owed` only if its marker is not there; the marker is removed
        afterwards.  ``fresh``: the marker is new, so not read first.  Never raises."""
        try:
            if fresh or not self.boxes.steps_done(mailbox_id, [marker]):
                self.boxes.count_once(mailbox_id, marker, messages=-1, size=-size,
                                      unseen=-unseen)
            self.boxes.rows.delete(mailbox_id, [marker])
        except Exception:  # the store is failing: owed, replayed when it answers
            with self._uncounted_lock:
                self._owed_counts.append((mailbox_id, size, unseen, marker))

    def _pending_cells(self, stored: StoredContent, flags: Flags) -> dict[bytes, bytes]:
        envelope = stored.info.get("envelope")
        cells = {ENVELOPE: _to_json(envelope),
                 BODY: _to_json(stored.info.get("body")),
                 SORTKEYS: sortkeys.encode(sortkeys.compute(envelope, stored.header)),
                 FLAGS: flags.encode()}
        if stored.header:
            cells[HEADER] = stored.header
        if stored.preview is not None:
            cells[PREVIEW] = encode_cell(stored.preview)
        return cells

    def _uncount(self, mailbox_id: bytes, size: int, seen: bool) -> None:
        """Take back the counts of a message that will not be committed after all."""
        self._take_back(mailbox_id, -1, -size, 0 if seen else -1)

    def _take_back(self, mailbox_id: bytes, messages: int, size: int, unseen: int) -> None:
        try:
            self.boxes.add_counts(mailbox_id, messages=messages, size=size, unseen=unseen)
        except BackendUnavailable as exc:
            if exc.unsent:      # never applied: safe to replay once the store answers
                with self._uncounted_lock:
                    self._uncounted.append((mailbox_id, messages, size, unseen))
            # otherwise it may have been applied: the counters may stay too high until fsck
        except Exception:  # the store is failing; the counters stay too high until fsck
            pass

    def _replay_uncounted(self) -> None:
        with self._uncounted_lock:
            if not self._uncounted:
                return
            pending, self._uncounted = self._uncounted, []
        for entry in pending:
            self._take_back(*entry)     # kept again if still refused unsent

    # -- the watermark ---------------------------------------------------------------------------

    def visible_uid(self, mailbox_id: bytes) -> int:
        return decode_counter(self.boxes.rows.row(mailbox_id, [VISIBLE]).get(VISIBLE))

    def publish(self, mailbox_id: bytes, first_uid: int, last_uid: int) -> None:
        """Advance the watermark to ``last_uid`` once every UID below it is settled.

        The caller has committed (or abandoned) ``first_uid..last_uid``.  In the common case
        nothing else is in flight and one check-and-put does it.
        """
        if self.boxes.rows.check_and_put(mailbox_id, VISIBLE, encode_counter(first_uid - 1),
                                         VISIBLE, encode_counter(last_uid)):
            return
        self.advance(mailbox_id, last_uid)

    def advance(self, mailbox_id: bytes, target: int) -> None:
        """Walk the watermark up to ``target``, waiting for (or abandoning) UIDs in flight."""
        first_seen: dict[int, float] = {}
        delay = 0.001
        while True:
            raw_mark = self.boxes.rows.row(mailbox_id, [VISIBLE]).get(VISIBLE)
            mark = decode_counter(raw_mark)
            if mark >= target:
                return
            start, stop = keys.message_range(mailbox_id, mark + 1, target)
            settled = {keys.message_key_uid(k)
                       for k, _ in self.table.scan(start=start, stop=stop, columns=[STATE])}
            reach = mark
            while reach + 1 in settled:
                reach += 1
            if reach > mark:
                # From the cell's bytes as read, absent included: a mailbox row recreated by
                # a racing append's increments has no watermark cell, and a compare with
                # encoded zero would fail (and this loop spin) for ever.
                self.boxes.rows.check_and_put(mailbox_id, VISIBLE, raw_mark,
                                              VISIBLE, encode_counter(reach))
                delay = 0.001
                continue
            waiting = mark + 1
            since = first_seen.setdefault(waiting, self.clock())
            if self.clock() - since >= self.abandon_after:
                key = keys.message_key(mailbox_id, waiting)
                if self.table.check_and_put(key, STATE, None, STATE, ABANDONED):
                    self._release(mailbox_id, key)
                continue
            # The writer we wait for may be blocked by our own unit of work (an append runs
            # as one transaction on the embedded store): let it in before waiting.
            self.backend.flush_group()
            self.sleep(delay)
            delay = min(delay * 2, 0.05)

    def settle(self, mailbox_id: bytes, visible: int, last: int) -> int:
        """:meth:`advance` for a reader, which never waits: move the watermark over the UIDs
        above ``visible`` (up to ``last``, the allocated UID) that are settled, giving up
        those this process has seen unwritten for ``abandon_after`` seconds and stripping
        what a dead writer had put there.  Returns the watermark as it leaves it.

        Opening a mailbox calls this when its watermark is behind its allocated UID, so UIDs
        a killed process allocated (an APPEND cut before its commit, a MOVE cut before it
        wrote its intent) are given up on the next opens instead of waiting for the next
        writer, or for fsck to call them a problem.
        """
        start, stop = keys.message_range(mailbox_id, visible + 1, last)
        found = {keys.message_key_uid(k): r for k, r in self.table.scan(start=start, stop=stop)}
        now = self.clock()
        stalled = self._stalled
        for uid in range(visible + 1, last + 1):
            if STATE not in found.get(uid, {}):
                stalled.setdefault((mailbox_id, uid), now)
        reach = visible
        for uid in range(visible + 1, last + 1):
            row = found.get(uid, {})
            if STATE not in row:
                if now - stalled.get((mailbox_id, uid), now) < self.abandon_after:
                    break
                key = keys.message_key(mailbox_id, uid)
                if not self.table.check_and_put(key, STATE, None, STATE, ABANDONED):
                    break  # its writer committed it after all: the next open moves on
                if len(row):
                    self._release(mailbox_id, key, row.get(COUNTED))
            elif row[STATE] == ABANDONED and len(row) > 1:
                self._release(mailbox_id, keys.message_key(mailbox_id, uid), row.get(COUNTED))
            stalled.pop((mailbox_id, uid), None)
            reach = uid
        if reach > visible:
            self.boxes.rows.check_and_put(mailbox_id, VISIBLE, encode_counter(visible),
                                          VISIBLE, encode_counter(reach))
        if len(stalled) > 10_000:
            stalled.clear()  # crude bound; a UID forgotten here is only noted again
        return reach

    # -- reading --------------------------------------------------------------------------------

    def scan(self, mailbox_id: bytes, low_uid: int = 1, high_uid: int | None = None,
             columns: list[bytes] | None = SUMMARY, newest_first: bool = False,
             limit: int | None = None, batch_size: int = 1000,
             visible: int | None = None) -> Iterator[MessageView]:
        """Visible messages with ``low_uid <= uid <= high_uid``, oldest first by default.

        One bounded scan of the mailbox's key range; ``high_uid`` is capped at the watermark
        (``visible``, if the caller has just read it).
        """
        mark = self.visible_uid(mailbox_id) if visible is None else visible
        high = mark if high_uid is None else min(high_uid, mark)
        if high < max(low_uid, 1):
            return
        start, stop = keys.message_range(mailbox_id, max(low_uid, 1), high)
        if columns is not None and STATE not in columns:
            columns = [STATE, *columns]
        # Keys sort newest first, so the natural scan order is newest first.
        rows = self.table.scan(start=start, stop=stop, columns=columns, reverse=not newest_first,
                               batch_size=batch_size)
        emitted = 0
        for key, row in rows:
            view = view_from_row(key, row)
            if view is not None:
                yield view
                emitted += 1
                if limit is not None and emitted >= limit:
                    return

    def newest(self, mailbox_id: bytes, count: int = 25,
               columns: list[bytes] | None = LISTING) -> list[MessageView]:
        """The newest ``count`` messages, newest first: a client's first screen, one scan."""
        return list(self.scan(mailbox_id, columns=columns, newest_first=True, limit=count,
                              batch_size=count + 5))

    def uids(self, mailbox_id: bytes) -> list[int]:
        """Every visible UID, ascending: one scan of the commit cells, nothing decoded but the
        state byte (this runs on every SELECT of a 100,000-message mailbox)."""
        mark = self.visible_uid(mailbox_id)
        if mark < 1:
            return []
        start, stop = keys.message_range(mailbox_id, 1, mark)
        base = keys.MAX_UID
        rows = self.table.scan(start=start, stop=stop, columns=[STATE], reverse=True,
                               batch_size=5000)
        return [base - int.from_bytes(key[16:24], "big") for key, row in rows
                if row[STATE][:1] in VISIBLE_STATES]

    def uid_flags(self, mailbox_id: bytes, high_uid: int,
                  low_uid: int = 1) -> Iterator[tuple[int, Flags]]:
        """(UID, flags) of every visible message from ``low_uid`` up to ``high_uid``,
        ascending: one bounded scan of the commit and flag cells, decoding nothing else."""
        if high_uid < max(low_uid, 1):
            return
        start, stop = keys.message_range(mailbox_id, max(low_uid, 1), high_uid)
        rows = self.table.scan(start=start, stop=stop, columns=[STATE, FLAGS], reverse=True,
                               batch_size=5000)
        for key, row in rows:
            if row.get(STATE, b"")[:1] in VISIBLE_STATES:
                yield keys.message_key_uid(key), Flags.decode(row.get(FLAGS))

    def get(self, mailbox_id: bytes, uids: Iterable[int],
            columns: list[bytes] | None = SUMMARY, visible: int | None = None
            ) -> list[MessageView]:
        """The visible messages among ``uids``, in the order given, one round trip
        (``visible``: the watermark, if the caller has just read it)."""
        mark = self.visible_uid(mailbox_id) if visible is None else visible
        wanted = [u for u in uids if 0 < u <= mark]
        if columns is not None and STATE not in columns:
            columns = [STATE, *columns]
        found = self.table.rows([keys.message_key(mailbox_id, u) for u in wanted], columns)
        views = (view_from_row(k, r) for k, r in found)
        return [v for v in views if v is not None]

    # -- flags ----------------------------------------------------------------------------------

    def store_flags(self, mailbox: Mailbox, uids: Iterable[int], flags: Iterable[str],
                    mode: str = "add", unchanged_since: int | None = None,
                    views: list[MessageView] | None = None, modseqs: Iterable[int] = (),
                    journal=None, changeable=None) -> tuple[list[tuple[int, Flags]], list[int]]:
        """Change flags (RFC 3501 6.4.6); returns (changed messages, UIDs that failed the
        UNCHANGEDSINCE test of RFC 7162).  ``views``: the messages' summaries, if the caller
        has just read them (``uids`` is then ignored); ``modseqs``: MODSEQs the caller has
        already taken for them (more are taken if needed).

        Each message's flags cell is changed by check-and-put, so two sessions changing the same
        message never lose each other's change, and only the winner adjusts the unseen counter.
        ``journal`` (the store's Transfers): when a change flips ``\\Seen``, the writes that do
        are recorded in an intent first and the unseen counter changes once, with the marker
        of that intent, so a process killed in between is counted by the roll forward
        (docs/decisions/0004).
        """
        wanted = canonical_flags(flags)
        if views is None:
            views = self.get(mailbox.id, uids, SUMMARY)
        if not views:
            return [], []

        def target(current: Flags) -> frozenset[str]:
            return flag_target(mode, wanted, current.names, changeable)
        # MODSEQs only for messages whose flags will change, as one block (taken by the caller
        # with its change-log number when it has them).
        will_change = sum(1 for v in views if target(v.flags) != v.flags.names and (
            unchanged_since is None or v.flags.modseq <= unchanged_since))
        spare: list[int] = list(modseqs)
        if will_change > len(spare):
            need = will_change - len(spare)
            top = self.boxes.rows.increment(mailbox.id, MODSEQ, need)
            spare += range(top - need + 1, top + 1)
        # Each write's new value is decided up front (its MODSEQ from ``spare``, in order), so
        # that those flipping \\Seen can be recorded before any is made.
        plan = []
        for view in views:
            if unchanged_since is not None and view.flags.modseq > unchanged_since:
                plan.append((view, None))
                continue
            names = target(view.flags)
            new = None
            if names != view.flags.names:
                modseq = spare.pop(0) if spare else self.boxes.rows.increment(mailbox.id, MODSEQ)
                new = Flags(modseq, frozenset(names))
            plan.append((view, new))
        flips = {v.uid: (new, int(v.flags.seen) - int(new.seen)) for v, new in plan
                 if new is not None and new.seen != v.flags.seen}
        intent = journal.begin_flags(mailbox.id, flips) if journal and flips else None
        changed, failed, unseen_delta = [], [], 0
        for view, new in plan:
            key = keys.message_key(mailbox.id, view.uid)
            current = view.flags
            expected = current.encode()
            while True:
                if unchanged_since is not None and current.modseq > unchanged_since:
                    failed.append(view.uid)
                    break
                if new is None:
                    names = target(current)
                    if names == current.names:
                        break
                    modseq = self.boxes.rows.increment(mailbox.id, MODSEQ)
                    new = Flags(modseq, frozenset(names))
                delta = int(current.seen) - int(new.seen)
                if intent is None and journal is not None and delta:
                    # A retry after a concurrent change flips \Seen where no write had been
                    # planned to: recorded in an intent before it is made, like the others
                    # (the writes made so far flipped nothing, so nothing is counted yet).
                    flips[view.uid] = (new, delta)
                    intent = journal.begin_flags(mailbox.id, flips)
                elif intent is not None and flips.get(view.uid) != ((new, delta) if delta
                                                                     else None):
                    # A retry after a concurrent change: the intent must name this write.
                    if delta:
                        flips[view.uid] = (new, delta)
                    else:
                        flips.pop(view.uid, None)
                    journal.note_flags(intent, flips)
                if self.table.check_and_put(key, FLAGS, expected, FLAGS, new.encode()):
                    unseen_delta += delta
                    changed.append((view.uid, new))
                    break
                new = None
                row = self.table.row(key, [STATE, FLAGS])
                if state_of(row.get(STATE)) not in VISIBLE_STATES:
                    break  # expunged meanwhile
                # Compare with the bytes as stored from now on (absent included), so a cell
                # written in another form than ours can never make this loop for ever.
                expected = row.get(FLAGS)
                current = Flags.decode(expected)
        if intent is not None:
            journal.end_flags(mailbox.id, intent, unseen_delta)
        elif unseen_delta:
            self.boxes.add_counts(mailbox.id, unseen=unseen_delta)
        return changed, failed

    # -- used by moves and fsck ------------------------------------------------------------------

    def write_rows(self, mailbox_id: bytes, rows: list[tuple[int, dict[bytes, bytes]]]) -> None:
        self.table.mutate_rows([Mutation(keys.message_key(mailbox_id, uid), puts=cells)
                                for uid, cells in rows])


__all__ = ["COMMITTED", "PREVIEW", "Messages", "MessageView", "StoredContent",
           "canonical_flags"]


class Ingestion:
    """One message streamed into the content table and parsed on the way (Messages.ingest,
    Messages.ingestion): :meth:`feed` the octets in order, then :meth:`finish`, or
    :meth:`abort` to remove what was written.  Holds at most a chunk and the header."""

    def __init__(self, messages: Messages, writer, max_size: int | None):
        self.messages = messages
        self.writer = writer
        self.chunk_size = writer.chunk_size
        self.max_size = max_size
        self.parser = StructureParser()
        self.head = bytearray()
        self.head_done = False

    @property
    def size(self) -> int:
        return self.writer.size

    def feed(self, piece: bytes) -> None:
        """The next octets; TooLarge (nothing is removed: call abort) past ``max_size``."""
        writer = self.writer
        if self.max_size is not None and writer.size + len(piece) > self.max_size:
            raise TooLarge(f"message larger than {self.max_size} bytes")
        if not self.head_done:
            # Keep bytes only until the header block has ended (or the cap), so a big
            # message costs no more than its header here.
            head = self.head
            head += piece[:HEADER_CAP - len(head)]
            end = _header_end(head)
            if end is not None or len(head) >= HEADER_CAP:
                del head[end or HEADER_CAP:]
                self.head_done = True
        self.parser.feed(piece)
        writer.write(piece)

    def finish(self) -> StoredContent:
        """Commit the content (its info written last, decision 0001's order); its summary."""
        writer = self.writer
        info = self.parser.close()
        content_id = writer.commit()
        data = info.to_json()
        # Read back from the store: the streamed octets were not kept (one chunk read at most).
        preview = self.messages._stored_preview(content_id, writer.size, writer.chunk_size,
                                                data)
        return StoredContent(content_id, writer.size, writer.chunk_size, data,
                             bytes(self.head[:info.header_size]), preview)

    def abort(self) -> None:
        """Remove what was written (never referenced: no grace period is needed).  If the
        store is failing, the content is queued to be deleted when it answers again."""
        try:
            self.writer.abort()
        except Exception:
            self.messages.content.discard(self.writer.content_id)
