"""Accounts: password hashes and quota limits.

Passwords are hashed with scrypt from the standard library (memory-hard, no extra dependency);
the stored string names its parameters so they can be raised later without breaking old hashes.
A user's usage is not stored: it is the sum of their mailboxes' counters (one prefix scan and
one multi-get), which saves a write on every append and a counter that could drift.
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import hmac
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import keys, names
from .backends.base import Backend, decode_counter, encode_counter
from .errors import AlreadyExists, InvalidName, NotFound, OverQuota
from .schema import USERS

PASSWORD = b"a:pw"
CREATED = b"a:created"
LIMIT_STORAGE = b"l:storage"
LIMIT_MESSAGES = b"l:messages"
# Change generations of a user's mailbox list, subscriptions and metadata: incremented after
# each change, read by NOTIFY sessions in every process (docs/decisions/0021-notify.md).
NAMES_GENERATION = b"a:gen.names"
SUBSCRIPTIONS_GENERATION = b"a:gen.subs"
METADATA_GENERATION = b"a:gen.meta"
GENERATIONS = (NAMES_GENERATION, SUBSCRIPTIONS_GENERATION, METADATA_GENERATION)

# scrypt cost: ~50 ms and 16 MiB per hash on a 2-core machine.  Slow enough to make offline
# guessing expensive, fast enough for a login storm.
_N, _R, _P = 2**14, 8, 1


def hash_password(password: str) -> str:
    salt = os.urandom(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=_N, r=_R, p=_P, dklen=32)
    return (f"scrypt${_N}${_R}${_P}${base64.b64encode(salt).decode()}"
            f"${base64.b64encode(digest).decode()}")


def verify_password(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        expected = base64.b64decode(digest)
        actual = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n),
                                r=int(r), p=int(p), dklen=len(expected))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)


# A fixed hash to check against when the user does not exist, so that the time a failed login
# takes does not tell whether the user exists.
_DUMMY_HASH = None


def _dummy_hash() -> str:
    global _DUMMY_HASH
    if _DUMMY_HASH is None:
        _DUMMY_HASH = hash_password("not a real password")
    return _DUMMY_HASH


@dataclass
class User:
    name: str
    storage_limit: int | None
    message_limit: int | None

    @classmethod
    def from_row(cls, name: str, row: dict[bytes, bytes]) -> User:
        def limit(col: bytes) -> int | None:
            return decode_counter(row[col]) if col in row else None
        return cls(name, limit(LIMIT_STORAGE), limit(LIMIT_MESSAGES))


class VerifiedCache:
    """Recently verified logins, so a client that logs in for every sync does not pay scrypt
    (~50 ms of CPU) each time -- Dovecot's auth cache does the same job.

    Keys are a keyed digest of (user, stored hash, password) under a random per-process secret:
    a changed password changes the stored hash and misses; no password is kept.  Entries expire
    after ``ttl`` seconds; at most ``size`` are kept (oldest dropped first).
    """

    def __init__(self, clock: Callable[[], float], ttl: float = 3600.0, size: int = 10000):
        self.clock = clock
        self.ttl = ttl
        self.size = size
        self.secret = os.urandom(32)
        self.entries: dict[bytes, float] = {}

    def _key(self, user: str, stored: bytes, password: str) -> bytes:
        return hmac.new(self.secret, user.encode() + b"\0" + stored + b"\0" +
                        password.encode(), hashlib.sha256).digest()

    def hit(self, user: str, stored: bytes, password: str) -> bool:
        expires = self.entries.get(self._key(user, stored, password))
        return expires is not None and expires > self.clock()

    def remember(self, user: str, stored: bytes, password: str) -> None:
        if len(self.entries) >= self.size:
            for old in list(self.entries)[:self.size // 10 or 1]:
                self.entries.pop(old, None)
        self.entries[self._key(user, stored, password)] = self.clock() + self.ttl


class Users:
    def __init__(self, backend: Backend, clock: Callable[[], float] = time.time,
                 user_keys: keys.UserKeys | None = None):
        self.table = backend.table(USERS.name)
        self.keys = user_keys or keys.UserKeys()
        self.clock = clock
        self.cache = VerifiedCache(clock)

    def create(self, name: str, password: str | None) -> str:
        user = names.normalize_user(name)
        if user == "anyone":
            # RFC 4314 2: the ACL identifier of every user; an account of that name could
            # not be told apart from it.
            raise InvalidName("'anyone' is reserved (the ACL identifier of every user)")
        pw = hash_password(password) if password else "!"  # "!" never verifies
        row = self.keys.user_key(user)
        if not self.table.check_and_put(row, PASSWORD, None, PASSWORD, pw.encode()):
            raise AlreadyExists(f"user already exists: {user}")
        self.table.put(row, {CREATED: encode_counter(int(self.clock()))})
        return user

    def get(self, name: str) -> User:
        user = names.normalize_user(name)
        row = self.table.row(self.keys.user_key(user))
        if PASSWORD not in row:
            raise NotFound(f"no such user: {user}")
        return User.from_row(user, row)

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
        except (NotFound, InvalidName):
            return False
        return True

    def authenticate(self, name: str, password: str) -> str | None:
        """The canonical user name if the password is right, else None (same cost either way)."""
        try:
            user = names.normalize_user(name)
        except InvalidName:
            user = None
        stored = (self.table.row(self.keys.user_key(user), [PASSWORD]).get(PASSWORD)
                  if user else None)
        if stored and self.cache.hit(user, stored, password):
            return user
        ok = verify_password(password, stored.decode() if stored else _dummy_hash())
        if ok and stored:
            self.cache.remember(user, stored, password)
        return user if ok and stored else None

    def authenticate_cached(self, name: str, password: str) -> str | None:
        """The canonical user name if this login was verified lately (the cache hits: one
        row read and one HMAC, no hash), else None -- a wrong password and an unknown user
        included: :meth:`authenticate` decides those, at the hash's cost."""
        try:
            user = names.normalize_user(name)
        except InvalidName:
            return None
        stored = self.table.row(self.keys.user_key(user), [PASSWORD]).get(PASSWORD)
        return user if stored and self.cache.hit(user, stored, password) else None

    def set_password(self, name: str, password: str) -> None:
        user = self.get(name).name
        self.table.put(self.keys.user_key(user), {PASSWORD: hash_password(password).encode()})

    def bump(self, name: str, column: bytes) -> None:
        """Move one of the user's change generations on (:data:`GENERATIONS`): called after
        the change it announces, so a reader that sees the new number sees the change."""
        self.table.increment(self.keys.user_key(names.normalize_user(name)), column, 1)

    def generations(self, users: list[str]) -> dict[str, tuple[int, int, int]]:
        """(names, subscriptions, metadata) generations of each user, in one multi-get; 0 for
        those never moved (and for users that do not exist)."""
        out = {u: (0, 0, 0) for u in users}
        for key, row in self.table.rows([self.keys.user_key(u) for u in users],
                                        list(GENERATIONS)):
            out[self.keys.user_key_name(key)] = tuple(decode_counter(row.get(c))
                                                      for c in GENERATIONS)
        return out

    def list(self) -> list[User]:
        """Every account, sorted by name: one bounded scan per salt bucket (each sorted by
        name), merged (docs/decisions/0027)."""
        name = self.keys.user_key_name
        buckets = [((name(key), row) for key, row in self.table.scan(start=start, stop=stop))
                   for start, stop in self.keys.bucket_ranges()]
        return [User.from_row(user, row)
                for user, row in heapq.merge(*buckets, key=lambda item: item[0])
                if PASSWORD in row]

    def delete_row(self, name: str) -> None:
        self.table.delete(self.keys.user_key(names.normalize_user(name)))

    def set_quota(self, name: str, storage: int | None, messages: int | None) -> None:
        user = self.get(name).name
        puts, deletes = {}, []
        for col, value in ((LIMIT_STORAGE, storage), (LIMIT_MESSAGES, messages)):
            if value is None or value < 0:
                deletes.append(col)
            else:
                puts[col] = encode_counter(value)
        from .backends.base import Mutation
        self.table.mutate_rows([Mutation(self.keys.user_key(user), puts=puts, deletes=deletes)])


@dataclass(frozen=True)
class QuotaUsage:
    """A user's limits and what they use against them (what IMAP GETQUOTA reports, RFC 9208
    4.2.1): octets and messages stored; a limit of None is no limit."""

    storage_used: int
    storage_limit: int | None
    messages_used: int
    message_limit: int | None

    @property
    def limited(self) -> bool:
        return self.storage_limit is not None or self.message_limit is not None


def check_quota(user: User, used: tuple[int, int], add_bytes: int, add_messages: int) -> None:
    """Raise OverQuota if adding this much to ``used`` (bytes, messages) exceeds the limits.

    Concurrent deliveries may together overshoot by what is in flight; nothing is ever lost.
    """
    used_bytes, used_messages = used
    if user.storage_limit is not None and used_bytes + add_bytes > user.storage_limit:
        raise OverQuota(f"storage quota exceeded for {user.name}")
    if user.message_limit is not None and used_messages + add_messages > user.message_limit:
        raise OverQuota(f"message quota exceeded for {user.name}")
