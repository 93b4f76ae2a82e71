"""fsck: check the store's denormalised data against the rows, and repair it.

What is checked (docs/decisions/0004-counters-and-fsck.md):

* unfinished moves, copies, expunges and flag changes (intents): rolled forward (the server
  does so itself on the next open after ``intent_timeout``); marker cells of counting steps
  whose intent is gone: removed by ``--repair``, as routine;
* mailboxes left half-deleted, mailbox rows no index row reaches, stale index rows;
* per mailbox: message, unseen and size counters against the rows; the UID counter against the
  highest UID; the watermark against UIDs left in flight; rows in odd states;
* content: reference counts against the message rows that point to each content row, content
  never finished, content no message refers to (content released by its last expunge and
  waiting out its grace period is not a problem: ``--repair`` deletes it once the period is
  over, as the server's sweep does; docs/decisions/0011);
* import records (``JAMES_IMPORTS``), change-log entries and checkpoints (``JAMES_CHANGES``) and
  annotations (``JAMES_METADATA``) of mailboxes that no longer exist;
* the ACL grant index (``JAMES_ACL_INDEX``) against the mailboxes' ACL cells, both ways
  (docs/decisions/0018-acl.md);
* the text index (docs/decisions/0026): messages without a marker (stored before the index,
  or whose indexing failed or died with its process: SEARCH scans them) are counted and
  indexed by ``--repair``, which deletes their queue cells (``background``); markers of
  messages no longer there are counted and removed.  Not problems: derived data a crash
  may leave behind, never needed for a right answer.
* Sieve scripts (``JAMES_SIEVE_SCRIPTS``, decision 0023): each directory names text cells
  that exist and an active script that exists, text cells no directory names, rows of
  users that are gone; Sieve tracking (``JAMES_SIEVE_TRACKING``, decision 0025): rows of
  users that are gone, and rows past their expiry, which are no problem (they count as
  absent) but are removed by ``--repair``, as the server's sweep does.
* rows of the user-name-keyed tables in another key format than the store's (left by an
  interrupted ``mailadmin migrate-keys``, or written by a server of another format): found,
  not repaired here (``migrate-keys`` finishes the job; docs/decisions/0027).

Counters are repaired by incrementing them by the difference, never by overwriting them, so a
repair racing with live traffic cannot erase a concurrent change.  The content reference check
needs a quiet store to be exact: run ``fsck --repair`` when no delivery is in flight.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from . import keyformat, keys
from .acl import SHARED_OWNER
from .backends.base import Mutation, decode_counter, prefix_stop
from .content import INFO, REFS, STARTED, SWEEP_BATCH
from .errors import InvalidName, NotFound
from .imports import UID_CELL
from .mailboxes import (
    COUNT,
    DELETING,
    LIVE,
    SIZE,
    UID,
    UNSEEN,
    VISIBLE,
    Mailbox,
    step_intent,
)
from .messages import FLAGS, PENDING_CELLS, STATE
from .records import ABANDONED, COMMITTED, MOVING, Flags, MessageRecord, state_of, unclaimed
from .records import DELETING as DELETING_STATE
from .schema import CHANGES, IMPORTS, METADATA
from .store import MailStore, purge_mailbox_messages

UNFINISHED_CONTENT_AGE = 3600
"""Seconds after which content without ``m:info`` is taken as abandoned by a dead writer."""


@dataclass
class Problem:
    kind: str
    where: str
    detail: str
    repaired: bool = False

    def as_dict(self) -> dict:
        return {"kind": self.kind, "where": self.where, "detail": self.detail,
                "repaired": self.repaired}


@dataclass
class Report:
    problems: list[Problem] = field(default_factory=list)
    checked: Counter = field(default_factory=Counter)

    def add(self, kind: str, where: str, detail: str, repaired: bool) -> None:
        self.problems.append(Problem(kind, where, detail, repaired))

    @property
    def ok(self) -> bool:
        return not self.problems


class Fsck:
    def __init__(self, store: MailStore, repair: bool = False, progress=None):
        self.store = store
        self.repair = repair
        self.report = Report()
        self.progress = progress or (lambda text: None)
        self.refs: Counter[bytes] = Counter()
        self.in_flight = False

    def run(self, user: str | None = None) -> Report:
        users = [self.store.users.get(user)] if user else self.store.users.list()
        for account in users:
            self.progress(f"checking user {account.name}")
            self.check_user(account.name)
        if user is None:
            self.check_orphan_mailboxes()
            self.check_content()
            self.check_import_records()
            self.check_change_records()
            self.check_metadata_records()
            self.check_acl_index()
            self.check_sieve()
            self.check_user_key_format()
        return self.report

    # -- users and mailboxes -------------------------------------------------------------------

    def check_user(self, user: str) -> None:
        store = self.store
        self.check_index(user)
        mailboxes = store.mailboxes.list(user)
        # Unfinished moves and expunges first: until they are rolled forward, counters and
        # references are legitimately in between, so they are judged only afterwards.
        in_flight: set[bytes] = set()
        for mailbox in mailboxes:
            pending = store.transfers.pending(mailbox.id)
            if not pending:
                continue
            if self.repair:
                done = store.transfers.recover(mailbox.id, max_age=0)
                self.report.add("intent", f"{user}:{mailbox.name}",
                                f"{done} unfinished move/expunge rolled forward", True)
            else:
                self.report.add("intent", f"{user}:{mailbox.name}", "unfinished move/expunge",
                                False)
                in_flight.add(mailbox.id)
                in_flight.update(bytes.fromhex(op["target"]) for _, op, _ in pending
                                 if op.get("op") == "move")
        self.in_flight = self.in_flight or bool(in_flight)
        for mailbox in store.mailboxes.list(user):
            self.report.checked["mailboxes"] += 1
            self.check_mailbox(user, mailbox, judge_counters=mailbox.id not in in_flight)
            if mailbox.id not in in_flight:
                self.check_text_index(user, mailbox)

    def check_text_index(self, user: str, mailbox: Mailbox) -> None:
        """Index rows missing (unmarked messages) or stale (markers of gone messages).

        Counted, not problems: the index is never needed for a right answer (SEARCH scans
        what it does not cover), and a crash in the middle of an append, a move or an expunge
        leaves exactly these -- as it leaves inert step markers.  ``--repair`` indexes the
        missing messages and removes the stale markers."""
        text = self.store.text
        if not text.enabled:
            return
        uids = self.store.uids(mailbox)
        missing, stale = text.check(mailbox.id, uids)
        self.report.checked["indexed messages"] += len(uids) - len(missing)
        if missing:
            self.report.checked["unindexed messages"] += len(missing)
            if self.repair:
                self.progress(f"indexing {len(missing)} messages of {user}:{mailbox.name}")
                done = text.index_messages(mailbox.id, missing, sync=self.store.backend.sync)
                self.report.checked["messages indexed now"] += done
        if stale:
            self.report.checked["stale index markers"] += len(stale)
            if self.repair:
                text.forget(mailbox.id, stale)

    def check_index(self, user: str) -> None:
        index = self.store.mailboxes.index
        user_keys = self.store.user_keys
        for key, cells in index.scan(prefix=user_keys.user_index_prefix(user)):
            name = user_keys.index_key_name(key)
            row = self.store.mailboxes.rows.row(cells.get(b"i:id", b""), [b"m"])
            if row.get(b"m:state") != LIVE or row.get(b"m:name", b"").decode() != name \
                    or row.get(b"m:owner", b"").decode() != user:
                if self.repair:
                    index.delete(key)
                self.report.add("index", f"{user}:{name}", "index row points nowhere",
                                self.repair)

    def check_mailbox(self, user: str, mailbox: Mailbox,
                      judge_counters: bool = True) -> tuple[int, int]:
        """Check one mailbox's rows and counters; return its (messages, bytes)."""
        store = self.store
        table = store.messages.table
        counters = store.mailboxes.counters(mailbox.id)
        where = f"{user}:{mailbox.name}"
        count = unseen = size = highest = 0
        start, stop = keys.message_range(mailbox.id)
        for key, row in table.scan(start=start, stop=stop, columns=[STATE, FLAGS],
                                   batch_size=2000):
            uid = keys.message_key_uid(key)
            highest = max(highest, uid)
            raw = row.get(STATE)
            state = state_of(raw)
            if state == MOVING and not store.transfers.pending(mailbox.id):
                if self.repair:
                    table.check_and_put(key, STATE, raw, STATE, unclaimed(raw))
                self.report.add("message", f"{where} uid {uid}", "claimed by a move that "
                                "no longer exists", self.repair)
                state = COMMITTED
            if state in (COMMITTED, MOVING):
                record = MessageRecord.decode(raw)
                count += 1
                size += record.size
                unseen += 0 if Flags.decode(row.get(FLAGS)).seen else 1
                self.refs[record.content] += 1
            elif state == ABANDONED:
                full = table.row(key, list(PENDING_CELLS))
                if full:
                    if self.repair:
                        table.delete(key, list(PENDING_CELLS))
                    self.report.add("message", f"{where} uid {uid}",
                                    "abandoned UID still holds cells", self.repair)
            elif state is None and uid <= counters[VISIBLE]:
                if self.repair:
                    table.delete(key)
                self.report.add("message", f"{where} uid {uid}",
                                "uncommitted row below the watermark", self.repair)
            elif state is not None and state not in (COMMITTED, MOVING, ABANDONED):
                # 'D': an expunge died after claiming it; its intent is gone, finish it.
                if self.repair:
                    record = MessageRecord.decode(raw)
                    table.delete(key)
                    store.content.decref(record.content)
                self.report.add("message", f"{where} uid {uid}", "half-expunged message",
                                self.repair)
        self.report.checked["messages"] += count
        if highest > counters[UID]:
            if self.repair:
                store.mailboxes.rows.increment(mailbox.id, UID, highest - counters[UID])
            self.report.add("counter", where, f"uid counter {counters[UID]} below highest "
                            f"uid {highest}", self.repair)
        if counters[VISIBLE] < counters[UID]:
            if self.repair:
                store.messages.advance(mailbox.id, counters[UID])
                # UIDs given up just now may hold what their dead writer had put: strip it.
                start, stop = keys.message_range(mailbox.id, counters[VISIBLE] + 1,
                                                 counters[UID])
                leftovers = [Mutation(k, deletes=list(PENDING_CELLS))
                             for k, row in table.scan(start=start, stop=stop)
                             if row.get(STATE) == ABANDONED and len(row) > 1]
                if leftovers:
                    table.mutate_rows(leftovers)
                # Giving those UIDs up took back what their appends had counted (m:cnt,
                # decision 0004): judge the counters as they are now, not as first read.
                counters = store.mailboxes.counters(mailbox.id)
            self.report.add("counter", where, f"watermark {counters[VISIBLE]} behind "
                            f"allocated uid {counters[UID]}", self.repair)
        if not judge_counters:
            return count, size
        deltas = {}
        for col, actual, label in ((COUNT, count, "messages"), (UNSEEN, unseen, "unseen"),
                                   (SIZE, size, "size")):
            if counters[col] != actual:
                deltas[col] = actual - counters[col]
                self.report.add("counter", where, f"{label} counter {counters[col]}, "
                                f"actual {actual}", self.repair)
        if deltas and self.repair:
            store.mailboxes.rows.increment_many(mailbox.id, deltas)
        return count, size

    def check_orphan_mailboxes(self) -> None:
        """Mailbox rows that are half-deleted or that no index row reaches."""
        store = self.store
        # Counters too: a mailbox row brought back by the increments of an append that raced
        # the mailbox's deletion holds nothing else.
        for mailbox_id, row in store.mailboxes.rows.scan(start=b"\x00" * 16 + b"\x00",
                                                         stop=b"\xff" * 17,
                                                         columns=[b"m", b"c"]):
            if mailbox_id == keys.STORE_ROW:
                continue
            self._stale_markers(store.mailboxes.rows, mailbox_id, row)
            owner = row.get(b"m:owner", b"").decode()
            name = row.get(b"m:name", b"").decode()
            reached = store.mailboxes.index.row(store.user_keys.index_key(owner, name), [b"i:id"]) \
                .get(b"i:id") == mailbox_id if owner and name else False
            if row.get(b"m:state") == LIVE and reached:
                continue
            detail = ("deletion did not finish" if row.get(b"m:state") == DELETING
                      else "mailbox row that no name reaches")
            if not self.repair:
                self._count_refs(mailbox_id)  # still referenced until removed
            if self.repair:
                mailbox = Mailbox(mailbox_id, owner, name, 0)
                purge_mailbox_messages(store, mailbox)
                for key, _op, _at in store.transfers.pending(mailbox_id):
                    store.transfers.intents.delete(key)
                store.changes.drop(mailbox_id)
                store.mailboxes.remove_row(mailbox_id)
            self.report.add("mailbox", f"{owner}:{name}", detail, self.repair)

    def _stale_markers(self, table, key: bytes, row: dict[bytes, bytes]) -> None:
        """Marker cells of counting steps whose intent is gone: a crash between deleting the
        intent and its markers leaves them.  Inert (nothing reads a marker without its
        intent), so not a problem; --repair removes them, as it deletes released content."""
        stale = [c for c in row if (intent := step_intent(c)) is not None
                 and not self.store.transfers.intents.row(intent, [b"i:op"])]
        if stale:
            self.report.checked["stale step markers"] += len(stale)
            if self.repair:
                table.delete(key, stale)

    def _count_refs(self, mailbox_id: bytes) -> None:
        start, stop = keys.message_range(mailbox_id)
        for _key, row in self.store.messages.table.scan(start=start, stop=stop,
                                                        columns=[STATE], batch_size=2000):
            raw = row.get(STATE)
            if state_of(raw) in (COMMITTED, MOVING, DELETING_STATE):
                self.refs[MessageRecord.decode(raw).content] += 1

    # -- content --------------------------------------------------------------------------------

    def check_content(self) -> None:
        """Reference counts against references; unfinished and unreferenced content."""
        store = self.store
        if self.in_flight:
            self.report.add("content", "all", "references not checked: moves or expunges are "
                            "unfinished (run with --repair to finish them)", False)
            return
        table = store.content.table
        now = store.clock()
        self.progress("checking content references")
        if self.repair:
            # Released content whose grace period is over goes now, as the server's sweep
            # would have done: routine, not a problem found.
            while store.content.sweep() == SWEEP_BATCH:
                pass
        # Content released by its last expunge waits out its grace period (decision 0011):
        # a state of its own, not a leak.
        released = store.content.pending_releases()
        fixes: list[Mutation] = []
        for content_id, row in table.scan(start=b"", stop=b"\xff" * 17,
                                          columns=[INFO, b"r", STARTED]):
            self.report.checked["contents"] += 1
            self._stale_markers(table, content_id, row)
            actual = self.refs.get(content_id, 0)
            recorded = decode_counter(row.get(REFS))
            where = f"content {content_id.hex()}"
            if INFO not in row:
                if now - decode_counter(row.get(STARTED)) > UNFINISHED_CONTENT_AGE or actual:
                    if self.repair and not actual:
                        fixes.append(Mutation(content_id, delete_row=True))
                    self.report.add("content", where, "content never finished", self.repair)
                continue
            if actual == 0 and content_id in released:
                self.report.checked["released contents"] += 1
                continue
            if actual == 0:
                if self.repair:
                    fixes.append(Mutation(content_id, delete_row=True))
                self.report.add("content", where, f"no message refers to it (refs {recorded})",
                                self.repair)
            elif recorded != actual:
                if self.repair:
                    table.increment(content_id, REFS, actual - recorded)
                self.report.add("content", where, f"refs {recorded}, actual {actual}",
                                self.repair)
        if fixes:
            table.mutate_rows(fixes)
        # Files of large values whose content row is gone (a kill between a chunk's file write
        # and its cell, or a delete inside a grouped transaction): decision 0028.
        lost = store.content.reclaim(remove=self.repair)
        if lost:
            self.report.add("content", "large values", f"{lost} file(s) of chunks no content "
                            "row refers to", self.repair)
        missing = set(self.refs) - {cid for cid, _ in table.rows(list(self.refs), [INFO])}
        for content_id in sorted(missing):
            self.report.add("content", f"content {content_id.hex()}",
                            f"{self.refs[content_id]} message(s) refer to missing content",
                            False)

    # -- user key format (docs/decisions/0027-salted-user-keys.md) ----------------------------

    def check_user_key_format(self) -> None:
        """Rows the store's key format does not read.  Not repaired here: such a row may hold
        data written in the other format, which ``mailadmin migrate-keys`` copies (when its
        row in the store's format is missing) before it removes it."""
        user_keys = self.store.user_keys
        for table, count in keyformat.stray_rows(self.store.backend, user_keys).items():
            self.report.add("keys", table, f"{count} row(s) not in the store's key format "
                            f"({user_keys.describe()}): run mailadmin migrate-keys", False)

    # -- ACL index (docs/decisions/0018-acl.md) ----------------------------------------------

    def check_acl_index(self) -> None:
        """The grant index against the ACL cells of the mailbox rows, both ways: an index row
        whose mailbox is gone or no longer has that entry (a crash between a revocation's two
        writes: harmless, ignored when read) is removed; an entry the index lacks (which LIST
        would not find) is indexed again."""
        table = self.store.grants.index
        indexed: set[tuple[str, bytes]] = set()
        user_keys = self.store.user_keys
        for key, _ in (row for start, stop in user_keys.bucket_ranges()
                       for row in table.scan(start=start, stop=stop, columns=[b"g:r"],
                                             batch_size=5000)):
            identifier = user_keys.acl_index_grantee(key)
            mailbox_id = keys.acl_index_mailbox(key)
            mailbox = self.store.mailboxes.load(mailbox_id)
            self.report.checked["acl index rows"] += 1
            if mailbox is not None and identifier in mailbox.acl:
                indexed.add((identifier, mailbox_id))
                continue
            if self.repair:
                table.delete(key)
            self.report.add("acl", f"mailbox {mailbox_id.hex()}",
                            f"index row of {identifier} without its ACL entry", self.repair)
        owners = [u.name for u in self.store.users.list()] + [SHARED_OWNER]
        for owner in owners:
            for mailbox in self.store.mailboxes.list(owner):
                for identifier, letters in mailbox.acl.items():
                    if (identifier, mailbox.id) in indexed:
                        continue
                    if self.repair:
                        self.store.grants.set(mailbox.id, identifier, frozenset(letters))
                    self.report.add("acl", f"{owner}:{mailbox.name}",
                                    f"ACL entry of {identifier} missing from the index",
                                    self.repair)

    # -- import records -------------------------------------------------------------------------

    def check_sieve(self) -> None:
        """Sieve scripts' rows (directory vs text cells, owners) and tracking rows."""
        store = self.store

        def exists(user: str) -> bool:
            try:
                store.users.get(user)
                return True
            except (NotFound, InvalidName):  # a backend failure propagates: no repair
                return False

        for user, what, repaired in store.sieve_scripts.check_rows(exists, self.repair):
            self.report.add("sieve", user, what, repaired)
        self.report.checked["sieve_scripts"] += 1
        tracking = store.sieve_tracking
        gone: dict[str, int] = {}
        users_seen: dict[str, bool] = {}
        for key, _row in tracking.table.scan(start=b"", columns=[b"t:x"]):
            user = store.user_keys.owner(key, keys.PREFIX_KEYED)
            if user is None:  # another key format: check_user_key_format reports it
                continue
            if user not in users_seen:
                users_seen[user] = exists(user)
            if not users_seen[user]:
                gone[user] = gone.get(user, 0) + 1
        for user, count in gone.items():
            if self.repair:
                tracking.delete_all(user)
            self.report.add("sieve_tracking", user,
                            f"{count} tracking row(s) of a user that does not exist",
                            self.repair)
        self.report.checked["sieve_tracking_expired"] += tracking.sweep_all(self.repair)

    def check_import_records(self) -> None:
        """Import records whose mailbox is gone (deleted, or a deletion finished by fsck)."""
        self._records_of_gone_mailboxes(IMPORTS.name, [UID_CELL], keys.IMPORT_DIGEST_LEN,
                                        "import", "import record(s)")

    def check_change_records(self) -> None:
        """Change-log entries and checkpoints whose mailbox is gone."""
        self._records_of_gone_mailboxes(CHANGES.name, [b"l", b"k"], 8, "changes",
                                        "change-log row(s)")

    def check_metadata_records(self) -> None:
        """Annotations (RFC 5464) whose mailbox is gone; the server's rows are no mailbox's."""
        self._records_of_gone_mailboxes(METADATA.name, [b"e", b"c"], 1024, "metadata",
                                        "annotation row(s)", keep=keys.SERVER_METADATA)

    def _records_of_gone_mailboxes(self, table_name: str, columns: list[bytes], suffix: int,
                                   kind: str, what: str, keep: bytes | None = None) -> None:
        """Rows keyed by mailbox UUID + up to ``suffix`` bytes whose mailbox no longer exists
        (``keep``: a prefix that is no mailbox's, left alone).

        One short scan per mailbox with rows, not per row: after looking at the first row of a
        mailbox the scan jumps past all of that mailbox's rows.
        """
        table = self.store.backend.table(table_name)
        start = b""
        stop = b"\xff" * (keys.UUID_LEN + suffix + 1)
        while True:
            first = list(table.scan(start=start, stop=stop, columns=columns, limit=1))
            if not first:
                return
            mailbox_id = first[0][0][:keys.UUID_LEN]
            after = prefix_stop(mailbox_id)
            if mailbox_id != keep and self.store.mailboxes.load(mailbox_id) is None:
                count, batch = 0, []
                for key, _ in table.scan(prefix=mailbox_id, columns=columns):
                    count += 1
                    batch.append(Mutation(key, delete_row=True))
                    if len(batch) >= 500 and self.repair:
                        table.mutate_rows(batch)
                    if len(batch) >= 500:
                        batch = []
                if batch and self.repair:
                    table.mutate_rows(batch)
                self.report.add(kind, f"mailbox {mailbox_id.hex()}",
                                f"{count} {what} of a mailbox that no longer exists",
                                self.repair)
            if after is None:
                return
            start = after
