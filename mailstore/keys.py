"""Row keys: pure functions, one place.

Every key layout of the schema is built and taken apart here, and nowhere else.  Every scan the
mail store makes is bounded at both ends by one of the ``*_prefix``/``*_range`` functions below,
so no scan can run into another mailbox's or another user's rows (Apache James's expunge scan was
not bounded, and could).
"""

from __future__ import annotations

import os
import random
import time
import uuid

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
os.register_at_fork(after_in_child=_RANDOM.seed)


def new_ordered_id() -> bytes:
    """A fresh 16-byte id that sorts by creation time: a UUIDv7 (RFC 9562), 48 bits of Unix
    time in milliseconds, then 74 random bits (uniqueness does not depend on the clock).

    For tables whose backend prefers ascending keys (``Table.ordered_keys``): in a B-tree a new
    row then lands at the right edge, where a full page is split cheaply, instead of in the
    middle of a full page.  Not for HBase, where every write would go to the one region that
    holds the newest keys.
    """
    # The random bits come from a generator of our own, seeded from the OS and reseeded in a
    # forked child (nobody else can seed it to a constant): these ids need to be unique, not
    # unguessable, and os.urandom was a system call per message (1.6% of an append's CPU).
    rand = _RANDOM.getrandbits(74)
    value = ((time.time_ns() // 1_000_000) << 80 | 0x7 << 76 | (rand >> 62) << 64
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


# -- JAMES_MAILBOX_INDEX: user NUL name ------------------------------------------------------

def index_key(user: str, name: str) -> bytes:
    return user.encode() + SEP + name.encode()


def index_key_name(key: bytes) -> str:
    return key.split(SEP, 1)[1].decode()


def user_index_prefix(user: str) -> bytes:
    """Prefix of every mailbox name index row of ``user``."""
    return user.encode() + SEP


def children_index_prefix(user: str, name: str, delimiter: str = "/") -> bytes:
    """Prefix of the index rows of ``name``'s descendants."""
    return index_key(user, name + delimiter)


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


# -- JAMES_USERS / JAMES_SUBSCRIPTIONS: user name --------------------------------------------

def user_key(user: str) -> bytes:
    return user.encode()


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
