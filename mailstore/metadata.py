"""Mailbox and server annotations (RFC 5464 METADATA): entry names, limits, storage.

An *entry* is a slash-separated name under ``/private`` (each user's own) or ``/shared``
(everyone with access to the mailbox sees the same value), with one value of octets.  Entries
hang off a mailbox or off the server (RFC 5464 3.1); here the server is ``mailbox=None``.

Storage (``JAMES_METADATA``, docs/decisions/0019-metadata.md): one row per (owner of the
entries, scope), one cell per entry, ``e:<entry name>``:

* a mailbox's shared entries: ``<mailbox UUID> 's'``;
* a user's private entries on a mailbox: ``<mailbox UUID> 'p' <user>``;
* the server's shared entries: ``<keys.SERVER_METADATA> 's'``, one row for the whole store;
* a user's private server entries: ``<keys.SERVER_METADATA> 'p' <user>``.

So every entry of a mailbox is one prefix scan of its UUID (DELETE drops them with it), a
RENAME changes nothing (the UUID stays), and what one user reads or writes on one mailbox is
one multi-get of two rows.  Each row also holds ``c:seq``, a counter incremented with every
change to the row: the cross-process signal NOTIFY's MailboxMetadataChange (RFC 5465 5.4)
polls, as IDLE polls the mailbox counters (:meth:`Metadata.marks`).

Two entries are not stored here but read from elsewhere (RFC 5464 3.2.1's registry):
``/private/specialuse`` is the mailbox's special use (RFC 6154 3, the mailbox row's
``m:special``), and the server's ``/shared/admin`` is the administrator's address from the
configuration (:class:`Policy`), read-only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from . import keys
from .backends.base import Backend, Mutation, decode_counter, delete_rows
from .errors import InvalidName, MailStoreError, OverQuota, TooLarge
from .schema import METADATA

PRIVATE, SHARED = "/private", "/shared"
SPECIALUSE = "/private/specialuse"
ADMIN = "/shared/admin"
SIEVE_LOG = "/private/vendor/hbase-imap/sieve/log"
"""The user's last Sieve runtime errors, read-only (mailstore/sieve/errorlog.py)."""
SEQ = b"c:seq"
ENTRY_FAMILY = b"e:"

METADATA_RIGHTS = "rswip"
"""RFC 5464 3.3: with ACLs, a user reads or writes a mailbox's annotations (shared or private)
only with ``l`` and any one of these (as Dovecot's acl plugin checks it)."""

DEPTHS = {"0": 0, "1": 1, "infinity": None}
"""RFC 5464 4.2.2's DEPTH values; None is infinity."""


class InvalidEntry(InvalidName):
    """An entry name RFC 5464 3.2 does not allow (the command is malformed)."""


class EntryTooLarge(TooLarge):
    """A value over the largest one the server accepts (RFC 5464 4.3: ``[METADATA MAXSIZE
    n]``); ``limit`` is that size in octets."""

    def __init__(self, limit: int):
        super().__init__(f"metadata values are limited to {limit} octets")
        self.limit = limit


class TooManyEntries(MailStoreError):
    """The change would give a mailbox (or the server) more entries than allowed (RFC 5464
    4.3: ``[METADATA TOOMANY]``)."""


class ReadOnlyEntry(MailStoreError):
    """An entry users cannot set (``/shared/admin``, the server's other shared entries)."""


class BadSpecialUse(MailStoreError):
    """A ``/private/specialuse`` value this server cannot give a mailbox (RFC 6154 3:
    ``[USEATTR]``)."""


@dataclass(frozen=True)
class Policy:
    """Limits and fixed values, from ``[imap] metadata_*`` (conf/imapserver.conf).

    ``max_value``: largest value, octets.  ``max_entries``: entries one user may hold on one
    mailbox (its shared entries and their own private ones) or on the server (their private
    ones).  ``max_user_octets``: all the values a user has written (private entries anywhere,
    shared entries of their own mailboxes) may add up to this.  ``admin``: the server's
    ``/shared/admin`` (RFC 5464 6.2.2: a URI to reach the administrator), empty for none.
    """

    max_value: int = 65536
    max_entries: int = 100
    max_user_octets: int = 1024 * 1024
    admin: str = ""


DEFAULT_POLICY = Policy()


def entry_name(text: str) -> str:
    """``text`` checked as an entry name (RFC 5464 3.2) and lower-cased: names are case
    insensitive, so they are kept and shown lower case (as Dovecot does).  Raises InvalidEntry.

    Rules: begins with ``/private`` or ``/shared`` (the whole name, or followed by ``/``); no
    ``*`` or ``%`` (5: they would be list wildcards); no ``//`` and no trailing ``/``; no
    control characters; valid UTF-8 (the caller decoded it)."""
    if not text.startswith("/"):
        raise InvalidEntry("Entry name must begin with '/'")
    if "//" in text:
        raise InvalidEntry("Entry name cannot contain consecutive '/'")
    if text.endswith("/"):
        raise InvalidEntry("Entry name cannot end with '/'")
    if "*" in text or "%" in text:
        raise InvalidEntry("Entry name cannot contain '*' or '%'")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise InvalidEntry("Entry name cannot contain control characters")
    name = text.lower()
    top = "/" + name.split("/", 2)[1]
    if top not in (PRIVATE, SHARED):
        raise InvalidEntry("Entry name must begin with /private or /shared")
    return name


def under(name: str, root: str, depth: int | None) -> bool:
    """Whether ``name`` is ``root`` or below it within ``depth`` levels (None: any)."""
    if name == root:
        return True
    if not name.startswith(root + "/"):
        return False
    return depth is None or name[len(root) + 1:].count("/") < depth


def _row(mailbox_id: bytes | None, private: bool, user: str) -> bytes:
    return keys.metadata_key(mailbox_id, user if private else None)


def _cell(name: str) -> bytes:
    return ENTRY_FAMILY + name.encode()


def _entries(row: Mapping[bytes, bytes]) -> dict[str, bytes]:
    return {col[len(ENTRY_FAMILY):].decode(): value for col, value in row.items()
            if col.startswith(ENTRY_FAMILY)}


class Metadata:
    """The entries of ``JAMES_METADATA`` (see the module docstring)."""

    def __init__(self, backend: Backend):
        self.table = backend.table(METADATA.name)

    def read(self, mailbox_id: bytes | None, user: str) -> dict[str, bytes]:
        """Every stored entry ``user`` sees on a mailbox (None: the server): the shared ones
        and their own private ones, by name, in one multi-get."""
        found: dict[str, bytes] = {}
        for _key, row in self.table.rows([_row(mailbox_id, False, user),
                                          _row(mailbox_id, True, user)], [b"e"]):
            found.update(_entries(row))
        return found

    def read_many(self, mailbox_ids: Sequence[bytes | None], user: str
                  ) -> dict[bytes | None, dict[str, bytes]]:
        """:meth:`read` for many mailboxes (None: the server) in one multi-get."""
        rows = {}
        for mailbox_id in mailbox_ids:
            rows[_row(mailbox_id, False, user)] = mailbox_id
            rows[_row(mailbox_id, True, user)] = mailbox_id
        found: dict[bytes | None, dict[str, bytes]] = {}
        for key, row in self.table.rows(list(rows), [b"e"]):
            entries = _entries(row)
            if entries:
                found.setdefault(rows[key], {}).update(entries)
        return found

    def write(self, mailbox_id: bytes | None, user: str,
              changes: Mapping[str, bytes | None]) -> None:
        """Apply ``changes`` (name -> value, None deletes): each row's cells and its change
        counter in one atomic row mutation, then the counter.  Checked names only."""
        by_row: dict[bytes, dict[str, bytes | None]] = {}
        for name, value in changes.items():
            by_row.setdefault(_row(mailbox_id, name.startswith(PRIVATE + "/"), user),
                              {})[name] = value
        mutations = []
        for key, cells in sorted(by_row.items()):
            puts = {_cell(n): v for n, v in cells.items() if v is not None}
            deletes = [_cell(n) for n, v in cells.items() if v is None]
            mutations.append(Mutation(key, puts=puts, deletes=deletes))
        self.table.mutate_rows(mutations)
        for key in sorted(by_row):
            self.table.increment(key, SEQ, 1)

    def marks(self, mailbox_ids: Sequence[bytes | None], user: str) -> dict[bytes | None, int]:
        """How often the entries ``user`` sees on each mailbox (None: the server) have
        changed, in one multi-get: a value that moved means a change (NOTIFY's
        MailboxMetadataChange, RFC 5465 5.4).  Mailboxes never annotated count 0."""
        rows = {}
        for mailbox_id in mailbox_ids:
            rows[_row(mailbox_id, False, user)] = mailbox_id
            rows[_row(mailbox_id, True, user)] = mailbox_id
        result = dict.fromkeys(mailbox_ids, 0)
        for key, row in self.table.rows(list(rows), [SEQ]):
            result[rows[key]] += decode_counter(row.get(SEQ))
        return result

    def octets(self, mailbox_ids: Iterable[bytes], user: str) -> tuple[int, int]:
        """(octets, entries) of what ``user`` has written: their private entries on the
        server and on ``mailbox_ids``, and the shared entries of ``mailbox_ids`` (their own
        mailboxes); one multi-get."""
        wanted = [_row(None, True, user)]
        for mailbox_id in mailbox_ids:
            wanted += [_row(mailbox_id, False, user), _row(mailbox_id, True, user)]
        total = count = 0
        for _key, row in self.table.rows(wanted, [b"e"]):
            for name, value in _entries(row).items():
                total += len(name) + len(value)
                count += 1
        return total, count

    def drop_mailbox(self, mailbox_id: bytes) -> int:
        """Delete every entry of a mailbox, shared and every user's private (one bounded
        prefix scan): DELETE takes its annotations with it (RFC 5464 3.1)."""
        return delete_rows(self.table, prefix=mailbox_id)

    def drop_user(self, user: str) -> None:
        """Delete ``user``'s private server entries (the account is going)."""
        self.table.delete(_row(None, True, user))


def digests(entries: Mapping[str, bytes]) -> dict[str, bytes]:
    """Entry name -> a short digest of its value: what a watcher keeps to tell later which
    entries changed (:func:`changed_entries`) without holding the values."""
    return {name: hashlib.blake2b(value, digest_size=12).digest()
            for name, value in entries.items()}


def changed_entries(before: Mapping[str, bytes], after: Mapping[str, bytes]) -> list[str]:
    """The entries set, changed or removed between two :func:`digests` of one mailbox's
    entries, sorted: the entry-list of an unsolicited METADATA response (RFC 5464 4.4.2)."""
    return sorted(name for name in set(before) | set(after)
                  if before.get(name) != after.get(name))


def select(stored: Mapping[str, bytes], requested: Sequence[str], depth: int | None
           ) -> list[tuple[str, bytes | None]]:
    """GETMETADATA's answer (RFC 5464 4.2, 4.2.2): each requested entry in the order asked,
    followed by its existing descendants within ``depth`` (sorted), each entry once.  A
    requested entry without a value is there as None with DEPTH 0 and left out otherwise (a
    subtree is asked for what it holds), as Dovecot does."""
    out: list[tuple[str, bytes | None]] = []
    seen: set[str] = set()
    for root in requested:
        if root not in seen and (depth == 0 or root in stored):
            seen.add(root)
            out.append((root, stored.get(root)))
        if depth == 0:
            continue
        for name in sorted(stored):
            if name != root and name not in seen and under(name, root, depth):
                seen.add(name)
                out.append((name, stored[name]))
    return out


SETTABLE_USES = ("\\Archive", "\\Drafts", "\\Junk", "\\Sent", "\\Trash")
"""Special uses ``/private/specialuse`` can give (those CREATE's USE can: a mailbox of ours
holds real messages, so not the virtual \\All or \\Flagged; imapserver special_use.py)."""


def special_use_value(value: bytes | None) -> str | None:
    """The special use a ``/private/specialuse`` value asks for (RFC 6154 3: a space-separated
    list of use attributes; NIL or empty clears it).  Raises BadSpecialUse for more than one
    or for one this server cannot give."""
    if value is None:
        return None
    try:
        words = value.decode("ascii").split()
    except UnicodeDecodeError:
        raise BadSpecialUse("special-use attributes are US-ASCII") from None
    if not words:
        return None
    if len(words) > 1:
        raise BadSpecialUse("a mailbox can have only one special use here")
    by_name = {use.lower(): use for use in SETTABLE_USES}
    use = by_name.get(words[0].lower())
    if use is None:
        raise BadSpecialUse(f"special use {words[0]} cannot be given to a mailbox here")
    return use


class Annotations:
    """GETMETADATA and SETMETADATA in mail terms, over the mailboxes and :class:`Metadata`."""

    def __init__(self, metadata: Metadata, mailboxes):
        self.metadata = metadata
        self.mailboxes = mailboxes
        self.computed: dict[str, Callable[[str], bytes | None]] = {}
        """Private server entries the server writes and users only read: entry name ->
        ``value(user)`` (None: absent).  The Sieve error log is one (decision 0025)."""

    def get(self, user: str, mailbox_name: str | None, names: Sequence[str],
            depth: int | None, policy: Policy) -> tuple[str | None, list]:
        """(the mailbox's name as stored, [(entry, value or None), ...]): ``names`` (checked
        entry names) and their descendants within ``depth`` (RFC 5464 4.2), of ``user``'s own
        mailbox ``mailbox_name`` (None: the server).  Raises NotFound for a missing mailbox."""
        mailbox = None if mailbox_name is None else self.mailboxes.get(user, mailbox_name)
        return (None if mailbox is None else mailbox.name,
                self.get_on(user, mailbox, names, depth, policy))

    def get_on(self, user: str, mailbox, names: Sequence[str], depth: int | None,
               policy: Policy) -> list[tuple[str, bytes | None]]:
        """GETMETADATA on a mailbox already looked up and checked (None: the server): the
        shared entries and ``user``'s own private ones.  ``/private/specialuse`` is the
        owner's (RFC 6154 3: the mailbox's use as its owner set it), so only the owner reads
        it; another reader's ``/private`` entries are their own (RFC 5464 3.3)."""
        if mailbox is None:
            stored = self.metadata.read(None, user)
            if policy.admin:
                stored[ADMIN] = policy.admin.encode()
            for name, value_of in self.computed.items():
                if any(under(name, n, depth) for n in names):
                    value = value_of(user)
                    if value is not None:
                        stored[name] = value
            return select(stored, names, depth)
        stored = self.metadata.read(mailbox.id, user)
        if mailbox.special_use and mailbox.owner == user:
            stored[SPECIALUSE] = mailbox.special_use.encode()
        return select(stored, names, depth)

    def set(self, user: str, mailbox_name: str | None,
            changes: Sequence[tuple[str, bytes | None]], policy: Policy) -> bool:
        """SETMETADATA (RFC 5464 4.3) on ``user``'s own mailbox ``mailbox_name`` (None: the
        server); see :meth:`set_on`."""
        mailbox = None if mailbox_name is None else self.mailboxes.get(user, mailbox_name)
        return self.set_on(user, mailbox, changes, policy)

    def set_on(self, user: str, mailbox, changes: Sequence[tuple[str, bytes | None]],
               policy: Policy) -> bool:
        """SETMETADATA (RFC 5464 4.3) on a mailbox already looked up and checked (None: the
        server): set (bytes) or remove (None) each entry, all or none.  Every check comes
        before the first write.  True if anything stored changed (for NOTIFY's
        MailboxMetadataChange, RFC 5465 5.6).  Raises InvalidEntry, EntryTooLarge,
        TooManyEntries, OverQuota (the user's octets), ReadOnlyEntry (also
        ``/private/specialuse`` of a mailbox not the user's: the owner's setting), BadSpecialUse.
        """
        wanted: dict[str, bytes | None] = {}
        for name, value in changes:
            name = entry_name(name)
            if name in (PRIVATE, SHARED):
                raise InvalidEntry(f"{name} itself holds no value")
            parts = name.split("/")  # "", scope, "vendor", vendor-token, entry...
            if mailbox is None and name in self.computed:
                raise ReadOnlyEntry(f"{name} is written by the server")
            if len(parts) > 2 and parts[2] == "vendor" and len(parts) < 5:
                # RFC 5464 3.2.1, 6: /shared/vendor/<vendor-token> is the top of one
                # vendor's entries (as mox requires, a name below it is needed).
                raise InvalidEntry("vendor entries are /private|/shared/vendor/<token>/<name>")
            if value is not None and len(value) > policy.max_value:
                raise EntryTooLarge(policy.max_value)
            wanted[name] = value  # the last value given wins, as in Dovecot
        if mailbox is None:
            if any(name.startswith(SHARED + "/") for name in wanted):
                # One row for every user of the store: the administrator's, not theirs
                # (RFC 5464 3.2.2 lets a server restrict server entries).
                raise ReadOnlyEntry("server /shared entries are set by the administrator")
        use_change = SPECIALUSE in wanted and mailbox is not None
        if use_change and mailbox.owner != user:
            raise ReadOnlyEntry("/private/specialuse of another user's mailbox is theirs")
        use = special_use_value(wanted.pop(SPECIALUSE)) if use_change else None
        changed = False
        if wanted:
            self._check_limits(user, mailbox, wanted, policy)
            before = self.metadata.read(mailbox.id if mailbox else None, user)
            changed = any(before.get(n) != v for n, v in wanted.items())
            self.metadata.write(mailbox.id if mailbox else None, user, wanted)
        if use_change:
            changed = changed or use != (mailbox.special_use or None)
            self.mailboxes.set_special_use(mailbox.id, use)
        return changed

    def _check_limits(self, user: str, mailbox, wanted: Mapping[str, bytes | None],
                      policy: Policy) -> None:
        """TOOMANY for the entries of this mailbox (or the server) as ``user`` sees them;
        OverQuota for the octets ``user`` has written in all.  Changes that shrink either
        always pass, so a user over a lowered limit can still clean up."""
        current = self.metadata.read(mailbox.id if mailbox else None, user)
        after = {**current, **wanted}
        after = {n: v for n, v in after.items() if v is not None}
        if len(after) > policy.max_entries and len(after) > len(current):
            raise TooManyEntries(f"at most {policy.max_entries} entries per mailbox")
        grow = sum(len(n) + len(v) for n, v in after.items()) - \
            sum(len(n) + len(v) for n, v in current.items())
        if grow <= 0:
            return
        ids = {m.id for m in self.mailboxes.list(user)}
        if mailbox is not None:
            ids.add(mailbox.id)
        used, _count = self.metadata.octets(sorted(ids), user)
        if used + grow > policy.max_user_octets:
            raise OverQuota(f"metadata limited to {policy.max_user_octets} octets per user")

    def set_server_shared(self, name: str, value: bytes | None) -> None:
        """Set (or with None remove) a server ``/shared`` entry: the administrator's
        (``mailadmin``); users cannot."""
        name = entry_name(name)
        if not name.startswith(SHARED + "/") or name == ADMIN:
            raise ReadOnlyEntry(f"{name} is not a server /shared entry set here")
        self.metadata.write(None, "", {name: value})
