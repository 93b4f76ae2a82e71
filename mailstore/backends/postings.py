"""The text index as trigram posting rows, written with the table operations alone.

This is the HBase backend's text index (any backend that does not override
:meth:`Backend.text_index` gets it).  Layout, in ``JAMES_TEXT_INDEX`` (mailstore/schema.py):

* ``mailbox UUID + doc code + trigram (UTF-8)`` -> one cell ``p:<4-byte UID>`` per message
  whose document contains the trigram.  The doc code is one byte (1-7, :data:`TEXT_DOCS`'s
  order), so SUBJECT's postings never make a BODY query read more, and every row of a mailbox
  lies under its UUID (drop is one bounded prefix delete).
* ``mailbox UUID + b"\\x00"`` (sorts before every posting row) -> the markers,
  ``p:<4-byte UID>`` = ``b"1"`` indexed or ``b"0"`` not indexable.

A match is the intersection of the needle's trigrams' rows: a superset of the messages that
contain it (two trigrams may sit apart in the text), which the caller verifies.  Expunged
UIDs lose their marker only: their postings linger, harmless (UIDs are never reused in a
mailbox) until a rebuild drops and rewrites the mailbox's rows.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

from .base import TEXT_DOCS, TEXT_SEPARATOR, Mutation, Table, TextIndex, delete_rows

_CODES = {doc: bytes([i + 1]) for i, doc in enumerate(TEXT_DOCS)}
_MARKERS = b"\x00"
_FAMILY = b"p"


def trigrams(text: str) -> set[str]:
    """Every run of three code points in ``text`` that no needle can hold (none across
    :data:`TEXT_SEPARATOR`, which no needle holds)."""
    grams = {text[i:i + 3] for i in range(len(text) - 2)}
    return {g for g in grams if TEXT_SEPARATOR not in g} if TEXT_SEPARATOR in text else grams


def _cell(uid: int) -> bytes:
    return b"p:" + uid.to_bytes(4, "big")


def _uid(column: bytes) -> int:
    return int.from_bytes(column[2:], "big")


class PostingIndex(TextIndex):
    def __init__(self, table: Table):
        self.table = table

    def put(self, mailbox_id: bytes, uid: int, docs: Mapping[str, str] | None) -> None:
        cell = _cell(uid)
        if docs:
            rows = []
            for doc, text in docs.items():
                code = mailbox_id + _CODES[doc]
                rows += [Mutation(code + gram.encode("utf-8", "surrogatepass"), {cell: b"\x01"})
                         for gram in trigrams(text)]
            for i in range(0, len(rows), 1000):
                self.table.mutate_rows(rows[i:i + 1000])
        # The marker last: a crash before it leaves the message unmarked, so it is scanned.
        self.table.put(mailbox_id + _MARKERS, {cell: b"1" if docs is not None else b"0"})

    def remove(self, mailbox_id: bytes, uids: Collection[int]) -> None:
        if uids:
            # UIDs are never reused in a mailbox: their marker cells are never put again.
            self.table.retire([Mutation(mailbox_id + _MARKERS,
                                        deletes=[_cell(uid) for uid in uids])])

    def drop(self, mailbox_id: bytes) -> None:
        delete_rows(self.table, prefix=mailbox_id)

    def markers(self, mailbox_id: bytes) -> dict[int, bool]:
        row = self.table.row(mailbox_id + _MARKERS, [_FAMILY])
        return {_uid(col): val == b"1" for col, val in row.items()}

    def match(self, mailbox_id: bytes, doc: str, needle: str) -> set[int]:
        grams = trigrams(needle)
        if not grams:
            raise ValueError("a needle shorter than 3 code points cannot be looked up")
        code = mailbox_id + _CODES[doc]
        keys = [code + gram.encode("utf-8", "surrogatepass") for gram in grams]
        found = self.table.rows(keys, [_FAMILY])
        if len(found) < len(keys):
            return set()  # a trigram no message has
        # Smallest posting first: the intersection never grows.
        posting = sorted((row for _key, row in found), key=len)
        out = {_uid(col) for col in posting[0]}
        for row in posting[1:]:
            out.intersection_update(_uid(col) for col in row)
            if not out:
                break
        return out
