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
    # within one column's text (and within one of its texts: the separator is in no needle).
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
        if len(needle) < 3:
            raise ValueError("a needle shorter than 3 code points cannot be looked up")
        if doc not in TEXT_DOCS:
            raise ValueError(f"no such text document: {doc!r}")
        try:
            # CROSS JOIN keeps FTS5 first: left to itself the planner walks the mailbox's
            # markers and runs the MATCH once per message (3 s instead of 1 ms on 5,000).
            cur = self.backend._read(
                "SELECT d.uid FROM ti_fts CROSS JOIN ti_docs AS d ON d.doc = ti_fts.rowid "
                "WHERE ti_fts MATCH ? AND d.mbox = ?",
                ("{" + doc + "} : " + _phrase(needle), mailbox_id))
            return {uid for (uid,) in cur}
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"embedded store: text index: {exc}") from exc
