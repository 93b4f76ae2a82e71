"""Mailboxes: the name index, the mailbox rows and their counters, subscriptions.

Invariants kept here:

* A mailbox is found by one ``get`` on ``JAMES_MAILBOX_INDEX`` (user, name) and one on
  ``JAMES_MAILBOXES`` (or by the latter alone, for an id remembered from an earlier lookup and
  confirmed by its row); listings are prefix scans of the user's index rows.  Nothing scans all
  mailboxes.
* The mailbox row is the truth.  An index row is trusted only if the mailbox row it points to
  names the same owner and name and is live; a stale index row left by a crash during rename or
  delete is ignored by lookups and removed by fsck.
* A mailbox keeps its UUID, UIDVALIDITY and counters across rename, so the UID counter never
  moves backwards.  Deleting and re-creating a name makes a new UUID and a new UIDVALIDITY.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from . import keys, names
from .acl import acl_from_row
from .backends.base import Backend, Mutation, decode_counter, encode_counter
from .errors import AlreadyExists, InvalidName, NotFound
from .schema import MAILBOX_INDEX, MAILBOXES, SUBSCRIPTIONS

# Counter cells of a mailbox row.
UID = b"c:uid"          # last allocated UID (increments only)
VISIBLE = b"c:visible"  # UID watermark: every UID <= it is committed or abandoned
MODSEQ = b"c:modseq"    # highest MODSEQ allocated
COUNT = b"c:count"
UNSEEN = b"c:unseen"
SIZE = b"c:size"
COUNTERS = (UID, VISIBLE, MODSEQ, COUNT, UNSEEN, SIZE)
RECENT = b"c:recent"
"""\\Recent watermark (RFC 3501 2.3.2): every UID <= it has been claimed by some session, which
alone saw it as recent.  Moved only forward, by check-and-put (docs/decisions/0010-recent.md).
Not one of COUNTERS: fsck has nothing to recompute it from."""

LIVE, DELETING = b"live", b"deleting"

def step_column(family: bytes, intent_key: bytes, step: str) -> bytes:
    """The marker cell, in ``family`` (``c`` of a mailbox row, ``r`` of a content row), that
    says step ``step`` of the intent ``intent_key`` has been applied to that row:
    ``c:~<intent key, hex>.<step>``, incremented in the same call as the counters it accounts
    for, deleted after its intent (docs/decisions/0004)."""
    return family + b":~" + intent_key.hex().encode() + b"." + step.encode()


def step_intent(column: bytes) -> bytes | None:
    """The intent key a marker cell names, or None if ``column`` is no marker."""
    _family, _, qualifier = column.partition(b":")
    if not qualifier.startswith(b"~"):
        return None
    try:
        return bytes.fromhex(qualifier[1:].split(b".")[0].decode())
    except ValueError:
        return None

ID_CACHE = 10_000
"""Mailbox ids remembered by (user, name) per process, each checked against its row on use."""

SPECIAL_USE = ("\\All", "\\Archive", "\\Drafts", "\\Flagged", "\\Junk", "\\Sent", "\\Trash")
DEFAULT_FOLDERS = (("Drafts", "\\Drafts"), ("Sent", "\\Sent"), ("Trash", "\\Trash"),
                   ("Junk", "\\Junk"), ("Archive", "\\Archive"))


@dataclass
class Mailbox:
    """One mailbox as read from its row.  Counters are as of that read."""

    id: bytes
    owner: str
    name: str
    uidvalidity: int
    special_use: str | None = None
    last_uid: int = 0
    visible_uid: int = 0
    highest_modseq: int = 0
    messages: int = 0
    unseen: int = 0
    size: int = 0
    recent_uid: int = 0
    """The \\Recent watermark as of the read: UIDs above it are recent to whoever claims them."""
    acl: dict[str, str] = field(default_factory=dict)
    """The ACL as of the read: {identifier: rights letters} (RFC 4314; mailstore/acl.py)."""

    @property
    def uidnext(self) -> int:
        """UIDNEXT as RFC 3501 2.3.1.1 defines it: no visible message will ever get a lower UID."""
        return self.last_uid + 1

    @classmethod
    def from_row(cls, mailbox_id: bytes, row: dict[bytes, bytes]) -> Mailbox:
        return cls(
            id=mailbox_id, owner=row[b"m:owner"].decode(), name=row[b"m:name"].decode(),
            uidvalidity=decode_counter(row[b"m:uidvalidity"]),
            special_use=row[b"m:special"].decode() if row.get(b"m:special") else None,
            last_uid=decode_counter(row.get(UID)), visible_uid=decode_counter(row.get(VISIBLE)),
            highest_modseq=decode_counter(row.get(MODSEQ)),
            messages=decode_counter(row.get(COUNT)), unseen=decode_counter(row.get(UNSEEN)),
            size=decode_counter(row.get(SIZE)), recent_uid=decode_counter(row.get(RECENT)),
            acl=acl_from_row(row))


class Mailboxes:
    def __init__(self, backend: Backend, clock: Callable[[], float] = time.time,
                 user_keys: keys.UserKeys | None = None):
        self.keys = user_keys or keys.UserKeys()
        self.rows = backend.table(MAILBOXES.name)
        self.index = backend.table(MAILBOX_INDEX.name)
        self.subs = backend.table(SUBSCRIPTIONS.name)
        self.clock = clock
        self._ids: dict[tuple[str, str], bytes] = {}  # (user, name) -> id, checked on use

    # -- lookups --------------------------------------------------------------------------------

    def load(self, mailbox_id: bytes) -> Mailbox | None:
        row = self.rows.row(mailbox_id)
        if row.get(b"m:state") != LIVE:
            return None
        return Mailbox.from_row(mailbox_id, row)

    def load_many(self, mailbox_ids: list[bytes]) -> dict[bytes, Mailbox]:
        """The live ones of ``mailbox_ids``, by id, in one multi-get."""
        return {mid: Mailbox.from_row(mid, row) for mid, row in self.rows.rows(mailbox_ids)
                if row.get(b"m:state") == LIVE}

    def get(self, user: str, name: str, uniform: bool = False) -> Mailbox:
        """The live mailbox ``name`` of ``user``; NotFound otherwise.

        ``uniform``: for a lookup on behalf of someone else (another user's namespace), take
        the same two reads whether the mailbox exists or not, so that the time of a NO does
        not tell whether a mailbox the caller may not see exists (RFC 4314 6): no id cache
        (whose hits only names looked up before would get), and a row read in place of the
        mailbox row when the index has no such name."""
        name = names.normalize_mailbox(name)
        # The mailbox row is the truth, so an id remembered from an earlier lookup is as good
        # as the index row whenever the row it names still says this owner, name and live:
        # while it does, the index row points to it (rename claims the new index row before
        # changing the mailbox row; delete marks the row before dropping the index row).
        # That saves the index read on every delivery and APPEND by name.
        if uniform:
            mailbox_id = self.index.row(self.keys.index_key(user, name), [b"i:id"]).get(b"i:id")
            mailbox = self._named(mailbox_id if mailbox_id else keys.NO_MAILBOX, user, name)
            if mailbox is None:
                raise NotFound(f"no such mailbox: {name}")
            return mailbox
        remembered = self._ids.get((user, name))
        if remembered is not None:
            mailbox = self._named(remembered, user, name)
            if mailbox:
                return mailbox
            self._ids.pop((user, name), None)
        mailbox_id = self.index.row(self.keys.index_key(user, name), [b"i:id"]).get(b"i:id")
        mailbox = self._named(mailbox_id, user, name) if mailbox_id else None
        if mailbox is None:
            if mailbox_id:
                self._undo_half_created(user, name, mailbox_id)
            raise NotFound(f"no such mailbox: {name}")
        if len(self._ids) >= ID_CACHE:
            self._ids.clear()  # crude bound; a miss only costs the index read
        self._ids[(user, name)] = mailbox_id
        return mailbox

    def _named(self, mailbox_id: bytes, user: str, name: str) -> Mailbox | None:
        """The live mailbox ``mailbox_id`` if its row says ``user`` owns it as ``name``."""
        mailbox = self.load(mailbox_id)
        if mailbox and mailbox.owner == user and mailbox.name == name:
            return mailbox
        return None

    def list(self, user: str, under: str | None = None) -> list[Mailbox]:
        """The user's live mailboxes sorted by name; only descendants of ``under`` if given."""
        prefix = (self.keys.children_index_prefix(user, names.normalize_mailbox(under))
                  if under else self.keys.user_index_prefix(user))
        index = list(self.index.scan(prefix=prefix, columns=[b"i:id"]))
        found = self.rows.rows([r[b"i:id"] for _, r in index])
        by_id = {mid: row for mid, row in found}
        result = []
        for key, cells in index:
            row = by_id.get(cells[b"i:id"])
            name = self.keys.index_key_name(key)
            if row and row.get(b"m:state") == LIVE and row[b"m:name"].decode() == name \
                    and row[b"m:owner"].decode() == user:
                result.append(Mailbox.from_row(cells[b"i:id"], row))
            elif not row:
                self._undo_half_created(user, name, cells[b"i:id"])
        return result

    # -- changes --------------------------------------------------------------------------------

    def create(self, user: str, name: str, special_use: str | None = None) -> Mailbox:
        name = names.normalize_mailbox(name)
        if special_use is not None and special_use not in SPECIAL_USE:
            raise InvalidName(f"unknown special-use attribute: {special_use}")
        mailbox_id = keys.new_id()
        uidvalidity = self._new_uidvalidity()
        cells = {b"m:owner": user.encode(), b"m:name": name.encode(),
                 b"m:uidvalidity": encode_counter(uidvalidity), b"m:state": LIVE,
                 b"m:created": encode_counter(int(self.clock()))}
        if special_use:
            cells[b"m:special"] = special_use.encode()
        # Counters start as explicit zeros so that check-and-put on the watermark always
        # compares bytes with bytes.
        cells.update({c: encode_counter(0) for c in (*COUNTERS, RECENT)})
        # The index row first (it claims the name), then the mailbox row.  A crash between the
        # two leaves an index row to no row at all, which the next lookup, listing or CREATE
        # of the name removes (_undo_half_created): the CREATE was never acknowledged, so
        # undoing it is the recovery.  (The other order left a row no name reaches, which
        # only fsck could find: issue 16.)
        index_key = self.keys.index_key(user, name)
        if not self.index.check_and_put(index_key, b"i:id", None, b"i:id", mailbox_id):
            existing = self._index_target(user, name)
            if existing is not None:
                raise AlreadyExists(f"mailbox already exists: {name}")
            # A stale index row (crash in create/delete/rename) holds the name: reclaim it.
            stale = self.index.row(index_key).get(b"i:id")
            self.index.delete(index_key)
            if stale is not None:
                return self.create(user, name, special_use)
            raise AlreadyExists(f"mailbox already exists: {name}")
        self.rows.put(mailbox_id, cells)
        if self.index.row(index_key, [b"i:id"]).get(b"i:id") != mailbox_id:
            # A reader took our index row for a dead creator's in the moment between the two
            # writes: take the row back and claim the name again.
            self.rows.delete(mailbox_id)
            return self.create(user, name, special_use)
        return Mailbox(mailbox_id, user, name, uidvalidity, special_use)

    def _undo_half_created(self, user: str, name: str, mailbox_id: bytes) -> None:
        """An index row whose mailbox row does not exist at all: a CREATE died between its
        two writes (deletion and rename never leave one).  Remove it."""
        if not self.rows.row(mailbox_id, [b"m:state"]):
            self.index.delete(self.keys.index_key(user, name))

    def _index_target(self, user: str, name: str) -> Mailbox | None:
        try:
            return self.get(user, name)
        except NotFound:
            return None

    def _new_uidvalidity(self) -> int:
        """A UIDVALIDITY no earlier mailbox of this store had (RFC 3501 2.3.1.1).

        A store-wide counter, started at the current time so that a store rebuilt from scratch
        does not hand out values that clients may have cached for the old one.
        """
        value = self.rows.increment(keys.STORE_ROW, b"c:uidvalidity", 1)
        now = int(self.clock())
        if value < now:
            value = self.rows.increment(keys.STORE_ROW, b"c:uidvalidity", now - value)
        return value & 0xFFFFFFFF or 1

    def rename(self, user: str, old: str, new: str) -> list[Mailbox]:
        """Rename a mailbox and its descendants (RFC 3501 6.3.5); return them renamed.

        UUIDs, UIDVALIDITY and counters stay: UIDs go on from where they were.
        """
        old, new = names.normalize_mailbox(old), names.normalize_mailbox(new)
        if old == new:
            raise AlreadyExists(f"mailbox already exists: {new}")
        if new.startswith(old + names.DELIMITER):
            raise InvalidName("cannot move a mailbox into its own subtree")
        top = self.get(user, old)
        moving = [top] + self.list(user, under=old)
        renamed = []
        for mailbox in moving:
            target = new + mailbox.name[len(old):]
            # New index row first (claims the name), then the mailbox row (the truth), then the
            # old index row.  A crash leaves at worst a stale index row that lookups ignore.
            if not self.index.check_and_put(self.keys.index_key(user, target), b"i:id", None,
                                            b"i:id", mailbox.id):
                if self._index_target(user, target) is not None:
                    raise AlreadyExists(f"mailbox already exists: {target}")
                self.index.put(self.keys.index_key(user, target), {b"i:id": mailbox.id})
            self.rows.put(mailbox.id, {b"m:name": target.encode()})
            self.index.delete(self.keys.index_key(user, mailbox.name))
            mailbox.name = target
            renamed.append(mailbox)
        return renamed

    def mark_deleting(self, mailbox: Mailbox) -> None:
        """First step of deletion: the mailbox disappears from lookups and listings."""
        self.rows.put(mailbox.id, {b"m:state": DELETING})
        self.index.delete(self.keys.index_key(mailbox.owner, mailbox.name))

    def set_special_use(self, mailbox_id: bytes, use: str | None) -> None:
        """Give a mailbox a special use, or with None take it away (RFC 6154 3, through
        METADATA's /private/specialuse).  A mailbox deleted meanwhile is not brought back."""
        if use is not None and use not in SPECIAL_USE:
            raise InvalidName(f"unknown special-use attribute: {use}")
        if not self.rows.check_and_put(mailbox_id, b"m:state", LIVE, b"m:special",
                                       use.encode() if use else b""):
            raise NotFound("no such mailbox")

    def remove_row(self, mailbox_id: bytes) -> None:
        self.rows.delete(mailbox_id)

    def counters(self, mailbox_id: bytes) -> dict[bytes, int]:
        row = self.rows.row(mailbox_id, [b"c"])
        return {c: decode_counter(row.get(c)) for c in COUNTERS}

    def allocate(self, mailbox_id: bytes, size: int | None = None,
                 unseen: bool = True) -> tuple[int, int]:
        """Take a UID and a MODSEQ for a new message: ``(uid, modseq)``, in one round trip on
        the embedded store.

        With ``size`` (its octets) the message is also counted now, before it is committed
        (``unseen`` says whether it counts as unseen): an append then changes the mailbox row
        twice (this and the watermark) instead of four times.  A crash before the commit leaves
        the counters too high, which fsck repairs (docs/decisions/0004); a caller that gives
        up cleanly takes the counts back with :meth:`add_counts`.
        """
        deltas = {UID: 1, MODSEQ: 1}
        if size is not None:
            deltas[COUNT] = 1
            if size:
                deltas[SIZE] = size
            if unseen:
                deltas[UNSEEN] = 1
        # Every counter returned: one atomic call over HBase's Thrift2 (the only backend
        # whose appends count here, Backend.counts_at_allocation), so the counts were applied
        # if and only if the UID was taken.
        values = self.rows.increment_many(mailbox_id, deltas, returning=tuple(deltas))
        return values[UID], values[MODSEQ]

    def add_counts(self, mailbox_id: bytes, messages: int = 0, unseen: int = 0,
                   size: int = 0) -> None:
        deltas = {c: d for c, d in ((COUNT, messages), (UNSEEN, unseen), (SIZE, size)) if d}
        if deltas:
            self.rows.increment_many(mailbox_id, deltas)

    def count_once(self, mailbox_id: bytes, step: bytes, messages: int = 0, unseen: int = 0,
                   size: int = 0) -> None:
        """:meth:`add_counts` as one step of an intent: the counters and the step's marker
        cell (:func:`step_column`) change in one call, so whoever rolls the intent forward
        reads the marker and never counts the step twice (docs/decisions/0004)."""
        deltas = {c: d for c, d in ((COUNT, messages), (UNSEEN, unseen), (SIZE, size)) if d}
        # HBase applies a batch of increments cell by cell (a gateway dying mid-call can apply
        # part of one): the marker goes where a cut errs high -- after counts that add, before
        # counts that take away -- so a roll forward never leaves the counters too low.
        if any(d < 0 for d in deltas.values()):
            self.rows.increment_many(mailbox_id, {step: 1, **deltas})
        else:
            self.rows.increment_many(mailbox_id, {**deltas, step: 1})

    def steps_done(self, mailbox_id: bytes, steps: list[bytes]) -> set[bytes]:
        """Which of an intent's counting steps (marker cells) have been applied here."""
        return set(self.rows.row(mailbox_id, steps))

    def claim_recent(self, mailbox_id: bytes, up_to_uid: int, guess: int = 0
                     ) -> tuple[int, int]:
        """Claim the UIDs above the \\Recent watermark up to ``up_to_uid`` for the caller alone
        (RFC 3501 2.3.2: only one session is the first to be told of a message).

        Returns ``(low, high)``: the caller claimed every UID with ``low < uid <= high``, and
        no other caller ever will; ``low == high`` when there was nothing left to claim (then
        ``high`` is the watermark as far as this call saw it).  The watermark moves by
        check-and-put from the value it was compared with, so of concurrent claimers over any
        store connection or process exactly one wins each range.  ``guess`` is what the caller
        believes the watermark to be (the value a previous call returned, or the mailbox row's
        as read; never above what the watermark was, which only grows): a right guess costs
        one check-and-put, a wrong one a read more per retry.
        Nothing is claimed in a mailbox that is not live (deleted meanwhile).
        """
        current, raw = guess, encode_counter(guess)
        while current < up_to_uid:
            if self.rows.check_and_put(mailbox_id, RECENT, raw, RECENT,
                                       encode_counter(up_to_uid)):
                return current, up_to_uid
            # Someone else moved it (or the guess was stale, or the cell is absent in a row
            # written before it existed): read it and try again from there.  The compare is
            # with the bytes as read, absent included, but an absent cell in a row that is
            # gone must not recreate the row, hence the state.
            row = self.rows.row(mailbox_id, [RECENT, b"m:state"])
            if row.get(b"m:state") != LIVE:
                return current, current
            raw = row.get(RECENT)
            current = decode_counter(raw)
        return current, current

    def recent_watermark(self, mailbox_id: bytes) -> int:
        """The \\Recent watermark now (one get): UIDs above it are not claimed yet."""
        return decode_counter(self.rows.row(mailbox_id, [RECENT]).get(RECENT))

    # -- subscriptions (RFC 3501 6.3.6, 6.3.7): names, which need not exist ----------------------

    def subscribe(self, user: str, name: str) -> None:
        name = names.normalize_mailbox(name)
        self.subs.put(self.keys.user_key(user), {b"s:" + name.encode(): b"1"})

    def unsubscribe(self, user: str, name: str) -> None:
        name = names.normalize_mailbox(name)
        key = b"s:" + name.encode()
        if key not in self.subs.row(self.keys.user_key(user), [key]):
            raise NotFound(f"not subscribed: {name}")
        self.subs.delete(self.keys.user_key(user), [key])

    def subscriptions(self, user: str) -> list[str]:
        row = self.subs.row(self.keys.user_key(user), [b"s"])
        return sorted(col[2:].decode() for col in row)

    def drop_subscriptions(self, user: str) -> None:
        self.subs.delete(self.keys.user_key(user))


def describe(mailbox: Mailbox) -> dict:
    """A JSON-ready summary (for mailadmin)."""
    return {"name": mailbox.name, "id": mailbox.id.hex(), "uidvalidity": mailbox.uidvalidity,
            "uidnext": mailbox.uidnext, "messages": mailbox.messages, "unseen": mailbox.unseen,
            "size": mailbox.size, "highestmodseq": mailbox.highest_modseq,
            "special_use": mailbox.special_use}


__all__ = ["Mailbox", "Mailboxes", "describe", "Mutation", "json"]
