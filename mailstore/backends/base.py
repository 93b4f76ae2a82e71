"""The storage contract: a few key-value operations over HBase's data model.

A backend holds *tables* of *rows*.  A row is addressed by a byte string (its key) and rows are
kept sorted by that key, byte by byte (``memcmp`` order, as HBase does).  A row holds *cells*,
addressed ``b"family:qualifier"``; families are fixed per table (see :mod:`mailstore.schema`),
qualifiers are free.  Values are byte strings.  There is one version per cell.

Everything the mail store does goes through the methods below, and nothing else.  The names
follow happybase's ``Table`` so that the HBase backend is a thin shim.  Guarantees:

* A single call that touches one row is atomic: readers see all of its cells change or none.
  Calls that touch several rows (``mutate_rows``, ``delete_rows``) MAY apply row by row, as HBase
  does; callers must order their writes so that any prefix of them is safe.
* ``increment`` is atomic and returns the new value.  Counters are stored as HBase stores them:
  8-byte big-endian two's-complement integers, so a counter written by one backend reads the same
  through the other.
* ``check_and_put`` is atomic with respect to every other write to the same row.  It puts exactly
  one cell, because that is all HBase's Thrift1 gateway can do.
* Scans are bounded: ``start`` inclusive, ``stop`` exclusive, in ascending key order whatever the
  direction; ``reverse=True`` only walks that range from the top down.  A scan MAY see writes that
  happen while it runs (HBase scans are not snapshots), but every row it returns is whole as of
  some moment.

Errors: a backend raises :class:`mailstore.errors.BackendUnavailable` when the store cannot be
reached or fails; no other backend-specific exception escapes.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

Row = dict[bytes, bytes]
"""The cells of one row, ``{b"family:qualifier": value}``."""

Columns = Sequence[bytes] | None
"""A column selection: ``None`` for every cell, else a list whose items are either a whole
family (``b"m"`` or ``b"m:"``) or one cell (``b"m:size"``)."""


class Mutation:
    """One row's changes, applied atomically by :meth:`Backend.mutate_rows`.

    ``puts`` maps full column names to values.  ``deletes`` lists full column names or whole
    families (``b"f:"``) to remove.  ``delete_row`` removes every cell first; puts then apply.
    """

    __slots__ = ("row", "puts", "deletes", "delete_row")

    def __init__(self, row: bytes, puts: Mapping[bytes, bytes] | None = None,
                 deletes: Iterable[bytes] = (), delete_row: bool = False):
        self.row = row
        self.puts = dict(puts or {})
        self.deletes = list(deletes)
        self.delete_row = delete_row

    def __repr__(self) -> str:
        return (f"Mutation({self.row!r}, puts={sorted(self.puts)!r}, "
                f"deletes={self.deletes!r}, delete_row={self.delete_row})")


def encode_counter(value: int) -> bytes:
    """A counter as HBase stores it: 8 bytes, big-endian, signed."""
    return value.to_bytes(8, "big", signed=True)


def decode_counter(raw: bytes | None) -> int:
    """Read a counter cell; an absent cell counts as 0, as HBase's increment treats it."""
    if raw is None:
        return 0
    if len(raw) != 8:
        raise ValueError(f"counter cell holds {len(raw)} bytes, not 8")
    return int.from_bytes(raw, "big", signed=True)


def prefix_stop(prefix: bytes) -> bytes | None:
    """The first key after every key that starts with ``prefix`` (``None``: end of table)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def scan_bounds(start: bytes | None, stop: bytes | None,
                prefix: bytes | None) -> tuple[bytes | None, bytes | None]:
    """A scan's (start, stop), from either ``prefix`` or ``start``/``stop``; every backend
    refuses unbounded scans the same way (ValueError)."""
    if prefix is not None:
        if start is not None or stop is not None:
            raise ValueError("scan takes either prefix or start/stop, not both")
        start, stop = prefix, prefix_stop(prefix)
    if start is None and stop is None:
        raise ValueError("unbounded scan refused: give start, stop or prefix")
    return start, stop


class Table(abc.ABC):
    """One table of a backend.  Obtained from :meth:`Backend.table`; cheap to hold."""

    name: str

    ordered_keys: bool = False
    """Whether new rows are cheaper to write in ascending key order.  True for a B-tree (the
    embedded store), where a row with a random key is inserted into the middle of a full page;
    False for HBase, where ascending keys would send every write to one region.  The mail store
    picks new content ids accordingly (:func:`mailstore.keys.new_ordered_id`); nothing else
    depends on it."""

    @abc.abstractmethod
    def row(self, row: bytes, columns: Columns = None) -> Row:
        """The selected cells of ``row``; an empty dict if the row or the cells are absent."""

    def large_cells(self, row: bytes, columns: Sequence[bytes]) -> Row:
        """:meth:`row` for cells known to be large (message content chunks, 64 KiB to 1 MiB
        each, read while streaming a body): the same result.  A backend may read such values
        a cheaper way; by default this is :meth:`row`."""
        return self.row(row, columns)

    def put_large(self, row: bytes, data: Mapping[bytes, bytes]) -> None:
        """:meth:`put` of cells known to be large (the chunks of a big message's content, but
        not its last put, the one that completes it).  The same guarantees; a backend may put
        off housekeeping that the completing put then does once.  By default :meth:`put`."""
        self.put(row, data)

    def reclaim(self, min_age: float = 600.0, remove: bool = True) -> int:
        """Free the space of large values (see ``mob`` in :meth:`Backend.create_table`) whose
        row has no cell left and that nothing has written for ``min_age`` seconds (left by a
        kill, or by rows deleted inside a grouped transaction), as HBase's MOB cleaner does;
        return how many files or objects were freed (with ``remove`` false: would be).
        Nothing a caller reads changes.  By default there is nothing to free."""
        return 0

    @abc.abstractmethod
    def rows(self, rows: Sequence[bytes], columns: Columns = None) -> list[tuple[bytes, Row]]:
        """Fetch many rows in one round trip.

        Returns ``(key, cells)`` pairs in the order of ``rows``, omitting rows that have no
        selected cells.
        """

    @abc.abstractmethod
    def scan(self, start: bytes | None = None, stop: bytes | None = None,
             prefix: bytes | None = None, columns: Columns = None, limit: int | None = None,
             reverse: bool = False, batch_size: int = 1000) -> Iterator[tuple[bytes, Row]]:
        """Iterate over rows with ``start <= key < stop``, or rows whose key starts with ``prefix``.

        ``prefix`` excludes ``start``/``stop``.  Rows come in ascending key order, or descending
        with ``reverse=True``.  At most ``limit`` rows are returned.  Rows with none of the
        selected columns are skipped.  ``batch_size`` is the number of rows fetched per round
        trip.  Leaving both ends open is refused: every scan in the mail store is bounded.
        """

    @abc.abstractmethod
    def put(self, row: bytes, data: Mapping[bytes, bytes]) -> None:
        """Set the given cells of one row, atomically."""

    @abc.abstractmethod
    def delete(self, row: bytes, columns: Columns = None) -> None:
        """Delete the selected cells of one row (every cell when ``columns`` is ``None``)."""

    @abc.abstractmethod
    def mutate_rows(self, mutations: Sequence[Mutation]) -> None:
        """Apply several rows' mutations in one round trip; each row atomically, in order."""

    def retire(self, mutations: Sequence[Mutation]) -> None:
        """:meth:`mutate_rows` of deletes only (ValueError for a mutation with puts), of
        cells or rows that are never written again: a key or column used once (an intent
        row, an intent's step marker cells, the row of an expunged or moved-away UID).  The
        same guarantees, but for one this method waives: that a put of the same cell made
        right after it (in the same millisecond) is kept.  Over HBase, whose delete markers
        hide puts stamped in the same millisecond, :meth:`delete` and :meth:`mutate_rows`
        wait for the server's clock to move on before they return (``delete_settle``); this
        does not.  By default :meth:`mutate_rows`."""
        if any(m.puts for m in mutations):
            raise ValueError("retire takes deletes only")
        self.mutate_rows(mutations)

    @abc.abstractmethod
    def increment(self, row: bytes, column: bytes, delta: int = 1) -> int:
        """Add ``delta`` to a counter cell (absent counts as 0) and return the new value."""

    @abc.abstractmethod
    def increment_many(self, row: bytes, deltas: Mapping[bytes, int],
                       returning: Collection[bytes] = ()) -> dict[bytes, int]:
        """Add to several counters of one row; return the new values of those in ``returning``.

        ``returning`` names counters of ``deltas`` whose new values the caller needs (ValueError
        for one that is not in ``deltas``); the result maps each of them to its value, and is
        empty when ``returning`` is.  Each counter is changed atomically, but the set of them
        MAY be seen half-applied -- with one guarantee on order: the counters in ``returning``
        change in the order of ``deltas``, each before the next (a mailbox's UID before its
        MODSEQ: readers take a UID watermark behind the last UID as a MODSEQ in flight), and
        when the call raises, a counter of ``returning`` that failed was the last one tried
        and the others of ``deltas`` were not applied (so a caller whose UID could not be
        taken has no counts to give back).  Round trips: the embedded backend makes one
        statement of the whole call; HBase's Thrift1 gateway returns no values from a batch of
        increments, so there each counter in ``returning`` costs one ``atomicIncrement``, one
        after the other, and the others go together in one ``incrementRows`` after them;
        Thrift2 takes the counters of ``returning`` in one atomic ``increment`` and the others
        in a second.
        """

    @abc.abstractmethod
    def check_and_put(self, row: bytes, column: bytes, expected: bytes | None,
                      put_column: bytes, value: bytes) -> bool:
        """Put one cell if ``column`` currently holds ``expected``.

        ``expected=None`` means the cell must be absent.  Cells checked for absence must never be
        stored empty: HBase does not tell an empty value from a missing one.  Returns whether the
        put happened.
        """

    def put_then_check_and_put(self, row: bytes, data: Mapping[bytes, bytes], column: bytes,
                               value: bytes) -> bool:
        """Put ``data`` into ``row``, then put ``column`` only if it is absent; return whether
        ``column`` was put.

        This writes a row and then its commit cell.  The two steps MAY happen separately, as
        they do here and over HBase's Thrift1 gateway (a put, then a check-and-put of one cell):
        a reader or a crash can then find ``data`` without ``column``, and when the check fails
        ``data`` has been put all the same.  A backend MAY instead apply both at once, putting
        nothing when the check fails (the embedded backend does, in one statement; HBase over
        Thrift2 in one ``checkAndMutate``).  Either way
        a caller whose check failed removes ``data`` itself if it must.  ``column`` must not be
        one of ``data``'s cells.
        """
        if column in data:
            raise ValueError("the checked column cannot also be one of the data cells")
        self.put(row, data)
        return self.check_and_put(row, column, None, column, value)


TEXT_DOCS = ("subject", "from", "to", "cc", "bcc", "head", "body")
"""The documents the text index keeps per message (see :class:`TextIndex`)."""

TEXT_SEPARATOR = "\uffff"
"""Joins the texts of one document that a substring must not straddle (two body parts, two
fields).  A Unicode noncharacter; NUL, which FTS5 takes as the end of the text, is written as
it too (no SEARCH string holds NUL: RFC 3501 9, CHAR8).  A needle holding either is never
looked up."""


class TextIndex(abc.ABC):
    """A per-mailbox substring index of message text (issue 14; docs/decisions/0026).

    It *proposes* messages; the caller verifies them.  For each message it holds up to one
    text per name in :data:`TEXT_DOCS`, given already case-folded by the caller (the index
    folds nothing itself).  Guarantees:

    * ``match`` MUST return every indexed UID of the mailbox whose document contains the
      needle as a substring (code point for code point).  It MAY return more: UIDs whose text
      does not contain it, UIDs no longer in the mailbox, UIDs not indexed.
    * A message is *indexed* once :meth:`markers` says so (True), and only then: its
      documents are complete.  ``put`` writes the documents before the marker, so a crash
      leaves a message unmarked (scanned), never marked with half its text.
    * UIDs are never reused within a mailbox id, so entries of a removed UID MAY linger (they
      only add candidates that are not in the mailbox).
    * An index whose ``exact`` is True returns from ``match`` exactly the marked UIDs whose
      document holds the needle (lingering ones aside); the caller may then skip verifying
      them.  The caller never asks for a needle holding :data:`TEXT_SEPARATOR` or NUL.
    """

    exact: bool = False

    @abc.abstractmethod
    def put(self, mailbox_id: bytes, uid: int, docs: Mapping[str, str] | None) -> None:
        """Index one message; ``docs`` None records that it is not indexed (too big, not
        readable) and must be scanned (its marker is False).  Replaces an earlier entry."""

    def put_many(self, mailbox_id: bytes, entries: Mapping[int, Mapping[str, str] | None]
                 ) -> None:
        """Index several messages of one mailbox, ``UID -> docs`` as for :meth:`put` (the
        background indexer's batch).  Each message's guarantee is :meth:`put`'s; an engine
        MAY make the batch cheaper than one put each (one transaction, one write per posting
        row) and MAY apply it all or nothing."""
        for uid, docs in entries.items():
            self.put(mailbox_id, uid, docs)

    @abc.abstractmethod
    def remove(self, mailbox_id: bytes, uids: Collection[int]) -> None:
        """Forget messages (expunged or moved away): at least their markers."""

    @abc.abstractmethod
    def drop(self, mailbox_id: bytes) -> None:
        """Forget a whole mailbox (deleted, or before a rebuild)."""

    @abc.abstractmethod
    def markers(self, mailbox_id: bytes) -> dict[int, bool]:
        """UID -> True (indexed) or False (recorded as not indexable), for every marked UID."""

    def unindexed(self, mailbox_id: bytes, uids: Iterable[int]) -> set[int]:
        """The UIDs of ``uids`` not marked as indexed (True): SEARCH scans them."""
        markers = self.markers(mailbox_id)
        return {uid for uid in uids if not markers.get(uid)}

    @abc.abstractmethod
    def match(self, mailbox_id: bytes, doc: str, needle: str) -> set[int]:
        """UIDs whose document ``doc`` may contain ``needle`` (at least 3 code points; a
        shorter one raises ValueError: trigrams cannot narrow it)."""


class ReadsOnly:
    """What :meth:`Backend.reads_only` yields: ``refused`` once a write was refused."""

    refused = False


class Backend(abc.ABC):
    """A store of tables, chosen by name from the configuration (see :func:`open_backend`)."""

    name: str

    counts_at_allocation = False
    """Whether an append counts its message in the call that takes its UID and marks its row
    as counted in its commit call (``put_then_check_and_put``), instead of counting and
    marking in one :meth:`increment_rows` between the two (docs/decisions/0004, 0029).  For a
    backend whose ``increment_rows`` of two rows is two calls anyway (HBase's Thrift2 API has
    no increment of several rows), so that a writer killed between them leaves the counters
    too high however it is done, and whose ``put_then_check_and_put`` is atomic: two round
    trips fewer per append, with the same exposure.  The embedded store and Thrift1 keep the
    exact way."""

    local_reads = False
    """Whether a read returns without waiting on the network or another writer, in a few
    microseconds for a single row: such a read may run in the caller's thread (the IMAP
    server's reactor does so for a refresh that finds nothing new) instead of a worker
    thread, whose round trip costs more CPU than the read.  HBase's reads are network
    round trips: no."""

    @contextlib.contextmanager
    def reads_only(self) -> Iterator[ReadsOnly]:
        """Within: any write by this thread raises :class:`~mailstore.errors.WriteRefused`
        and sets the yielded probe's ``refused``, whoever catches the error -- so a caller
        that runs a read in a thread that must not wait for the write lock (a reactor) can
        tell that it has to run the call again elsewhere.  A backend without
        ``local_reads`` is never asked; this one enforces nothing."""
        yield ReadsOnly()

    @abc.abstractmethod
    def table(self, name: str) -> Table:
        """The table called ``name`` (without any configured prefix); it must exist."""

    @abc.abstractmethod
    def create_table(self, name: str, families: Mapping[str, Mapping[str, object]], *,
                     new_keys_descend: bool = False,
                     mob: tuple[str, int] | None = None) -> bool:
        """Create a table with the given column families; return False if it already existed.

        ``new_keys_descend`` says that new rows mostly get keys below the existing ones (the
        message table's keys count down).  A backend whose write cost depends on where a new
        row lands may lay the table out for that; nothing a caller reads may change.

        ``mob`` is (family, threshold): that family's values over ``threshold`` octets are
        large objects (HBase's MOB: message content chunks).  A backend MAY keep them apart
        from the other cells, also in a table that already existed; nothing a caller reads may
        change.  Such a family's values SHOULD NOT be compared by :meth:`Table.check_and_put`.
        """

    @abc.abstractmethod
    def tables(self) -> list[str]:
        """Names of the existing tables, without the configured prefix, sorted."""

    @abc.abstractmethod
    def delete_table(self, name: str) -> None:
        """Drop a table and everything in it (used by tests and by nothing else)."""

    def concurrently(self, *calls: Callable[[], Any]) -> list[Any]:
        """Run independent calls, possibly at the same time; return their results in order.

        For a caller with work whose order does not matter (a read and an unrelated write, a
        row in each of two tables): over HBase each call MAY run on its own pooled connection
        while the others run, so the caller waits for the slowest round trip instead of their
        sum.  Every call that starts runs to its end before this returns, and if any raised,
        the exception of the first of them (in argument order) is raised; a call after one
        that raised MAY not run at all, and the caller cannot tell from the exception which of
        the others were applied (have each call note its own outcome if that matters).  A
        caller MUST NOT rely on any order among the calls, nor on their running in its own
        thread.  The embedded backend runs them one after the other, in argument order, in the
        calling thread (inside its group, if one is open), and stops at the first that raises;
        so does this default.
        """
        return [call() for call in calls]

    def increment_rows(self, increments: Sequence[tuple[str, bytes, Mapping[bytes, int]]]
                       ) -> None:
        """Add to counters of several rows, of one table or several: each item is ``(table
        name, row, {column: delta})``.  Nothing is returned.

        One call: a process killed while making it has applied all of it or none (the
        embedded backend runs it as one transaction; over HBase it is one Thrift1
        ``incrementRows``, which a killed client sent whole or not at all -- the gateway
        applies it cell by cell, so a fault of the *gateway* mid-call MAY still cut it).  Over
        Thrift2, which has no increment of several rows, each row is one call in the order
        given, so a killed client MAY leave a prefix of the rows applied: callers order the
        rows so that a prefix errs the safe way, as they must for a gateway fault anyway.  The
        mail store counts an append's message and marks the message row as counted this way
        (docs/decisions/0004).  This default makes one call per row, without that guarantee.
        """
        for name, row, deltas in increments:
            self.table(name).increment_many(row, deltas)

    def sync(self) -> None:  # noqa: B027 - optional hook, a no-op for most backends
        """Make every write that has returned durable: survive a power cut, not just a crash.

        The mail store calls this once at the end of each operation it acknowledges (an APPEND
        answered OK, a delivery answered 250), not after each of the operation's writes.  A
        backend whose every write is durable when it returns (HBase, through its WAL) has
        nothing to do.
        """

    @contextlib.contextmanager
    def grouped(self) -> Iterator[None]:
        """Run the calls made inside (by this thread) as one unit of work, where that is cheaper.

        A hint, never a guarantee callers may rely on: every write protocol of the mail store
        stays safe with the calls applied one by one, as HBase applies them (here, a no-op).
        The embedded store runs a group in one transaction: one commit and one log write of
        each page instead of one per call.  Reads inside a group see its writes; a group
        inside a group joins it.  A caller about to *wait* for another writer calls
        :meth:`flush_group` first, since an open group may be holding that writer up.
        """
        yield

    def flush_group(self) -> None:  # noqa: B027 - optional hook
        """Make what the current group has written so far visible to others, and run the rest
        of it call by call (nothing to do outside a group, or where groups are no-ops)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and files.  The backend must not be used afterwards."""

    def text_index(self) -> TextIndex:
        """The text index.  By default trigram posting rows in ``JAMES_TEXT_INDEX`` through
        the table operations above (:mod:`.postings`); a backend with a better engine of its
        own overrides this (the embedded store: SQLite FTS5)."""
        from .postings import PostingIndex
        return PostingIndex(self.table("JAMES_TEXT_INDEX"))


def delete_rows(table: Table, *, start: bytes | None = None, stop: bytes | None = None,
                prefix: bytes | None = None, columns: Columns = None, batch: int = 500) -> int:
    """Delete every row of a bounded range, ``batch`` rows a round trip; return how many.

    ``columns`` only narrows what the scan reads to find the rows (a row is deleted whole).
    """
    removed = 0
    while True:
        found = [k for k, _ in table.scan(start=start, stop=stop, prefix=prefix,
                                          columns=columns, limit=batch)]
        if not found:
            return removed
        table.mutate_rows([Mutation(k, delete_row=True) for k in found])
        removed += len(found)
