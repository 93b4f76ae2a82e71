"""The embedded store's text index: SQLite FTS5 with the trigram tokenizer.

Two SQL tables next to the cell tables, in the same database file (so an append's index
write joins the append's transaction when the mail store groups them):

* ``ti_docs (mbox, uid) -> state, doc``: the marker of each message (state 1 indexed, 0 not
  indexable) and the rowid of its FTS5 row; ``seq`` numbers markers in the order they were
  written (AUTOINCREMENT: never reused), and ``ti_gen (mbox) -> gen`` counts removals.  A
  process keeps each mailbox's set of indexed UIDs and brings it up to date with the markers
  written since (``seq`` above the last seen) -- or reads it again when ``gen`` moved -- so
  SEARCH on 100,000 messages does not read 100,000 markers each time (70 ms).
* ``ti_fts``: an FTS5 table with one column per :data:`TEXT_DOCS` name.  The trigram tokenizer
  makes a phrase query a substring query (the phrase's trigrams at consecutive positions), so
  a match is exact: the texts a column joins (two body parts, two fields) are separated by
  :data:`TEXT_SEPARATOR`, which no needle holds.  FTS5 ends a text at NUL: the caller writes
  NUL as the separator too.

Long needles: FTS5 evaluates a phrase by walking the position list of each of its tokens, so
a repeated trigram costs its position list once per repetition: ``"xxx...x"`` against a
message of 6,000 x's took 3 ms for 100 x's, 43 ms for 1,000 and 180 ms for 5,000 (work in
proportion to the needle's length times the text's: any client could burn the server's CPU
with a few SEARCH commands).  A needle of up to :data:`PHRASE_TRIGRAMS` trigrams
is still a phrase (at most that many position lists per row, as many one-trigram queries
would read).  A longer one asks FTS5 for the rows holding every one of a bounded subset of
its distinct trigrams (:func:`.postings.needle_trigrams`, ``AND``: rowids only), and keeps
those whose stored text holds the needle, tested by Python's ``in`` (CPython's substring
search is linear: two-way for long needles), so the answer stays exact and its cost is the
candidates' text, as a scan of them would be.

Case: the texts and needles come case-folded by Python (:meth:`str.casefold`, what the scan
uses), and the tokenizer runs with ``case_sensitive 1``.  FTS5's own folding
(``case_sensitive 0``) is simple per-code-point lower-casing: it folds ASCII and ``É`` but
does not make ``ß`` match ``SS`` nor ``İ`` match ``i̇``, so it would not agree with the scan.
A needle shorter than three code points matches no row at all in FTS5 (no trigram): the
caller never asks, it scans.

One FTS5 table serves every mailbox: a MATCH reads the postings of all mailboxes and the join
keeps the mailbox's own.  Cheap for a single-user store, it grows with the store; the posting
index (:mod:`.postings`) is keyed by mailbox instead (decision 0026).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Collection, Iterable, Mapping

from ..errors import BackendUnavailable
from .base import TEXT_DOCS, TextIndex
from .postings import needle_trigrams

_COLUMNS = ", ".join(f'"{doc}"' for doc in TEXT_DOCS)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ti_docs (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
    "mbox BLOB NOT NULL, uid INTEGER NOT NULL, state INTEGER NOT NULL, doc INTEGER, "
    "UNIQUE (mbox, uid))",
    "CREATE INDEX IF NOT EXISTS ti_docs_doc ON ti_docs (doc)",
    "CREATE INDEX IF NOT EXISTS ti_docs_seq ON ti_docs (mbox, seq)",
    "CREATE TABLE IF NOT EXISTS ti_gen (mbox BLOB PRIMARY KEY, gen INTEGER NOT NULL) "
    "WITHOUT ROWID",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS ti_fts USING fts5({_COLUMNS}, "
    "tokenize = 'trigram case_sensitive 1')",
)

PHRASE_TRIGRAMS = 32
"""Longest needle, in trigrams (code points less two), looked up as one FTS5 phrase; a longer
one is looked up by a few of its distinct trigrams and verified (see the module docstring)."""

_INSERT = f"INSERT INTO ti_fts ({_COLUMNS}) VALUES ({', '.join('?' * len(TEXT_DOCS))})"


def _bump(db, mailbox_id: bytes) -> None:
    """Count a removal of markers, in the removing transaction (see _indexed)."""
    db.execute("INSERT INTO ti_gen VALUES (?, 1) ON CONFLICT (mbox) DO UPDATE SET gen = gen + 1",
               (mailbox_id,))


def _phrase(needle: str) -> str:
    """An FTS5 string: the needle in double quotes, a double quote doubled."""
    return '"' + needle.replace('"', '""') + '"'


class Fts5TextIndex(TextIndex):
    # A trigram phrase is the needle's trigrams at consecutive positions: the needle itself,
    # within one column's text (and within one of its texts: the separator is in no needle);
    # a long needle's rows are tested against the stored text itself.  Either way exact.
    exact = True

    def __init__(self, backend):
        self.backend = backend
        self._lock = threading.Lock()
        self._marked: dict[bytes, tuple[int, int, set[int]]] = {}  # mbox -> gen, seq, UIDs
        if not getattr(backend, "_fts_ready", False):
            try:
                with backend._locked() as db:
                    for sql in _SCHEMA:
                        db.execute(sql)
            except sqlite3.Error as exc:
                raise BackendUnavailable(f"embedded store: text index: {exc}") from exc
            backend._fts_ready = True

    def put(self, mailbox_id: bytes, uid: int, docs: Mapping[str, str] | None) -> None:
        try:
            with self.backend._locked() as db:
                self._forget(db, mailbox_id, [uid])
                rowid = None
                if docs:
                    cur = db.execute(_INSERT, [docs.get(doc, "") for doc in TEXT_DOCS])
                    rowid = cur.lastrowid
                db.execute("INSERT INTO ti_docs (mbox, uid, state, doc) VALUES (?, ?, ?, ?)",
                           (mailbox_id, uid, 1 if docs is not None else 0, rowid))
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"embedded store: text index: {exc}") from exc

    def put_many(self, mailbox_id: bytes, entries: Mapping[int, Mapping[str, str] | None]
                 ) -> None:
        # One transaction: FTS5 flushes one segment for the batch instead of one per message
        # (the ~0.6 ms a message of decision 0026's append figure).  A group, so that this
        # process's appends queue behind it on the backend's gate, not SQLite's busy sleeps.
        try:
            with self.backend.grouped(), self.backend._locked() as db:
                self._forget(db, mailbox_id, list(entries))
                for uid, docs in entries.items():
                    rowid = None
                    if docs:
                        rowid = db.execute(_INSERT, [docs.get(doc, "") for doc in TEXT_DOCS]
                                           ).lastrowid
                    db.execute("INSERT INTO ti_docs (mbox, uid, state, doc) "
                               "VALUES (?, ?, ?, ?)",
                               (mailbox_id, uid, 1 if docs is not None else 0, rowid))
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"embedded store: text index: {exc}") from exc

    @staticmethod
    def _forget(db, mailbox_id: bytes, uids: Collection[int]) -> None:
        removed = False
        for uid in uids:
            row = db.execute("SELECT doc FROM ti_docs WHERE mbox = ? AND uid = ?",
                             (mailbox_id, uid)).fetchone()
            if row is None:
                continue
            if row[0] is not None:
                db.execute("DELETE FROM ti_fts WHERE rowid = ?", (row[0],))
            db.execute("DELETE FROM ti_docs WHERE mbox = ? AND uid = ?", (mailbox_id, uid))
            removed = True
        if removed:
            _bump(db, mailbox_id)

    def remove(self, mailbox_id: bytes, uids: Collection[int]) -> None:
        if not uids:
            return
        try:
            with self.backend._locked() as db:
                self._forget(db, mailbox_id, uids)
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"embedded store: text index: {exc}") from exc

    def drop(self, mailbox_id: bytes) -> None:
        try:
            with self.backend._locked() as db:
                db.execute("DELETE FROM ti_fts WHERE rowid IN "
                           "(SELECT doc FROM ti_docs WHERE mbox = ? AND doc IS NOT NULL)",
                           (mailbox_id,))
                db.execute("DELETE FROM ti_docs WHERE mbox = ?", (mailbox_id,))
                _bump(db, mailbox_id)
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"embedded store: text index: {exc}") from exc

    def markers(self, mailbox_id: bytes) -> dict[int, bool]:
        cur = self.backend._read("SELECT uid, state FROM ti_docs WHERE mbox = ?", (mailbox_id,))
        return {uid: state == 1 for uid, state in cur}

    def unindexed(self, mailbox_id: bytes, uids: Iterable[int]) -> set[int]:
        with self._lock:  # the set is brought up to date in place: not while in use
            marked = self._indexed(mailbox_id)
            if marked.issuperset(uids):  # the usual answer, found in C: nothing to scan
                return set()
            return set(uids).difference(marked)

    def _indexed(self, mailbox_id: bytes) -> set[int]:
        """The mailbox's indexed UIDs, from this process's copy brought up to date (called
        with the lock held)."""
        read = self.backend._read
        gen_row = read("SELECT gen FROM ti_gen WHERE mbox = ?", (mailbox_id,)).fetchone()
        gen = gen_row[0] if gen_row else 0
        known = self._marked.get(mailbox_id)
        if known is None or known[0] != gen:
            # Removals since: read them all again (the generation is read first, so a
            # removal racing with this read shows as a newer generation next time).
            rows = read("SELECT seq, uid, state FROM ti_docs WHERE mbox = ?",
                        (mailbox_id,)).fetchall()
            marked = {uid for _seq, uid, state in rows if state == 1}
            seq = max((row[0] for row in rows), default=0)
        else:
            _gen, seq, marked = known
            for row_seq, uid, state in read(
                    "SELECT seq, uid, state FROM ti_docs WHERE mbox = ? AND seq > ?",
                    (mailbox_id, seq)):
                seq = max(seq, row_seq)
                if state == 1:
                    marked.add(uid)
        if len(self._marked) > 1000:
            self._marked.clear()
        self._marked[mailbox_id] = (gen, seq, marked)
        return marked

    def match(self, mailbox_id: bytes, doc: str, needle: str) -> set[int]:
        """Exactly the indexed UIDs whose document ``doc`` holds ``needle`` (RFC 3501 6.4.4's
        substring test on the case-folded text): a phrase query for a needle of up to
        :data:`PHRASE_TRIGRAMS` trigrams, else a query of at most
        :data:`.postings.MAX_LOOKUP_TRIGRAMS` of its distinct trigrams whose rows are then
        tested with ``in`` -- never work in proportion to the needle's length times the
        text's."""
        if len(needle) < 3:
            raise ValueError("a needle shorter than 3 code points cannot be looked up")
        if doc not in TEXT_DOCS:
            raise ValueError(f"no such text document: {doc!r}")
        query, verify = lookup_query(doc, needle)
        # CROSS JOIN keeps FTS5 first: left to itself the planner walks the mailbox's
        # markers and runs the MATCH once per message (3 s instead of 1 ms on 5,000).
        # The text column is read only for the rows the query and the mailbox keep.
        column = f', ti_fts."{doc}"' if verify else ""
        try:
            cur = self.backend._read(
                f"SELECT d.uid{column} FROM ti_fts CROSS JOIN ti_docs AS d "
                "ON d.doc = ti_fts.rowid WHERE ti_fts MATCH ? AND d.mbox = ?",
                (query, mailbox_id))
            if not verify:
                return {uid for (uid,) in cur}
            return {uid for uid, text in cur if text and needle in text}
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"embedded store: text index: {exc}") from exc


def lookup_query(doc: str, needle: str) -> tuple[str, bool]:
    """The FTS5 MATCH expression that looks ``needle`` up in column ``doc``, and whether its
    rows must be verified: the needle as one phrase (exact) when it has at most
    :data:`PHRASE_TRIGRAMS` trigrams, else the ``AND`` of the trigrams
    :func:`.postings.needle_trigrams` picks (a superset)."""
    if len(needle) - 2 <= PHRASE_TRIGRAMS:
        return "{" + doc + "} : " + _phrase(needle), False
    terms = " AND ".join(_phrase(gram) for gram in needle_trigrams(needle))
    return "{" + doc + "} : (" + terms + ")", True
