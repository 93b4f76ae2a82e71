"""The SORT and THREAD keys of a mailbox's messages, kept per process.

A message's keys never change (its envelope and header are fixed at append, and a UID is never
reused within a mailbox id), so once read they stay valid for as long as the message exists.
:class:`SortKeyCache` therefore keeps, per mailbox id, the keys of every UID it has read, the
way :mod:`mailstore.index` keeps flags: a SORT or THREAD reads only the UIDs it has not seen
yet -- the new messages since the last command -- and the first one in a process reads the
mailbox once:

* one bounded scan of the commit record and ``m:sk`` cells when many UIDs are missing (a
  multi-get in batches when few are);
* for rows written before ``m:sk`` existed, the keys are computed from their ``m:env`` and
  ``m:hdr`` cells (one multi-get of those rows), kept in the cache, not written back: the rows
  of committed messages are only ever written by their own append, and the cost is paid once
  per process.

Entries for expunged UIDs are dropped when they are a quarter of what the cache holds for a
mailbox (the caller says which UIDs are present).  The cache holds ``max_mailboxes``
mailboxes (least recently used goes first).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import NamedTuple

from . import keys, sortkeys
from .messages import ENVELOPE, HEADER, SORTKEYS, STATE, Messages
from .records import VISIBLE_STATES, MessageRecord
from .sortkeys import SortKeys

SCAN_ABOVE = 2000
"""Above this many missing UIDs, one bounded scan of their range beats multi-gets."""
GET_BATCH = 500


class MessageKeys(NamedTuple):
    """A message's keys with the two facts from its commit record that SORT uses."""

    arrival: float   # INTERNALDATE, seconds since the epoch
    size: int        # RFC822.SIZE
    keys: SortKeys


class SortKeyCache:
    def __init__(self, messages: Messages, max_mailboxes: int = 8):
        self.messages = messages
        self.max_mailboxes = max_mailboxes
        self._boxes: OrderedDict[bytes, dict[int, MessageKeys]] = OrderedDict()
        self._lock = threading.Lock()
        self.rows_read = 0  # for tests and the bench: how many rows were read in total

    def keys(self, mailbox_id: bytes, uids: Sequence[int],
             present: Sequence[int] | None = None) -> dict[int, MessageKeys]:
        """The keys of the messages among ``uids`` (ascending) that still exist; a UID that is
        gone (expunged, or never visible) is left out.  ``present``, the mailbox's UIDs as
        the caller knows them (a session's list), lets entries of expunged messages go once
        they are a quarter of what is held."""
        with self._lock:
            held = self._boxes.get(mailbox_id)
            if held is None:
                held = self._boxes[mailbox_id] = {}
            self._boxes.move_to_end(mailbox_id)
            while len(self._boxes) > self.max_mailboxes:
                self._boxes.popitem(last=False)
            missing = [u for u in uids if u not in held]
        if missing:
            found = self._read(mailbox_id, missing)
            with self._lock:
                held.update(found)
        with self._lock:
            if present is not None and len(held) > len(present) * 5 // 4 + 1000:
                keep = set(present)
                for uid in [u for u in held if u not in keep]:
                    del held[uid]
            get = held.get
            return {u: k for u in uids if (k := get(u)) is not None}

    def forget(self, mailbox_id: bytes) -> None:
        with self._lock:
            self._boxes.pop(mailbox_id, None)

    # -- reading ----------------------------------------------------------------------------

    def _read(self, mailbox_id: bytes, uids: list[int]) -> dict[int, MessageKeys]:
        table = self.messages.table
        columns = [STATE, SORTKEYS]
        if len(uids) > SCAN_ABOVE:
            start, stop = keys.message_range(mailbox_id, uids[0], uids[-1])
            wanted = set(uids)
            rows = ((k, r) for k, r in table.scan(start=start, stop=stop, columns=columns,
                                                  reverse=True, batch_size=5000)
                    if keys.message_key_uid(k) in wanted)
        else:
            rows = (pair for i in range(0, len(uids), GET_BATCH)
                    for pair in table.rows([keys.message_key(mailbox_id, u)
                                            for u in uids[i:i + GET_BATCH]], columns))
        out: dict[int, MessageKeys] = {}
        legacy: dict[int, MessageRecord] = {}
        for key, row in rows:
            self.rows_read += 1
            raw = row.get(STATE)
            if not raw or raw[:1] not in VISIBLE_STATES:
                continue
            uid = keys.message_key_uid(key)
            record = MessageRecord.decode(raw)
            cell = row.get(SORTKEYS)
            found = sortkeys.decode(cell) if cell else None
            if found is None:
                legacy[uid] = record
            else:
                out[uid] = MessageKeys(record.internal_date, record.size, found)
        if legacy:
            out.update(self._compute_legacy(mailbox_id, legacy))
        return out

    def _compute_legacy(self, mailbox_id: bytes, records: dict[int, MessageRecord]
                        ) -> dict[int, MessageKeys]:
        """Keys of rows without ``m:sk``, from their envelope and header cells."""
        import orjson

        out = {}
        uids = sorted(records)
        for i in range(0, len(uids), GET_BATCH):
            batch = uids[i:i + GET_BATCH]
            for key, row in self.messages.table.rows(
                    [keys.message_key(mailbox_id, u) for u in batch], [ENVELOPE, HEADER]):
                uid = keys.message_key_uid(key)
                try:
                    envelope = orjson.loads(row[ENVELOPE]) if ENVELOPE in row else None
                except orjson.JSONDecodeError:
                    envelope = None
                record = records[uid]
                out[uid] = MessageKeys(record.internal_date, record.size,
                                       sortkeys.compute(envelope, row.get(HEADER)))
        return out


__all__ = ["MessageKeys", "SortKeyCache"]
