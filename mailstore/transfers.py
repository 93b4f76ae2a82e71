"""Expunge, copy and move of sets of messages, with intent records for crash recovery.

HBase changes one row atomically, never several, so an operation on a set of messages is made
atomic *as the user sees it* by an intent record (docs/decisions/0003-move-and-expunge.md):

* **expunge**: write the intent; claim each message by check-and-put of its commit record from
  ``C`` to ``D`` (a ``D`` row is invisible at once); delete the rows; fix counters; drop content
  references; delete the intent.
* **move**: write the intent (source UIDs and the target UIDs allocated for them); claim each
  source message ``C`` -> ``M`` (still visible, but no one else may expunge or move it); write and
  commit the target rows; publish them; delete the source rows; delete the intent.  The content
  reference passes from the source row to the target row, so reference counts do not change.
* **copy**: takes a new content reference per message first (refused if the content is being
  freed), then writes and commits the target rows.  No intent: a crash leaves at worst a
  reference too many, which fsck repairs; it never leaves a message half-copied.

Recovery rolls an intent *forward* to the end state.  It runs for intents older than
``intent_timeout`` (so never against an operation still in progress) when a mailbox is opened,
and from ``mailadmin fsck --repair``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable

import orjson

from . import keys, sortkeys
from .backends.base import Backend, Mutation, decode_counter, encode_counter
from .changelog import ChangeLog
from .content import ContentStore
from .mailboxes import MODSEQ, UID, VISIBLE, Mailbox, Mailboxes
from .messages import (
    BODY,
    ENVELOPE,
    FLAGS,
    HEADER,
    PENDING_CELLS,
    PREVIEW,
    SORTKEYS,
    STATE,
    SUMMARY,
    Messages,
    MessageView,
)
from .preview import decode_cell, encode_cell
from .records import (
    ABANDONED,
    COMMITTED,
    DELETING,
    MOVING,
    Flags,
    MessageRecord,
    state_of,
    with_state,
)
from .schema import INTENTS
from .users import Users

OP = b"i:op"
AT = b"i:at"


class Transfers:
    def __init__(self, backend: Backend, messages: Messages, mailboxes: Mailboxes,
                 content: ContentStore, users: Users, clock: Callable[[], float],
                 intent_timeout: float = 60.0, changes: ChangeLog | None = None):
        self.intents = backend.table(INTENTS.name)
        self.messages = messages
        self.boxes = mailboxes
        self.content = content
        self.users = users
        self.clock = clock
        self.intent_timeout = intent_timeout
        self.changes = changes if changes is not None else ChangeLog(backend, clock)

    # -- intents --------------------------------------------------------------------------------

    def _begin(self, mailbox_id: bytes, op: dict) -> bytes:
        key = keys.intent_key(mailbox_id, keys.new_id())
        self.intents.put(key, {OP: json.dumps(op).encode(),
                               AT: encode_counter(int(self.clock()))})
        return key

    def _end(self, key: bytes) -> None:
        self.intents.delete(key)

    def pending(self, mailbox_id: bytes) -> list[tuple[bytes, dict, int]]:
        """Intents recorded against a mailbox: (key, operation, start time)."""
        return [(k, json.loads(r[OP]), decode_counter(r.get(AT)))
                for k, r in self.intents.scan(prefix=mailbox_id) if OP in r]

    # -- expunge --------------------------------------------------------------------------------

    def expunge(self, mailbox: Mailbox, uids: Iterable[int],
                only_deleted: bool = False) -> list[int]:
        """Remove messages for good (RFC 3501 6.4.3); returns the UIDs removed, ascending.
        With ``only_deleted``, only those of ``uids`` that have ``\\Deleted`` as read here."""
        views = [v for v in self.messages.get(mailbox.id, sorted(set(uids)), SUMMARY)
                 if state_of(v.state_raw) == COMMITTED
                 and (not only_deleted or "\\Deleted" in v.flags.names)]
        if not views:
            return []
        intent = self._begin(mailbox.id, {"op": "expunge", "uids": [v.uid for v in views]})
        # The expunge's MODSEQ comes with its change number and is kept in its log entry:
        # QRESYNC answers VANISHED from it (RFC 7162 3.2.5, docs/decisions/0014).
        with self.changes.recording(mailbox.id, [v.uid for v in views], also={MODSEQ: 1}):
            claimed = [v for v in views if self.messages.table.check_and_put(
                keys.message_key(mailbox.id, v.uid), STATE, v.state_raw,
                STATE, with_state(v.state_raw, DELETING))]
            self._remove(mailbox, claimed)
        self._end(intent)
        return [v.uid for v in claimed]

    def _remove(self, mailbox: Mailbox, views: list[MessageView], drop_refs: bool = True) -> None:
        """Delete claimed rows, then fix counters, then drop content references.

        In that order: a crash leaves counters or references too high (fsck repairs), never a
        message whose content is gone.
        """
        if not views:
            return
        # No MODSEQ taken here: every caller runs inside a change-log recording that took one
        # with its change number.
        self.messages.table.mutate_rows(
            [Mutation(keys.message_key(mailbox.id, v.uid), delete_row=True) for v in views])
        size = sum(v.record.size for v in views)
        self.boxes.add_counts(mailbox.id, messages=-len(views), size=-size,
                              unseen=-sum(1 for v in views if not v.flags.seen))
        if drop_refs:
            # Released content stays readable for a grace period: a session that read one of
            # these rows a moment ago may be reading its content now (docs/decisions/0011).
            self.content.decref_many(Counter(v.record.content for v in views))

    # -- copy -----------------------------------------------------------------------------------

    def copy(self, source: Mailbox, uids: Iterable[int], target: Mailbox
             ) -> list[tuple[int, int]]:
        """Copy messages (RFC 3501 6.4.7); returns (source UID, target UID) pairs.

        Messages expunged meanwhile are skipped.  Quota is checked by the caller.
        """
        views = self.messages.get(source.id, sorted(set(uids)), None)
        views = [v for v in views if self.content.incref(v.record.content)]
        if not views:
            return []
        return self._insert(target, views)

    def _insert(self, target: Mailbox, views: list[MessageView]) -> list[tuple[int, int]]:
        """Write, commit and publish target rows for ``views``; return (old, new) UID pairs."""
        count = len(views)
        last, top_modseq = self._allocate(target, count)
        pairs = []
        for i, view in enumerate(views):
            uid, modseq = last - count + 1 + i, top_modseq - count + 1 + i
            self._place(target, view, uid, modseq)
            pairs.append((view.uid, uid))
        # A UID given up because we stalled was replaced in _place; publish the whole block.
        unseen = sum(1 for v in views if not v.flags.seen)
        self.boxes.add_counts(target.id, messages=count, unseen=unseen,
                              size=sum(v.record.size for v in views))
        self.messages.publish(target.id, last - count + 1, last)
        replaced = [p for p in pairs if p[1] > last]
        if replaced:
            self.messages.advance(target.id, max(p[1] for p in replaced))
        return pairs

    def _place(self, target: Mailbox, view: MessageView, uid: int, modseq: int) -> int:
        """Write and commit one copy of ``view`` as ``uid`` (or a fresh UID if it was given up)."""
        while True:
            key = keys.message_key(target.id, uid)
            cells = {FLAGS: Flags(modseq, view.flags.names).encode()}
            if view.envelope is not None:
                cells[ENVELOPE] = orjson.dumps(view.envelope)
            if view.body is not None:
                cells[BODY] = orjson.dumps(view.body)
            if view.header is not None:
                cells[HEADER] = view.header
            if view.preview is not None:
                cells[PREVIEW] = encode_cell(view.preview)
            if view.envelope is not None:
                # The copy's SORT/THREAD keys, as its append would have stored them.
                cells[SORTKEYS] = sortkeys.encode(sortkeys.compute(view.envelope, view.header))
            self.messages.table.put(key, cells)
            # RFC 8514: the save date is when the message came into this mailbox, the
            # internal date stays as it was (RFC 3501 6.4.7).
            record = MessageRecord(uid=uid, content=view.record.content, size=view.record.size,
                                   internal_date=view.record.internal_date, modseq=modseq,
                                   header_size=view.record.header_size, lines=view.record.lines,
                                   chunk_size=view.record.chunk_size, save_date=self.clock())
            if self.messages.table.check_and_put(key, STATE, None, STATE, record.encode()):
                return uid
            self.messages.table.delete(key, list(PENDING_CELLS))
            uid, modseq = self._allocate(target, 1)

    def _allocate(self, target: Mailbox, count: int) -> tuple[int, int]:
        """The last of ``count`` new UIDs and of their MODSEQs.  The UID first (one step on
        the embedded store, in this order over HBase): while the MODSEQs are not yet
        committed, the UID watermark is behind, which is how readers know a MODSEQ may still
        be in flight (HIGHESTMODSEQ, index.py)."""
        values = self.boxes.rows.increment_many(target.id, {UID: count, MODSEQ: count},
                                                returning=(UID, MODSEQ))
        return values[UID], values[MODSEQ]

    # -- move -----------------------------------------------------------------------------------

    def move(self, source: Mailbox, uids: Iterable[int], target: Mailbox
             ) -> list[tuple[int, int]]:
        """Move messages (RFC 6851): as the user sees it, each is in one place, never both
        once this returns or its recovery has run.  Returns (source UID, target UID) pairs."""
        views = [v for v in self.messages.get(source.id, sorted(set(uids)), None)
                 if state_of(v.state_raw) == COMMITTED]
        if not views:
            return []
        count = len(views)
        last, top_modseq = self._allocate(target, count)
        planned = [(v.uid, last - count + 1 + i) for i, v in enumerate(views)]
        intent = self._begin(source.id, {"op": "move", "target": target.id.hex(),
                                         "pairs": planned})
        with self.changes.recording(source.id, [v.uid for v in views], also={MODSEQ: 1}):
            moved = self._move_claimed(source, target, views, planned, last, top_modseq)
        self._end(intent)
        return [(v.uid, uid) for v, uid in moved]

    def _move_claimed(self, source: Mailbox, target: Mailbox, views: list[MessageView],
                      planned: list[tuple[int, int]], last: int, top_modseq: int
                      ) -> list[tuple[MessageView, int]]:
        count = len(views)
        moved, given_up = [], []
        for view, (_, uid) in zip(views, planned, strict=True):
            key = keys.message_key(source.id, view.uid)
            claimed = with_state(view.state_raw, MOVING)
            if self.messages.table.check_and_put(key, STATE, view.state_raw, STATE, claimed):
                view.state_raw = claimed
                new_uid = self._place(target, view, uid, top_modseq - count + 1 + len(moved))
                moved.append((view, new_uid))
            else:
                given_up.append(uid)  # expunged or moved by someone else meanwhile
        for uid in given_up:
            self.messages.table.check_and_put(keys.message_key(target.id, uid), STATE, None,
                                              STATE, ABANDONED)
        self._finish_move(source, target, moved, last - count + 1, last)
        return moved

    def _finish_move(self, source: Mailbox, target: Mailbox,
                     moved: list[tuple[MessageView, int]], first: int, last: int) -> None:
        views = [v for v, _ in moved]
        unseen = sum(1 for v in views if not v.flags.seen)
        size = sum(v.record.size for v in views)
        self.boxes.add_counts(target.id, messages=len(views), unseen=unseen, size=size)
        self.messages.publish(target.id, first, last)
        top = max((uid for _, uid in moved), default=last)
        if top > last:
            self.messages.advance(target.id, top)
        # The content references travel with the messages: no decref for the source rows.
        self._remove(source, views, drop_refs=False)

    # -- recovery -------------------------------------------------------------------------------

    def recover(self, mailbox_id: bytes, max_age: float | None = None) -> int:
        """Roll forward intents of a mailbox older than ``max_age`` seconds; return how many."""
        max_age = self.intent_timeout if max_age is None else max_age
        source = self.boxes.load(mailbox_id)
        done = 0
        for key, op, started in self.pending(mailbox_id):
            if self.clock() - started < max_age:
                continue
            if source is not None:
                uids = op["uids"] if op["op"] == "expunge" else [p[0] for p in op["pairs"]]
                with self.changes.recording(mailbox_id, uids, also={MODSEQ: 1}):
                    if op["op"] == "expunge":
                        self._recover_expunge(source, op["uids"])
                    elif op["op"] == "move":
                        self._recover_move(source, op)
            self._end(key)
            done += 1
        return done

    def _recover_expunge(self, mailbox: Mailbox, uids: list[int]) -> None:
        rows = self.messages.table.rows([keys.message_key(mailbox.id, u) for u in uids], SUMMARY)
        claimed = []
        for key, row in rows:
            raw = row.get(STATE)
            if state_of(raw) == COMMITTED and self.messages.table.check_and_put(
                    key, STATE, raw, STATE, with_state(raw, DELETING)):
                raw = with_state(raw, DELETING)
            if state_of(raw) == DELETING:
                claimed.append(_view(key, raw, row))
        self._remove(mailbox, claimed)

    def _recover_move(self, source: Mailbox, op: dict) -> None:
        target = self.boxes.load(bytes.fromhex(op["target"]))
        table = self.messages.table
        if target is None:
            # The target was deleted after the crash: the move cannot finish, so it is undone.
            # Messages claimed for it go back to committed in the source, none is lost.
            for src_uid, _dst_uid in op["pairs"]:
                key = keys.message_key(source.id, src_uid)
                raw = table.row(key, [STATE]).get(STATE)
                if state_of(raw) == MOVING:
                    table.check_and_put(key, STATE, raw, STATE, with_state(raw, COMMITTED))
            return
        moved: list[tuple[MessageView, int]] = []
        # Read before the target rows: a target UID at or below it was settled (committed or
        # abandoned) by then, so one without a row now was committed, shown, and removed since.
        published = decode_counter(self.boxes.rows.row(target.id, [VISIBLE]).get(VISIBLE))
        for src_uid, dst_uid in op["pairs"]:
            src_key = keys.message_key(source.id, src_uid)
            src = table.row(src_key)
            raw = src.get(STATE)
            dst_state = state_of(table.row(keys.message_key(target.id, dst_uid),
                                           [STATE]).get(STATE))
            if state_of(raw) == COMMITTED and dst_state is None:
                if table.check_and_put(src_key, STATE, raw, STATE, with_state(raw, MOVING)):
                    raw = with_state(raw, MOVING)
            if state_of(raw) != MOVING:
                if dst_state is None:  # nothing to move: give the target UID up
                    table.check_and_put(keys.message_key(target.id, dst_uid), STATE, None,
                                        STATE, ABANDONED)
                continue
            if dst_state is None and dst_uid <= published:
                # The copy was expunged or moved on before this roll forward (clients see both
                # copies until it runs, in one mailbox when moving into the same one).  Writing
                # it again would bring back an expunged UID below UIDNEXT, which a syncing
                # client never looks at again (RFC 3501 2.3.1.1): keep the source copy instead.
                table.check_and_put(src_key, STATE, raw, STATE, with_state(raw, COMMITTED))
                continue
            view = _view(src_key, raw, src)
            if dst_state in (COMMITTED, MOVING):
                # Copied before the crash; its counters were not yet counted for the target.
                self.boxes.add_counts(target.id, messages=1, size=view.record.size,
                                      unseen=0 if view.flags.seen else 1)
                self._remove(source, [view], drop_refs=False)
                continue
            if dst_state == ABANDONED:
                dst_uid, modseq = self._allocate(target, 1)
            else:
                modseq = self.boxes.rows.increment(target.id, MODSEQ, 1)
            moved.append((view, self._place(target, view, dst_uid, modseq)))
        if moved:
            top = max(uid for _, uid in moved)
            self._finish_move(source, target, moved, top, top)
        self.messages.advance(target.id, max((d for _, d in op["pairs"]), default=0))


def _view(key: bytes, raw: bytes, row: dict[bytes, bytes]) -> MessageView:
    view = MessageView(uid=keys.message_key_uid(key), record=MessageRecord.decode(raw),
                       flags=Flags.decode(row.get(FLAGS)), state_raw=raw)
    if ENVELOPE in row:
        view.envelope = orjson.loads(row[ENVELOPE])
    if BODY in row:
        view.body = orjson.loads(row[BODY])
    view.header = row.get(HEADER)
    view.preview = decode_cell(row.get(PREVIEW))
    return view
