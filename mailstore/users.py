"""Accounts: password hashes and quota limits.

Passwords are hashed with scrypt from the standard library (memory-hard, no extra dependency);
the stored string names its parameters so they can be raised later without breaking old hashes.
A user's usage is not stored: it is the sum of their mailboxes' counters (one prefix scan and
one multi-get), which saves a write on every append and a counter that could drift.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import heapq
import hmac
import os
import threading
import time
from collections.abc import Callable, Iterator
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
    (~50 ms of CPU) each time -- Dovecot's auth cache does the same job
    (docs/decisions/0030-auth-cache.md).

    Keys are an HMAC-SHA256, under a random secret of this process, of (user, stored hash,
    password): no password is kept, and a changed password -- by this process or another
    (``mailadmin user passwd``) -- changes the stored hash, which every login reads, so the
    old password misses at once.  Only successes are remembered: a wrong password always
    goes to scrypt.  Entries expire ``ttl`` seconds after the check that made them; at most
    ``size`` are kept (the expired, then the oldest, dropped first).  ``size`` or ``ttl`` of
    0 turns the cache off.  Safe to call from several threads.

    Checks of one (user, stored hash, password) run one at a time (:meth:`checking`): when
    many sessions of a user log in at once on a cold cache (a restart under 200 clients), the
    first pays scrypt and the others find its entry, instead of each paying the same hash.
    """

    def __init__(self, clock: Callable[[], float], ttl: float = 3600.0, size: int = 10000):
        self.clock = clock
        self.ttl = ttl
        self.size = size
        self.secret = os.urandom(32)
        self.entries: dict[bytes, float] = {}  # key -> expiry, oldest first
        self.lock = threading.Lock()
        self.flights: dict[bytes, list] = {}  # key -> [lock, holders and waiters]

    @property
    def enabled(self) -> bool:
        return self.size > 0 and self.ttl > 0

    def _key(self, user: str, stored: bytes, password: str) -> bytes:
        mac = hmac.new(self.secret, digestmod=hashlib.sha256)
        for part in (user.encode(), stored, password.encode()):
            # Length-prefixed, so no choice of fields can collide with another's.
            mac.update(len(part).to_bytes(4, "big") + part)
        return mac.digest()

    def hit(self, user: str, stored: bytes, password: str) -> bool:
        if not self.enabled:
            return False
        key = self._key(user, stored, password)
        expires = self.entries.get(key)
        if expires is None:
            return False
        if expires > self.clock():
            return True
        with self.lock:
            self.entries.pop(key, None)
        return False

    def remember(self, user: str, stored: bytes, password: str) -> None:
        if not self.enabled:
            return
        key = self._key(user, stored, password)
        now = self.clock()
        with self.lock:
            if len(self.entries) >= self.size:
                self._evict(now)
            self.entries.pop(key, None)  # re-inserted last: the order stays by expiry
            self.entries[key] = now + self.ttl

    @contextlib.contextmanager
    def checking(self, user: str, stored: bytes, password: str) -> Iterator[None]:
        """Held while this login is checked (the cache asked, scrypt run, the result
        remembered): other checks of the same login wait for it, then ask the cache again."""
        if not self.enabled:
            yield
            return
        key = self._key(user, stored, password)
        with self.lock:
            flight = self.flights.setdefault(key, [threading.Lock(), 0])
            flight[1] += 1
        try:
            with flight[0]:
                yield
        finally:
            with self.lock:
                flight[1] -= 1
                if not flight[1]:
                    del self.flights[key]

    def _evict(self, now: float) -> None:
        """Make room: drop the expired entries, and if that freed too little a tenth of the
        oldest (insertion order is expiry order, the TTL being one)."""
        for old in [k for k, expires in self.entries.items() if expires <= now]:
            del self.entries[old]
        if len(self.entries) >= self.size:
            for old in list(self.entries)[:self.size // 10 or 1]:
                del self.entries[old]

    def clear(self) -> None:
        with self.lock:
            self.entries.clear()


class Users:
    def __init__(self, backend: Backend, clock: Callable[[], float] = time.time,
                 user_keys: keys.UserKeys | None = None, auth_cache_size: int = 10000,
                 auth_cache_ttl: float = 3600.0):
        self.table = backend.table(USERS.name)
        self.keys = user_keys or keys.UserKeys()
        self.clock = clock
        self.cache = VerifiedCache(clock, auth_cache_ttl, auth_cache_size)

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

    def _stored_hash(self, name: str) -> tuple[str | None, bytes | None]:
        """(canonical name, stored password hash) -- (None, None) for a malformed name,
        (name, None) for an unknown user: one read of one cell."""
        try:
            user = names.normalize_user(name)
        except InvalidName:
            return None, None
        return user, self.table.row(self.keys.user_key(user), [PASSWORD]).get(PASSWORD)

    def authenticate_cached(self, name: str, password: str) -> str | None:
        """The canonical user name if this very password was verified against the user's
        current stored hash within the cache's TTL; else None, which means "not known" (a
        wrong password, an unknown user and a cache miss alike): ask :meth:`authenticate`.
        One read of the password cell and one HMAC, no scrypt: cheap enough for the reactor
        on a store whose reads are local."""
        user, stored = self._stored_hash(name)
        if user and stored and self.cache.hit(user, stored, password):
            return user
        return None

    def authenticate(self, name: str, password: str) -> str | None:
        """The canonical user name if the password is right, else None (same cost either way:
        an unknown or malformed name is checked against a dummy hash)."""
        user, stored = self._stored_hash(name)
        if not (user and stored):
            verify_password(password, _dummy_hash())
            return None
        with self.cache.checking(user, stored, password):
            if self.cache.hit(user, stored, password):
                return user
            ok = verify_password(password, stored.decode())
            if ok:
                self.cache.remember(user, stored, password)
        return user if ok else None

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
