"""Expunge, copy and move of sets of messages, and the \\Seen accounting of flag changes, with
intent records for crash recovery.

HBase changes one row atomically, never several, so an operation on a set of messages is made
atomic *as the user sees it* by an intent record (docs/decisions/0003-move-and-expunge.md):

* **expunge**: write the intent; claim each message by check-and-put of its commit record from
  ``C`` to ``D`` (a ``D`` row is invisible at once); uncount them; drop their content
  references; delete the rows; delete the intent.
* **move**: write the intent (source UIDs and the target UIDs allocated for them); claim each
  source message ``C`` -> ``M`` (still visible, but no one else may expunge or move it); count
  them in the target; write and commit the target rows; publish them; uncount and delete the
  source rows; delete the intent.  The content reference passes from the source row to the
  target row, so reference counts do not change.
* **copy**: write the intent (keyed by the target); take the content references and count the
  target; write and commit the target rows; publish them; delete the intent.
* **flag changes** that flip ``\\Seen``: write the intent (the writes); make them; count them.

A claim names the intent that made it.  Counters and references change in *steps*, each with a
marker cell in the row it counts in, changed in the same call (docs/decisions/0004): a step is
never applied twice.  Recovery rolls an intent *forward* to the end state, step by step,
skipping what its markers say is done.  It runs for intents older than ``intent_timeout`` (so
never against an operation still in progress) when the mailbox the intent is keyed by is
opened, and from ``mailadmin fsck --repair``; a lease on the intent keeps two sessions from
rolling it forward at once.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable

import orjson

from . import keys, sortkeys
from .backends.base import Backend, Mutation, decode_counter, encode_counter
from .changelog import ChangeLog
from .content import INFO, ContentStore
from .keys import UUID_LEN
from .mailboxes import MODSEQ, UID, VISIBLE, Mailbox, Mailboxes, step_column
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
    claimed_by,
    owner_of,
    state_of,
    unclaimed,
)
from .schema import INTENTS
from .users import Users

OP = b"i:op"
AT = b"i:at"

# Counting steps of an intent (decision 0004), each with a marker cell in the row it counts in.
COUNT_STEP = "count"      # expunge: the mailbox's counters
REFS_STEP = "refs"        # expunge: each content row's references
TARGET_STEP = "target"    # move: the target's counters
SOURCE_STEP = "source"    # move: the source's counters
STEPS = (COUNT_STEP, TARGET_STEP, SOURCE_STEP)


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
        self.recovered_copies: Callable[[Mailbox, list[int]], None] | None = None
        """Called with the target and the target UIDs of each copy or move a roll forward
        finishes (some may be given up or gone since): the store hands them to the text
        index as after an uncut COPY or MOVE.  Must not raise."""

    # -- intents --------------------------------------------------------------------------------

    def _begin(self, mailbox_id: bytes, op: dict) -> bytes:
        key = keys.intent_key(mailbox_id, keys.new_id())
        self.intents.put(key, {OP: json.dumps(op).encode(),
                               AT: encode_counter(int(self.clock()))})
        return key

    def _end(self, key: bytes, mailbox_ids: Iterable[bytes] = (),
             contents: Iterable[bytes] = (), steps: Iterable[str] = ()) -> None:
        """Delete the intent, then the marker cells of its counting steps (``steps``: those
        named after a message, besides the usual ones).  In that order: a marker outliving
        its intent is inert (fsck sweeps it), an intent outliving its markers would count
        its steps again."""
        # Intent keys and marker names are used once: retire, no settle wait over HBase.
        self.intents.retire([Mutation(key, delete_row=True)])
        steps = list(steps)
        markers = [step_column(b"c", key, s) for s in (*STEPS, *steps)]
        self.boxes.rows.retire([Mutation(m, deletes=markers) for m in set(mailbox_ids)])
        self.content.forget_steps(sorted(set(contents)),
                                  [step_column(b"r", key, s) for s in (REFS_STEP, *steps)])

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
                STATE, claimed_by(v.state_raw, DELETING, intent[UUID_LEN:]))]
            self._remove(mailbox, intent, claimed)
        self._end(intent, [mailbox.id], [v.record.content for v in claimed])
        return [v.uid for v in claimed]

    def _remove(self, mailbox: Mailbox, intent: bytes, views: list[MessageView],
                counted: bool = False) -> None:
        """Uncount, drop the references of, then delete claimed (``D``) rows.

        The counters and each content row's references change once per intent whatever
        crashes (marker cells, decision 0004).  Both steps come before the rows go, while the
        rows still say what to uncount: a ``D`` row is invisible already and never comes back,
        and released content stays readable for a grace period (decision 0011).
        ``counted``: the counting step is known to be done (a roll forward read its marker).
        """
        if not views:
            return
        # No MODSEQ taken here: every caller runs inside a change-log recording that took one
        # with its change number.
        if not counted:
            self.boxes.count_once(mailbox.id, step_column(b"c", intent, COUNT_STEP),
                                  messages=-len(views), size=-sum(v.record.size for v in views),
                                  unseen=-sum(1 for v in views if not v.flags.seen))
        self.content.decref_once(Counter(v.record.content for v in views),
                                 step_column(b"r", intent, REFS_STEP))
        self.messages.table.retire(   # UIDs are never reused
            [Mutation(keys.message_key(mailbox.id, v.uid), delete_row=True) for v in views])

    # -- flag changes (the STORE side is Messages.store_flags) -----------------------------------

    def begin_flags(self, mailbox_id: bytes, flips: dict[int, tuple[Flags, int]]) -> bytes:
        """Record the flag writes of a STORE that flip \\Seen before they are made: (UID, the
        flags cell it will hold, its change to the unseen count)."""
        return self._begin(mailbox_id, _flags_op(flips))

    def note_flags(self, key: bytes, flips: dict[int, tuple[Flags, int]]) -> None:
        """Replace the writes recorded (a retry after a concurrent change decided anew)."""
        self.intents.put(key, {OP: json.dumps(_flags_op(flips)).encode()})

    def end_flags(self, mailbox_id: bytes, key: bytes, unseen: int) -> None:
        """Count the writes that were made, once (the intent's marker), and end the intent."""
        self.boxes.count_once(mailbox_id, step_column(b"c", key, COUNT_STEP), unseen=unseen)
        self._end(key, [mailbox_id])

    def _recover_flags(self, mailbox: Mailbox, intent: bytes, op: dict) -> None:
        """Count the recorded writes that were made: a flags cell that still holds the value
        a write would have put (its MODSEQ is the write's own) was put by it.  A write made
        and then changed again by another session before this roll forward cannot be told
        from one never made; it is taken as never made (decision 0004)."""
        step = step_column(b"c", intent, COUNT_STEP)
        if self.boxes.steps_done(mailbox.id, [step]):
            return
        writes = {uid: (bytes.fromhex(cell), delta) for uid, cell, delta in op["writes"]}
        rows = self.messages.table.rows([keys.message_key(mailbox.id, u) for u in writes],
                                        [FLAGS])
        unseen = sum(writes[keys.message_key_uid(k)][1] for k, r in rows
                     if r.get(FLAGS) == writes[keys.message_key_uid(k)][0])
        self.boxes.count_once(mailbox.id, step, unseen=unseen)

    # -- copy -----------------------------------------------------------------------------------

    def copy(self, source: Mailbox, uids: Iterable[int], target: Mailbox
             ) -> list[tuple[int, int]]:
        """Copy messages (RFC 3501 6.4.7); returns (source UID, target UID) pairs.

        Messages expunged meanwhile are skipped.  Quota is checked by the caller.  An intent
        keyed by the target is written before anything else, and the references and the
        target's counters change once each (marker cells), so a copy cut short is rolled
        forward exactly when the target is next opened.
        """
        views = self.messages.get(source.id, sorted(set(uids)), None)
        # Content whose last message went meanwhile is being freed (or gone): skip those.
        live = {cid for cid, _ in self.content.table.rows(
            list({v.record.content for v in views}), [INFO])}
        views = [v for v in views if v.record.content in live]
        if not views:
            return []
        count = len(views)
        last, top_modseq = self._allocate(target, count)
        pairs = [[v.uid, last - count + 1 + i, v.record.content.hex(), v.record.size,
                  0 if v.flags.seen else 1] for i, v in enumerate(views)]
        op = {"op": "copy", "source": source.id.hex(), "pairs": pairs}
        intent = self._begin(target.id, op)
        self._copy_counts(target, intent, pairs)
        # A copy whose planned UID is given up meanwhile goes to a fresh UID, named in the
        # intent first, as a move's (decision 0003): else a roll forward wrote it again.
        rename = self._renamer(intent, op)
        done = [(v.uid, self._place(target, v, uid, top_modseq - count + 1 + i, rename))
                for i, (v, (_, uid, *_rest)) in enumerate(zip(views, pairs, strict=True))]
        self.messages.publish(target.id, last - count + 1, last)
        top = max(uid for _, uid in done)
        if top > last:
            self.messages.advance(target.id, top)
        self._end(intent, [target.id], [bytes.fromhex(p[2]) for p in pairs])
        return done

    def _copy_counts(self, target: Mailbox, intent: bytes, pairs: list[list],
                     recovering: bool = False) -> None:
        """Take the copies' content references and count them in the target, each once."""
        self.content.incref_once(Counter(bytes.fromhex(p[2]) for p in pairs),
                                 step_column(b"r", intent, REFS_STEP))
        step = step_column(b"c", intent, COUNT_STEP)
        if recovering and self.boxes.steps_done(target.id, [step]):
            return
        self.boxes.count_once(target.id, step, messages=len(pairs),
                              size=sum(p[3] for p in pairs), unseen=sum(p[4] for p in pairs))

    def _recover_copy(self, target: Mailbox, intent: bytes, op: dict) -> set[bytes]:
        """Finish a copy: references and counts (once), then every copy not yet written
        whose source is still there; one whose source went meanwhile is given up, and its
        reference and counts given back (once: a marker per target UID).  Returns the
        contents whose marker cells to remove."""
        pairs = op["pairs"]
        rename = self._renamer(intent, op)
        self._copy_counts(target, intent, pairs, recovering=True)
        table = self.messages.table
        source = self.boxes.load(bytes.fromhex(op["source"]))
        src_rows = dict(table.rows([keys.message_key(source.id, p[0]) for p in pairs])
                        ) if source is not None else {}
        # The watermark before the target rows, as in a move's roll forward.
        published = decode_counter(self.boxes.rows.row(target.id, [VISIBLE]).get(VISIBLE))
        dst_keys = [keys.message_key(target.id, p[1]) for p in pairs]
        dst_states = {k: state_of(r.get(STATE)) for k, r in table.rows(dst_keys, [STATE])}
        top = max(p[1] for p in pairs)
        for (src_uid, dst_uid, content, size, unseen), dst_key in zip(pairs, dst_keys,
                                                                      strict=True):
            dst_state = dst_states.get(dst_key)
            if dst_state not in (None, ABANDONED) or (dst_state is None and
                                                        dst_uid <= published):
                continue  # written (and perhaps expunged since by a user, who uncounted it)
            row = src_rows.get(keys.message_key(source.id, src_uid)) if source else None
            if row is not None and state_of(row.get(STATE)) in (COMMITTED, MOVING):
                if dst_state == ABANDONED:
                    old = dst_uid
                    dst_uid, modseq = self._allocate(target, 1)
                    rename(old, dst_uid)
                else:
                    modseq = self.boxes.rows.increment(target.id, MODSEQ, 1)
                view = _view(keys.message_key(source.id, src_uid), row[STATE], row)
                top = max(top, self._place(target, view, dst_uid, modseq, rename))
                continue
            if dst_state is None:
                table.check_and_put(dst_key, STATE, None, STATE, ABANDONED)
            step = f"gave-up-{dst_uid}"
            self.content.decref_once({bytes.fromhex(content): 1},
                                     step_column(b"r", intent, step))
            self.boxes.count_once(target.id, step_column(b"c", intent, step), messages=-1,
                                  size=-size, unseen=-unseen)
        self.messages.advance(target.id, top)
        return {bytes.fromhex(p[2]) for p in pairs}

    def _place(self, target: Mailbox, view: MessageView, uid: int, modseq: int,
               renamed=None) -> int:
        """Write and commit one copy of ``view`` as ``uid`` (or a fresh UID if it was given up).

        ``renamed(old, new)``, if given, is called with a fresh UID *before* anything is written
        there, so that the intent names the UID its copy may be at (a roll forward then finds
        that copy instead of writing another: decision 0003)."""
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
            old = uid
            uid, modseq = self._allocate(target, 1)
            if renamed is not None:
                renamed(old, uid)

    def _renamer(self, intent: bytes, op: dict):
        """A ``renamed`` callback for :meth:`_place` that rewrites the target UID of a move
        or copy intent's pairs (``[source UID, target UID, ...]``)."""
        def renamed(old: int, new: int) -> None:
            op["pairs"] = [[src, new if dst == old else dst, *rest]
                           for src, dst, *rest in op["pairs"]]
            self.intents.put(intent, {OP: json.dumps(op).encode()})
        return renamed

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
        op = {"op": "move", "target": target.id.hex(), "pairs": planned}
        intent = self._begin(source.id, op)
        with self.changes.recording(source.id, [v.uid for v in views], also={MODSEQ: 1}):
            moved = self._move_claimed(source, target, intent, views, planned, last,
                                       top_modseq, self._renamer(intent, op))
        self._end(intent, [source.id, target.id])
        return [(v.uid, uid) for v, uid in moved]

    def _move_claimed(self, source: Mailbox, target: Mailbox, intent: bytes,
                      views: list[MessageView], planned: list[tuple[int, int]], last: int,
                      top_modseq: int, renamed=None) -> list[tuple[MessageView, int]]:
        count = len(views)
        claimed, given_up = [], []
        for view, (_, uid) in zip(views, planned, strict=True):
            key = keys.message_key(source.id, view.uid)
            state = claimed_by(view.state_raw, MOVING, intent[UUID_LEN:])
            if self.messages.table.check_and_put(key, STATE, view.state_raw, STATE, state):
                view.state_raw = state
                claimed.append((view, uid))
            else:
                given_up.append(uid)  # expunged or moved by someone else meanwhile
        # The target counts the claimed messages before any is written there, as an append
        # counts its message before the commit: a copy the user sees (and may expunge) in the
        # target is always one the target has counted.
        self._count_target(target, intent, [v for v, _ in claimed])
        moved = [(view, self._place(target, view, uid, top_modseq - count + 1 + i, renamed))
                 for i, (view, uid) in enumerate(claimed)]
        for uid in given_up:
            self.messages.table.check_and_put(keys.message_key(target.id, uid), STATE, None,
                                              STATE, ABANDONED)
        self._finish_move(source, target, intent, moved, last - count + 1, last)
        return moved

    def _count_target(self, target: Mailbox, intent: bytes, views: list[MessageView]) -> None:
        self.boxes.count_once(target.id, step_column(b"c", intent, TARGET_STEP),
                              messages=len(views), size=sum(v.record.size for v in views),
                              unseen=sum(1 for v in views if not v.flags.seen))

    def _finish_move(self, source: Mailbox, target: Mailbox, intent: bytes,
                     moved: list[tuple[MessageView, int]], first: int, last: int) -> None:
        """Publish the target rows, uncount the sources, delete them.  The content references
        travel with the messages: no reference count changes."""
        self.messages.publish(target.id, first, last)
        top = max((uid for _, uid in moved), default=last)
        if top > last:
            self.messages.advance(target.id, top)
        views = [v for v, _ in moved]
        self._delete_sources(source, intent, views)

    def _delete_sources(self, source: Mailbox, intent: bytes, views: list[MessageView],
                        counted: bool = False) -> None:
        """Uncount (once per intent: its marker) and delete moved sources, still ``M``."""
        if not views:
            return
        if not counted:
            self.boxes.count_once(source.id, step_column(b"c", intent, SOURCE_STEP),
                                  messages=-len(views), size=-sum(v.record.size for v in views),
                                  unseen=-sum(1 for v in views if not v.flags.seen))
        # No MODSEQ taken here: the move's change-log recording took one with its change
        # number (docs/decisions/0014).
        self.messages.table.retire(   # UIDs are never reused
            [Mutation(keys.message_key(source.id, v.uid), delete_row=True) for v in views])

    # -- recovery -------------------------------------------------------------------------------

    def recover(self, mailbox_id: bytes, max_age: float | None = None) -> int:
        """Roll forward intents of a mailbox older than ``max_age`` seconds; return how many.

        Each intent is first leased (its start time moved to now by check-and-put), so of two
        sessions opening the mailbox at once one rolls it forward and the other leaves it; a
        roll forward that dies is taken up again ``max_age`` later.  Every step is idempotent:
        rows are changed by check-and-put, counters and references with the marker cells of
        their step (decision 0004), so rolling forward twice changes nothing more.
        """
        max_age = self.intent_timeout if max_age is None else max_age
        source = self.boxes.load(mailbox_id)
        done = 0
        for key, op, started in self.pending(mailbox_id):
            now = int(self.clock())
            if now - started < max_age:
                continue
            if not self.intents.check_and_put(key, AT, encode_counter(started), AT,
                                              encode_counter(max(now, started + 1))):
                continue  # leased by another session meanwhile
            rows: set[bytes] = {mailbox_id}
            contents: set[bytes] = set()
            copied_to: Mailbox | None = None
            if source is not None and op["op"] == "flags":
                self._recover_flags(source, key, op)
            elif source is not None and op["op"] == "copy":
                contents = self._recover_copy(source, key, op)
                copied_to = source   # a copy's intent is its target's
            elif source is not None:
                uids = op["uids"] if op["op"] == "expunge" else [p[0] for p in op["pairs"]]
                with self.changes.recording(mailbox_id, uids, also={MODSEQ: 1}):
                    if op["op"] == "expunge":
                        contents = self._recover_expunge(source, key, op["uids"])
                    elif op["op"] == "move":
                        rows.add(bytes.fromhex(op["target"]))
                        copied_to = self._recover_move(source, key, op)
            if copied_to is not None and self.recovered_copies is not None:
                # Before the intent ends: a crash here rolls forward (and hands over) again.
                # Every target UID of the intent (renamed ones as renamed): a copy written
                # before the crash was not handed over either, its COPY or MOVE having died
                # before it got there; a UID given up has no message, which the text index
                # passes over (the indexer drops its queue cell).
                self.recovered_copies(copied_to, [p[1] for p in op["pairs"]])
            self._end(key, rows, contents, [f"gave-up-{p[1]}" for p in op["pairs"]]
                      if op["op"] == "copy" else ())
            done += 1
        return done

    def _recover_expunge(self, mailbox: Mailbox, intent: bytes, uids: list[int]) -> set[bytes]:
        """Finish an expunge; returns the contents whose references it dropped."""
        step = step_column(b"c", intent, COUNT_STEP)
        counted = bool(self.boxes.steps_done(mailbox.id, [step]))
        rows = self.messages.table.rows([keys.message_key(mailbox.id, u) for u in uids], SUMMARY)
        claimed = []
        for key, row in rows:
            raw = row.get(STATE)
            # Claim the rest of the set only while it is not counted yet: once it is, the
            # owner had claimed all it could, and what it counted is exactly the D rows.
            if not counted and state_of(raw) == COMMITTED:
                claim = claimed_by(raw, DELETING, intent[UUID_LEN:])
                if self.messages.table.check_and_put(key, STATE, raw, STATE, claim):
                    raw = claim
            if _ours(raw, DELETING, intent):
                claimed.append(_view(key, raw, row))
        self._remove(mailbox, intent, claimed, counted=counted)
        return {v.record.content for v in claimed}

    def _recover_move(self, source: Mailbox, intent: bytes, op: dict) -> Mailbox | None:
        """Finish a move, or undo it when its target is gone; return the target the copies
        are in (None when undone)."""
        target = self.boxes.load(bytes.fromhex(op["target"]))
        table = self.messages.table
        source_step = step_column(b"c", intent, SOURCE_STEP)
        sources_counted = bool(self.boxes.steps_done(source.id, [source_step]))
        src_keys = [keys.message_key(source.id, s) for s, _ in op["pairs"]]
        found = dict(table.rows(src_keys))
        claimed_rows = {k: r for k, r in found.items() if _ours(r.get(STATE), MOVING, intent)}
        if target is None or sources_counted:
            # The target was deleted after the crash: the move cannot finish, so it is undone
            # (claimed messages go back to committed in the source, none is lost).  Or the
            # sources are already uncounted: every copy was written before that, and only
            # the deletion of the sources is left.
            if sources_counted:
                self._delete_sources(source, intent, [_view(k, r[STATE], r)
                                                      for k, r in claimed_rows.items()],
                                     counted=True)
                return target
            for key, row in claimed_rows.items():
                table.check_and_put(key, STATE, row[STATE], STATE, unclaimed(row[STATE]))
            return None
        target_step = step_column(b"c", intent, TARGET_STEP)
        target_counted = bool(self.boxes.steps_done(target.id, [target_step]))
        # Read before the target rows: a target UID at or below it was settled (committed or
        # abandoned) by then, so one without a row now was committed, shown, and removed since.
        published = decode_counter(self.boxes.rows.row(target.id, [VISIBLE]).get(VISIBLE))
        dst_keys = [keys.message_key(target.id, d) for _, d in op["pairs"]]
        dst_states = {k: state_of(r.get(STATE)) for k, r in table.rows(dst_keys, [STATE])}
        if not target_counted:
            # Nothing was written to the target yet (that comes after counting it): claim
            # the rest of the set, then count what is claimed.
            for key in src_keys:
                raw = found.get(key, {}).get(STATE)
                claim = claimed_by(raw, MOVING, intent[UUID_LEN:]) if raw else b""
                if state_of(raw) == COMMITTED and table.check_and_put(
                        key, STATE, raw, STATE, claim):
                    found[key][STATE] = claim
                    claimed_rows[key] = found[key]
            self._count_target(target, intent, [_view(k, r[STATE], r)
                                                for k, r in claimed_rows.items()])
        moved: list[tuple[MessageView, int]] = []
        rename = self._renamer(intent, op)
        for src_key, dst_key, (_src_uid, dst_uid) in zip(src_keys, dst_keys, list(op["pairs"]),
                                                         strict=True):
            dst_state = dst_states.get(dst_key)
            row = claimed_rows.get(src_key)
            if row is None:
                if dst_state is None:  # nothing to move: give the target UID up
                    table.check_and_put(dst_key, STATE, None, STATE, ABANDONED)
                continue
            if dst_state is None and dst_uid <= published:
                # The copy was expunged or moved on before this roll forward (clients see both
                # copies until it runs, in one mailbox when moving into the same one).  Writing
                # it again would bring back an expunged UID below UIDNEXT, which a syncing
                # client never looks at again (RFC 3501 2.3.1.1): keep the source copy instead.
                # The target counted it, and its removal uncounted it there.
                table.check_and_put(src_key, STATE, row[STATE], STATE, unclaimed(row[STATE]))
                continue
            view = _view(src_key, row[STATE], row)
            if dst_state in (COMMITTED, MOVING):
                moved.append((view, dst_uid))   # written (and counted) before the crash
                continue
            if dst_state == ABANDONED:
                old = dst_uid
                dst_uid, modseq = self._allocate(target, 1)
                rename(old, dst_uid)
            else:
                modseq = self.boxes.rows.increment(target.id, MODSEQ, 1)
            moved.append((view, self._place(target, view, dst_uid, modseq, rename)))
        top = max((uid for _, uid in moved), default=0)
        self.messages.advance(target.id, max(top, *(d for _, d in op["pairs"])))
        self._delete_sources(source, intent, [v for v, _ in moved])
        return target


def _ours(raw: bytes | None, state: bytes, intent: bytes) -> bool:
    """Whether a commit record is in ``state`` claimed by this intent (or by a claim that
    names no intent, from before claims did)."""
    return state_of(raw) == state and owner_of(raw) in (None, intent[UUID_LEN:])


def _flags_op(flips: dict[int, tuple[Flags, int]]) -> dict:
    return {"op": "flags", "writes": [[uid, new.encode().hex(), delta]
                                      for uid, (new, delta) in sorted(flips.items())]}


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
