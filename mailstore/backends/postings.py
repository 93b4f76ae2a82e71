"""The text index as trigram posting rows, written with the table operations alone.

This is the HBase backend's text index (any backend that does not override
:meth:`Backend.text_index` gets it).  Layout, in ``JAMES_TEXT_INDEX`` (mailstore/schema.py):

* ``mailbox UUID + doc code + trigram (UTF-8)`` -> one cell ``p:<4-byte UID>`` per message
  whose document contains the trigram (a message indexed alone, :meth:`PostingIndex.put`), or
  one cell ``p:B<4-byte first UID><4-byte CRC-32 of the batch's UIDs>`` per batch of the
  background indexer, holding the 4-byte UIDs of the batch's messages that contain it.  The
  doc code is one byte (1-7, :data:`TEXT_DOCS`'s order), so SUBJECT's postings never make a
  BODY query read more, and every row of a mailbox
  lies under its UUID (drop is one bounded prefix delete).
* ``mailbox UUID + b"\\x00"`` (sorts before every posting row) -> the markers,
  ``p:<4-byte UID>`` = ``b"1"`` indexed or ``b"0"`` not indexable.

A match is the intersection of the rows of a bounded, spread-out subset of the needle's
distinct trigrams (:func:`needle_trigrams`): a superset of the messages that contain it (two
trigrams may sit apart in the text, and the others are not looked at), which the caller
verifies with the scan's substring test (RFC 3501 6.4.4).  Expunged
UIDs lose their marker only: their postings linger, harmless (UIDs are never reused in a
mailbox) until a rebuild drops and rewrites the mailbox's rows.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Mapping

from .base import TEXT_DOCS, TEXT_SEPARATOR, Mutation, Table, TextIndex, delete_rows

_CODES = {doc: bytes([i + 1]) for i, doc in enumerate(TEXT_DOCS)}
_MARKERS = b"\x00"
_FAMILY = b"p"
_BATCH = b"p:B"  # + 8 bytes: 11 bytes long, where a one-message cell is 6


def trigrams(text: str) -> set[str]:
    """Every run of three code points in ``text`` that no needle can hold (none across
    :data:`TEXT_SEPARATOR`, which no needle holds)."""
    # Slices made by map() in C: 2.4x faster than a comprehension over indexes, which was the
    # background indexer's largest cost per message over HBase (profile, bench/RESULTS.md).
    grams = set(map(text.__getitem__, map(slice, range(len(text) - 2), range(3, len(text) + 1))))
    return {g for g in grams if TEXT_SEPARATOR not in g} if TEXT_SEPARATOR in text else grams


MAX_LOOKUP_TRIGRAMS = 16
"""Most trigrams a lookup of one needle reads.  A needle of N code points has N - 2 trigrams;
reading (HBase: one posting row each) and intersecting them all only narrows a set that the
exact substring test verifies anyway, and let a 5,000-character SEARCH string cost 5,000
posting rows.  Sixteen spread over the needle narrow as well in practice."""


def needle_trigrams(needle: str, limit: int = MAX_LOOKUP_TRIGRAMS) -> list[str]:
    """The trigrams of ``needle`` a lookup intersects: its distinct trigrams (none holding
    :data:`TEXT_SEPARATOR`), in order of first occurrence, and if there are more than
    ``limit`` of them, ``limit`` taken evenly from first to last -- so that they cover the
    whole needle (its two ends included).  Every message containing the needle contains
    each of them.  Linear in the needle's length.

    No attempt is made to prefer rare trigrams: neither engine knows a trigram's frequency
    without reading its postings, which is the cost being bounded."""
    grams = [g for g in dict.fromkeys(map(needle.__getitem__,
                                          map(slice, range(len(needle) - 2),
                                              range(3, len(needle) + 1))))
             if TEXT_SEPARATOR not in g]
    if len(grams) <= limit:
        return grams
    if limit == 1:
        return grams[:1]
    last = len(grams) - 1
    return [grams[round(i * last / (limit - 1))] for i in range(limit)]


def _cell(uid: int) -> bytes:
    return b"p:" + uid.to_bytes(4, "big")


def _uid(column: bytes) -> int:
    return int.from_bytes(column[2:], "big")


def _uids(column: bytes, value: bytes) -> list[int]:
    """The UIDs one posting cell holds: ``p:<UID>`` one, ``p:B<first UID><CRC>`` a
    batch's."""
    if len(column) == len(_BATCH) + 8:
        return [int.from_bytes(value[i:i + 4], "big") for i in range(0, len(value), 4)]
    return [_uid(column)]


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

    def put_many(self, mailbox_id: bytes, entries: Mapping[int, Mapping[str, str] | None]
                 ) -> None:
        # One cell per posting row for the whole batch, ``p:B<first UID><CRC>`` holding the UIDs of
        # the batch's messages whose document has the trigram (4 bytes each): the trigrams
        # messages share (most of them, in one language) are one cell, not one per message.
        # Every marker last, in one put.
        postings: dict[bytes, list[int]] = {}
        for uid, docs in sorted(entries.items()):
            for doc, text in (docs or {}).items():
                code = mailbox_id + _CODES[doc]
                for gram in trigrams(text):
                    postings.setdefault(code + gram.encode("utf-8", "surrogatepass"),
                                        []).append(uid)
        if not postings and not entries:
            return
        # Named by the batch's first UID and a checksum of its UIDs: two indexers batching
        # differently (two processes) write two cells, and neither hides the other's UIDs.
        packed = b"".join(uid.to_bytes(4, "big") for uid in sorted(entries))
        batch_cell = _BATCH + packed[:4] + zlib.crc32(packed).to_bytes(4, "big")
        rows = [Mutation(key, {batch_cell: b"".join(u.to_bytes(4, "big") for u in uids)})
                for key, uids in postings.items()]
        for i in range(0, len(rows), 1000):
            self.table.mutate_rows(rows[i:i + 1000])
        if entries:
            self.table.put(mailbox_id + _MARKERS,
                           {_cell(uid): b"1" if docs is not None else b"0"
                            for uid, docs in entries.items()})

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
        """The UIDs in the postings of every trigram :func:`needle_trigrams` picks: at most
        :data:`MAX_LOOKUP_TRIGRAMS` posting rows read, however long the needle (RFC 3501
        6.4.4's substring test, run by the caller on each, decides)."""
        grams = needle_trigrams(needle)
        if not grams:
            raise ValueError("a needle shorter than 3 code points cannot be looked up")
        code = mailbox_id + _CODES[doc]
        keys = [code + gram.encode("utf-8", "surrogatepass") for gram in grams]
        found = self.table.rows(keys, [_FAMILY])
        if len(found) < len(keys):
            return set()  # a trigram no message has
        # Smallest posting first: the intersection never grows.
        posting = sorted(({uid for col, val in row.items() for uid in _uids(col, val)}
                          for _key, row in found), key=len)
        out = posting[0]
        for uids in posting[1:]:
            out.intersection_update(uids)
            if not out:
                break
        return out
