"""The embedded store's text index: SQLite FTS5 with the trigram tokenizer.

Two SQL tables next to the cell tables, in the same database file (so an append's index
write joins the append's transaction when the mail store groups them):

* ``ti_docs (mbox, uid) -> state, doc``: the marker of each message (state 1 indexed, 0 not
  indexable) and the rowid of its FTS5 row.
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
from collections.abc import Collection, Mapping

from ..errors import BackendUnavailable
from .base import TEXT_DOCS, TextIndex

_COLUMNS = ", ".join(f'"{doc}"' for doc in TEXT_DOCS)
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS ti_docs (mbox BLOB NOT NULL, uid INTEGER NOT NULL, "
    "state INTEGER NOT NULL, doc INTEGER, PRIMARY KEY (mbox, uid)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS ti_docs_doc ON ti_docs (doc)",
    f"CREATE VIRTUAL TABLE IF NOT EXISTS ti_fts USING fts5({_COLUMNS}, "
    "tokenize = 'trigram case_sensitive 1')",
)

_INSERT = f"INSERT INTO ti_fts ({_COLUMNS}) VALUES ({', '.join('?' * len(TEXT_DOCS))})"


def _phrase(needle: str) -> str:
    """An FTS5 string: the needle in double quotes, a double quote doubled."""
    return '"' + needle.replace('"', '""') + '"'


class Fts5TextIndex(TextIndex):
    # A trigram phrase is the needle's trigrams at consecutive positions: the needle itself,
    # within one column's text (and within one of its texts: the separator is in no needle).
    exact = True

    def __init__(self, backend):
        self.backend = backend
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
                db.execute("INSERT INTO ti_docs VALUES (?, ?, ?, ?)",
                           (mailbox_id, uid, 1 if docs is not None else 0, rowid))
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"embedded store: text index: {exc}") from exc

    @staticmethod
    def _forget(db, mailbox_id: bytes, uids: Collection[int]) -> None:
        for uid in uids:
            row = db.execute("SELECT doc FROM ti_docs WHERE mbox = ? AND uid = ?",
                             (mailbox_id, uid)).fetchone()
            if row is None:
                continue
            if row[0] is not None:
                db.execute("DELETE FROM ti_fts WHERE rowid = ?", (row[0],))
            db.execute("DELETE FROM ti_docs WHERE mbox = ? AND uid = ?", (mailbox_id, uid))

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
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"embedded store: text index: {exc}") from exc

    def markers(self, mailbox_id: bytes) -> dict[int, bool]:
        cur = self.backend._read("SELECT uid, state FROM ti_docs WHERE mbox = ?", (mailbox_id,))
        return {uid: state == 1 for uid, state in cur}

    def match(self, mailbox_id: bytes, doc: str, needle: str) -> set[int]:
        if len(needle) < 3:
            raise ValueError("a needle shorter than 3 code points cannot be looked up")
        if doc not in TEXT_DOCS:
            raise ValueError(f"no such text document: {doc!r}")
        try:
            cur = self.backend._read(
                "SELECT d.uid FROM ti_fts JOIN ti_docs AS d ON d.doc = ti_fts.rowid "
                "WHERE ti_fts MATCH ? AND d.mbox = ?",
                ("{" + doc + "} : " + _phrase(needle), mailbox_id))
            return {uid for (uid,) in cur}
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"embedded store: text index: {exc}") from exc
