"""Row keys: pure functions, one place.

Every key layout of the schema is built and taken apart here, and nowhere else.  Every scan the
mail store makes is bounded at both ends by one of the ``*_prefix``/``*_range`` functions below,
so no scan can run into another mailbox's or another user's rows (Apache James's expunge scan was
not bounded, and could).

The tables keyed by user name take their keys from a :class:`UserKeys` (salted or not: one
store's format, read from the store when it opens, docs/decisions/0027-salted-user-keys.md);
its methods are pure functions too.
"""

from __future__ import annotations

import hashlib
import os
import random
import threading
import time
import uuid
from dataclasses import dataclass

from .backends.base import prefix_stop

MAX_UID = 2**63 - 1
UUID_LEN = 16
SEP = b"\x00"
"""Separates a user name from a mailbox name; neither may contain NUL (see names.py)."""


def new_id() -> bytes:
    """A fresh random 16-byte id (UUID4) for a mailbox, a content blob or an intent.

    Random ids also spread rows evenly over HBase regions, so no region server is hot.
    """
    return uuid.uuid4().bytes


_RANDOM = random.Random()
_LAST = [0, 0]          # the last ordered id's millisecond and 74 random bits, this process
_LAST_LOCK = threading.Lock()


def _after_fork() -> None:
    # A child must not continue its parent's sequence: both would then make the same next id.
    _RANDOM.seed()
    _LAST[:] = [0, 0]


os.register_at_fork(after_in_child=_after_fork)


def new_ordered_id() -> bytes:
    """A fresh 16-byte id that sorts by creation time: a UUIDv7 (RFC 9562), 48 bits of Unix
    time in milliseconds, then 74 random bits (uniqueness does not depend on the clock).

    Within one process the ids are strictly increasing: a second id in the same millisecond
    (or after the clock stepped back) takes the last one's random bits plus one, RFC 9562
    6.2 method 2, so two ids made one after the other sort in that order (the outbox lists
    its entries by them).

    For tables whose backend prefers ascending keys (``Table.ordered_keys``): in a B-tree a new
    row then lands at the right edge, where a full page is split cheaply, instead of in the
    middle of a full page.  Not for HBase, where every write would go to the one region that
    holds the newest keys.
    """
    # The random bits come from a generator of our own, seeded from the OS and reseeded in a
    # forked child (nobody else can seed it to a constant): these ids need to be unique, not
    # unguessable, and os.urandom was a system call per message (1.6% of an append's CPU).
    now = time.time_ns() // 1_000_000
    with _LAST_LOCK:
        last_ms, last_rand = _LAST
        if now > last_ms:
            ms, rand = now, _RANDOM.getrandbits(74)
        elif last_rand + 1 < 1 << 74:
            ms, rand = last_ms, last_rand + 1
        else:                   # 2**74 ids in one millisecond: borrow the next one
            ms, rand = last_ms + 1, _RANDOM.getrandbits(74)
        _LAST[:] = [ms, rand]
    value = (ms << 80 | 0x7 << 76 | (rand >> 62) << 64
             | 0b10 << 62 | rand & ((1 << 62) - 1))
    return value.to_bytes(16, "big")


# -- JAMES_MESSAGES: mailbox uuid + (2**63 - 1 - uid), newest first --------------------------

def message_key(mailbox_id: bytes, uid: int) -> bytes:
    if len(mailbox_id) != UUID_LEN:
        raise ValueError("mailbox id must be 16 bytes")
    if not 0 < uid <= MAX_UID:
        raise ValueError(f"uid out of range: {uid}")
    return mailbox_id + (MAX_UID - uid).to_bytes(8, "big")


def message_key_uid(key: bytes) -> int:
    return MAX_UID - int.from_bytes(key[UUID_LEN:UUID_LEN + 8], "big")


def message_key_mailbox(key: bytes) -> bytes:
    return key[:UUID_LEN]


def message_range(mailbox_id: bytes, low_uid: int = 1,
                  high_uid: int = MAX_UID) -> tuple[bytes, bytes]:
    """(start, stop) covering UIDs ``low_uid..high_uid`` inclusive of one mailbox.

    Keys sort newest first, so the start key is the *highest* UID's.
    """
    if low_uid > high_uid:
        raise ValueError("empty uid range")
    start = message_key(mailbox_id, high_uid)
    if low_uid <= 1:
        stop = prefix_stop(mailbox_id)
        assert stop is not None
    else:
        stop = message_key(mailbox_id, low_uid - 1)
    return start, stop


# -- JAMES_CHANGES: mailbox uuid (checkpoint) / mailbox uuid + 8-byte change number (log) ----

def checkpoint_key(mailbox_id: bytes) -> bytes:
    """The row of a mailbox's index checkpoint: the bare UUID, which sorts before its log."""
    if len(mailbox_id) != UUID_LEN:
        raise ValueError("mailbox id must be 16 bytes")
    return mailbox_id


def change_key(mailbox_id: bytes, seq: int) -> bytes:
    if len(mailbox_id) != UUID_LEN:
        raise ValueError("mailbox id must be 16 bytes")
    if not 0 < seq <= MAX_UID:
        raise ValueError(f"change number out of range: {seq}")
    return mailbox_id + seq.to_bytes(8, "big")


def change_key_seq(key: bytes) -> int:
    return int.from_bytes(key[UUID_LEN:UUID_LEN + 8], "big")


def change_range(mailbox_id: bytes, low: int, high: int) -> tuple[bytes, bytes]:
    """(start, stop) covering log entries ``low..high`` inclusive of one mailbox."""
    if low > high or low < 1:
        raise ValueError("empty change range")
    return change_key(mailbox_id, low), change_key(mailbox_id, high) + b"\x00"


def acl_index_mailbox(key: bytes) -> bytes:
    """The mailbox UUID of a JAMES_ACL_INDEX row (its last 16 bytes, in either key format)."""
    return key[-UUID_LEN:]


# -- JAMES_INTENTS: source mailbox uuid + intent id -----------------------------------------

def intent_key(mailbox_id: bytes, intent_id: bytes) -> bytes:
    return mailbox_id + intent_id


# Content released by its last reference waits here for its grace period before its row is
# deleted (docs/decisions/0011-expunge-vs-readers.md).  The prefix takes the place of a mailbox
# UUID that no UUID4 can be (version nibble 0), so no mailbox's intents scan reaches these.
RELEASE_PREFIX = b"\x00" * (UUID_LEN - 1) + b"\x01"


def release_key(released_at: int, content_id: bytes) -> bytes:
    """Release record of ``content_id``: the prefix, 8-byte big-endian seconds, the id, so the
    records sort by the time their content was released."""
    return RELEASE_PREFIX + released_at.to_bytes(8, "big") + content_id


def release_range(released_before: int) -> tuple[bytes, bytes]:
    """(start, stop) of the release records older than ``released_before`` seconds."""
    return RELEASE_PREFIX, RELEASE_PREFIX + max(0, released_before).to_bytes(8, "big")


def release_key_parts(key: bytes) -> tuple[int, bytes]:
    """(released_at, content_id) of a release record's key."""
    body = key[len(RELEASE_PREFIX):]
    return int.from_bytes(body[:8], "big"), body[8:]


# -- JAMES_IMPORTS: mailbox uuid + SHA-256 of the message ----------------------------------------

IMPORT_DIGEST_LEN = 32


def import_key(mailbox_id: bytes, digest: bytes) -> bytes:
    if len(mailbox_id) != UUID_LEN or len(digest) != IMPORT_DIGEST_LEN:
        raise ValueError("import key needs a 16-byte mailbox id and a 32-byte digest")
    return mailbox_id + digest


# -- a row in JAMES_MAILBOXES that no UUID4 can take (version nibble 0), for store-wide counters

STORE_ROW = b"\x00" * UUID_LEN


# -- JAMES_OUTBOX: 16-byte time-ordered entry id ----------------------------------------------

def outbox_range() -> tuple[bytes, bytes]:
    """(start, stop) of every outgoing queue entry: all 16-byte ids."""
    return b"\x00" * UUID_LEN, b"\xff" * (UUID_LEN + 1)


# -- JAMES_METADATA: mailbox uuid (or SERVER_METADATA) + 's' | 'p' user ----------------------

SERVER_METADATA = b"\x00" * (UUID_LEN - 1) + b"\x02"
"""Row prefix of the server's annotations (RFC 5464 METADATA-SERVER): a mailbox UUID no UUID4
can be (version nibble 0), beside RELEASE_PREFIX, so no mailbox's prefix scan reaches them."""


def metadata_key(mailbox_id: bytes | None, private_user: str | None) -> bytes:
    """The row of a mailbox's shared annotations (``private_user`` None) or of one user's
    private ones; ``mailbox_id`` None for the server's.  A mailbox's rows all start with its
    UUID: one prefix scan finds every user's."""
    base = SERVER_METADATA if mailbox_id is None else mailbox_id
    if len(base) != UUID_LEN:
        raise ValueError("mailbox id must be 16 bytes")
    return base + (b"s" if private_user is None else b"p" + private_user.encode())


NO_MAILBOX = b"\x00" * (UUID_LEN - 1) + b"\x02"
"""A mailbox row key no mailbox ever has (no UUID4 has version nibble 0): read in place of a
mailbox row that does not exist, so a lookup costs the same reads either way."""


# -- tables keyed by user name: salt byte + user name ... (docs/decisions/0027) ------------------

MAX_USER_BUCKETS = 32
"""Salt values are 0x00-0x1f.  Every unsalted key starts with a printable byte, '#' (0x23) or
above (user names start with [a-z0-9], ACL grantees also with '-', Shared/'s owner is
'#shared'), so salted and unsalted keys can never be equal: the two formats can share a table
while ``mailadmin migrate-keys`` copies one to the other, and either is told by its first byte."""

USER_KEY_MARKER = b"m:userkeys"
"""Cell of :data:`STORE_ROW` in JAMES_MAILBOXES naming the store's user key format
(:meth:`UserKeys.marker`); written once, by check-and-put from absent (mailstore/keyformat.py)."""

ROW_KEYED = "row"
"""A table whose row key is the (salted) user name alone: USERS, SUBSCRIPTIONS, SIEVE_SCRIPTS."""
PREFIX_KEYED = "prefix"
"""A table whose row key is the (salted) user name, NUL, more: MAILBOX_INDEX, URLAUTH_KEYS,
ACL_INDEX (the grantee), SIEVE_TRACKING."""


@dataclass(frozen=True)
class UserKeys:
    """Row keys of the tables keyed by user name, in one store's format.

    ``buckets`` 0 is the unsalted format of stores made before decision 0027 (``user``, ``user
    NUL name``, ...); 1 to :data:`MAX_USER_BUCKETS` put one salt byte before the name:
    ``blake2b(name) mod buckets``, so that sequential account names (``user000001``, ...)
    spread evenly over the buckets, hence over the regions the tables are pre-split into.
    Every row of one name shares its salt, so a user's rows stay one bounded prefix scan.
    Methods are pure functions of the format and their arguments.
    """

    buckets: int = 0

    def __post_init__(self):
        if not 0 <= self.buckets <= MAX_USER_BUCKETS:
            raise ValueError(f"user key buckets must be 0 to {MAX_USER_BUCKETS}")

    @property
    def salted(self) -> bool:
        return self.buckets > 0

    def salt(self, name: str) -> bytes:
        """The salt byte of ``name`` (a user name or ACL identifier); b"" when unsalted.

        BLAKE2b (hashlib, no seed) is the same in every Python version and on every machine,
        unlike hash(); eight digest bytes make the remainder uniform for any bucket count."""
        if not self.buckets:
            return b""
        digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
        return bytes([int.from_bytes(digest, "big") % self.buckets])

    def _named(self, name: str) -> bytes:
        return self.salt(name) + name.encode()

    # JAMES_USERS, JAMES_SUBSCRIPTIONS, JAMES_SIEVE_SCRIPTS: [salt] user

    def user_key(self, user: str) -> bytes:
        return self._named(user)

    def user_key_name(self, key: bytes) -> str:
        return key[1 if self.buckets else 0:].decode()

    # JAMES_MAILBOX_INDEX: [salt] user NUL mailbox name

    def index_key(self, user: str, name: str) -> bytes:
        return self._named(user) + SEP + name.encode()

    def index_key_name(self, key: bytes) -> str:
        # The salt byte may be NUL itself: split after it.
        return key[1 if self.buckets else 0:].split(SEP, 1)[1].decode()

    def user_index_prefix(self, user: str) -> bytes:
        """Prefix of every mailbox name index row of ``user``."""
        return self._named(user) + SEP

    def children_index_prefix(self, user: str, name: str, delimiter: str = "/") -> bytes:
        """Prefix of the index rows of ``name``'s descendants."""
        return self.index_key(user, name + delimiter)

    # JAMES_ACL_INDEX: [salt] grantee NUL mailbox uuid (docs/decisions/0018-acl.md)

    def acl_index_key(self, grantee: str, mailbox_id: bytes) -> bytes:
        if len(mailbox_id) != UUID_LEN:
            raise ValueError("mailbox id must be 16 bytes")
        return self._named(grantee) + SEP + mailbox_id

    def acl_index_prefix(self, grantee: str) -> bytes:
        """Prefix of every index row of ``grantee`` (a user name or ``anyone``)."""
        return self._named(grantee) + SEP

    def acl_index_grantee(self, key: bytes) -> str:
        return key[1 if self.buckets else 0:-(UUID_LEN + 1)].decode()

    # JAMES_URLAUTH_KEYS: [salt] user NUL mailbox uuid

    def urlauth_key(self, user: str, mailbox_id: bytes) -> bytes:
        """Row of ``user``'s URLAUTH access key for one mailbox (RFC 4467 3)."""
        if len(mailbox_id) != UUID_LEN:
            raise ValueError("mailbox id must be 16 bytes")
        return self._named(user) + SEP + mailbox_id

    def urlauth_user_prefix(self, user: str) -> bytes:
        """Prefix of every URLAUTH key row of ``user`` (RESETKEY without a mailbox)."""
        return self._named(user) + SEP

    # JAMES_SIEVE_TRACKING: [salt] user NUL kind NUL 16-byte digest (decision 0025)

    def tracking_key(self, user: str, kind: bytes, digest: bytes) -> bytes:
        return self._named(user) + SEP + kind + SEP + digest

    def tracking_prefix(self, user: str) -> bytes:
        return self._named(user) + SEP

    # -- whole tables, the format itself ------------------------------------------------------

    def bucket_ranges(self) -> list[tuple[bytes, bytes | None]]:
        """(start, stop) of each bucket, in key order: together the whole table.  Within one
        bucket rows sort by name, so a listing of all users merges these scans by name."""
        if not self.buckets:
            # Not from b"": rows of salted keys (a migration under way) sort before these.
            return [(bytes([MAX_USER_BUCKETS]), None)]
        return [(bytes([b]), bytes([b + 1])) for b in range(self.buckets)]

    def split_keys(self) -> list[bytes]:
        """Region boundaries that give each bucket a region of its own (HBase ``SPLITS``)."""
        return [bytes([b]) for b in range(1, self.buckets)]

    def owner(self, key: bytes, keyed: str) -> str | None:
        """The name a key of this format belongs to, for a table keyed ``keyed``
        (:data:`ROW_KEYED` or :data:`PREFIX_KEYED`); None if ``key`` is not of this format."""
        if not key or (key[0] < MAX_USER_BUCKETS) != self.salted:
            return None
        body = key[1:] if self.salted else key
        if keyed == PREFIX_KEYED:
            if SEP not in body:
                return None
            body = body.split(SEP, 1)[0]
        try:
            name = body.decode()
        except UnicodeDecodeError:
            return None
        return name if self.salt(name) == key[:len(self.salt(name))] else None

    def rekey(self, key: bytes, keyed: str, target: UserKeys) -> bytes | None:
        """``key`` (of this format) as ``target`` writes it; None if it is not of this format."""
        name = self.owner(key, keyed)
        if name is None:
            return None
        return target.salt(name) + key[len(self.salt(name)):]

    def marker(self) -> bytes:
        """How the format is recorded in the store (:data:`USER_KEY_MARKER`)."""
        return b"salted:%d" % self.buckets if self.buckets else b"plain"

    @classmethod
    def from_marker(cls, raw: bytes) -> UserKeys:
        if raw == b"plain":
            return cls(0)
        kind, _, count = raw.partition(b":")
        if kind != b"salted" or not count.isdigit() or not 1 <= int(count) <= MAX_USER_BUCKETS:
            raise ValueError(f"unknown user key format in the store: {raw!r}")
        return cls(int(count))

    def describe(self) -> str:
        return f"salted, {self.buckets} bucket(s)" if self.buckets else "unsalted (before 0027)"
