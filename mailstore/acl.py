"""Access control lists (RFC 4314) and the namespaces they open (RFC 2342).

What is stored (docs/decisions/0018-acl.md):

* The ACL of a mailbox lives in its own row of ``JAMES_MAILBOXES``, one cell per identifier:
  ``m:a.<identifier>`` = the rights as letters (``m:a.-bob`` for bob's negative rights).  The
  row is read whole on every lookup already, so the rights of whoever asks cost no extra
  read, and the ACL follows the mailbox through renames.
* ``JAMES_ACL_INDEX`` answers "which mailboxes of others may USER see" with one prefix scan:
  a row ``grantee NUL mailbox UUID`` for every entry (``-bob`` for negative ones).  The
  mailbox row is the truth: an index row is only a candidate, checked against the row it
  names (a stale one, left by a crash between the two writes, over-approximates and is
  ignored).

Rights are computed by :func:`rights_of`, the one function every check goes through: the
owner has every right; anyone else the union of their own entry and ``anyone``'s, minus the
negative entries ``-user`` and ``-anyone`` (RFC 4314 2: rights not granted are denied;
negative rights take away).  Shared mailboxes (``Shared/...``) have no owner with rights: an
internal owner name that no account can have holds them (:data:`SHARED_OWNER`).

Names, as a client sees them:

* the user's own mailboxes: ``INBOX``, ``Work/2024``;
* other users' mailboxes: ``Other Users/<owner>/<name>`` (``Other Users/bob/Team``);
* shared mailboxes: ``Shared/<name>``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from . import keys, names
from .errors import InvalidName

RIGHTS = "lrswipkxtea"
"""RFC 4314 2.1: lookup, read, seen, write, insert, post, create (k), delete mailbox (x),
delete messages (t), expunge, administer."""
ALL_RIGHTS = frozenset(RIGHTS)
RESPONSE_ORDER = "lrwstipekxa"
"""The order rights are written in responses: Dovecot's, so transcripts compare."""
CREATE_RIGHTS = frozenset("kx")
"""What the obsolete ``c`` right (RFC 4314 2.1.1) stands for here: k and x, as Dovecot."""
DELETE_RIGHTS = frozenset("te")
"""What the obsolete ``d`` right stands for: t and e (RFC 4314 2.1.1's first group, whose
"create" is k and x: ``RIGHTS=texk``; as Dovecot)."""
WRITE_RIGHTS = frozenset("swite")
"""A SELECT without any of these is read-only (RFC 4314 4: nothing it could change)."""

ANYONE = "anyone"
SHARED_OWNER = "#shared"
"""The owner of the mailboxes under ``Shared/``.  No account can have this name (user names
start with a letter or digit, names.py), so nobody logs in as it and nobody has it as owner
rights; every right on a shared mailbox comes from its ACL."""

OTHER_USERS = "Other Users"
SHARED = "Shared"
NAMESPACE_ROOTS = (OTHER_USERS, SHARED)

ACL_PREFIX = b"m:a."
"""Qualifier prefix of the ACL cells of a mailbox row: ``m:a.<identifier>``."""


def acl_column(identifier: str) -> bytes:
    return ACL_PREFIX + identifier.encode()


def acl_from_row(row: Mapping[bytes, bytes]) -> dict[str, str]:
    """The ACL cells of a mailbox row as {identifier: rights letters}."""
    return {col[len(ACL_PREFIX):].decode(): val.decode()
            for col, val in row.items() if col.startswith(ACL_PREFIX)}


def rights_of(user: str, owner: str, acl: Mapping[str, str]) -> frozenset[str]:
    """The rights ``user`` has on a mailbox of ``owner`` whose ACL is ``acl`` (RFC 4314 2).

    The owner has them all (the ACL of one's own mailboxes does not lock one out, as in most
    servers; decision 0018).  Anyone else: their entry and ``anyone``'s, less the negative
    entries of either."""
    if user == owner:
        return ALL_RIGHTS
    granted = set(acl.get(user, "")) | set(acl.get(ANYONE, ""))
    granted -= set(acl.get("-" + user, "")) | set(acl.get("-" + ANYONE, ""))
    return frozenset(granted & ALL_RIGHTS)


def flag_changeable(rights: Iterable[str] | None):
    """Which flags holders of ``rights`` may change (RFC 4314 4, STORE): \\Seen with ``s``,
    \\Deleted with ``t``, every other flag with ``w``.  None when they may change all."""
    if rights is None:
        return None
    have = frozenset(rights)
    if {"s", "t", "w"} <= have:
        return None

    def changeable(flag: str) -> bool:
        if flag == "\\Seen":
            return "s" in have
        if flag == "\\Deleted":
            return "t" in have
        return "w" in have
    return changeable


def format_rights(rights: Iterable[str]) -> str:
    """Rights as written in MYRIGHTS and ACL responses: in :data:`RESPONSE_ORDER`, followed by
    the obsolete ``c`` and ``d`` when any right they stand for is there (RFC 4314 2.1.1)."""
    have = set(rights)
    text = "".join(r for r in RESPONSE_ORDER if r in have)
    if have & CREATE_RIGHTS:
        text += "c"
    if have & DELETE_RIGHTS:
        text += "d"
    return text


def parse_rights(text: str) -> tuple[str, frozenset[str]]:
    """A SETACL mod-rights string (RFC 4314 3.1): ``(mode, rights)``, mode ``+``, ``-`` or
    ``=`` (replace).  ``c`` and ``d`` expand to what they stand for (2.1.1: kx, te).  Raises
    ValueError for a letter that is no right."""
    mode = "="
    if text[:1] in ("+", "-"):
        mode, text = text[0], text[1:]
    out: set[str] = set()
    for letter in text:
        if letter == "c":
            out |= CREATE_RIGHTS
        elif letter == "d":
            out |= DELETE_RIGHTS
        elif letter in ALL_RIGHTS:
            out.add(letter)
        else:
            raise ValueError(f"Invalid ACL right: {letter}")
    return mode, frozenset(out)


def check_identifier(identifier: str) -> str:
    """An ACL identifier (RFC 4314 2: a user name, ``anyone``, either with a leading ``-``
    for negative rights), normalised; InvalidName if it is none of those."""
    negative = identifier.startswith("-")
    bare = identifier[1:] if negative else identifier
    if bare.lower() == ANYONE:
        bare = ANYONE
    else:
        bare = names.normalize_user(bare)
    return ("-" if negative else "") + bare


@dataclass(frozen=True)
class Location:
    """Where an IMAP mailbox name points: ``owner``'s mailbox ``name`` (store names)."""

    owner: str
    name: str


def locate(user: str, imap_name: str) -> Location | None:
    """The mailbox an IMAP name means to ``user`` (RFC 2342 namespaces); None for a name that
    can be no mailbox (a namespace root such as ``Other Users`` or ``Other Users/bob``).
    Raises InvalidName for a name the store cannot hold."""
    head, _, rest = imap_name.partition(names.DELIMITER)
    if head == OTHER_USERS:
        owner, _, name = rest.partition(names.DELIMITER)
        if not owner or not name:
            return None
        try:
            owner = names.normalize_user(owner)
        except InvalidName:
            return None
        if owner == user:
            # One's own mailboxes have one name only: the personal one.
            return None
        return Location(owner, names.normalize_mailbox(name))
    if head == SHARED:
        if not rest:
            return None
        return Location(SHARED_OWNER, names.normalize_mailbox(rest))
    if imap_name in NAMESPACE_ROOTS:
        return None
    return Location(user, names.normalize_mailbox(imap_name))


def public_name(user: str, owner: str, name: str) -> str:
    """The IMAP name of ``owner``'s mailbox ``name`` as ``user`` sees it."""
    if owner == user:
        return name
    if owner == SHARED_OWNER:
        return f"{SHARED}/{name}"
    return f"{OTHER_USERS}/{owner}/{name}"


class Grants:
    """The ACL cells of mailbox rows and the per-grantee index (JAMES_ACL_INDEX).

    Write order keeps the index a superset of the truth: a grant writes its index row before
    the mailbox cell, a revocation removes the cell before the index row.  So a crash in
    between leaves at most an index row to a mailbox that does not grant (ignored when read,
    since rights always come from the mailbox row), never a grant the index cannot find.
    """

    def __init__(self, backend, user_keys: keys.UserKeys | None = None):
        from .schema import ACL_INDEX, MAILBOXES
        self.keys = user_keys or keys.UserKeys()
        self.rows = backend.table(MAILBOXES.name)
        self.index = backend.table(ACL_INDEX.name)

    def set(self, mailbox_id: bytes, identifier: str, rights: frozenset[str]) -> None:
        """Give ``identifier`` exactly ``rights`` on the mailbox (none: remove its entry)."""
        if rights:
            self.index.put(self.keys.acl_index_key(identifier, mailbox_id), {b"g:r": b"1"})
            text = "".join(r for r in RIGHTS if r in rights)
            self.rows.put(mailbox_id, {acl_column(identifier): text.encode()})
        else:
            self.rows.delete(mailbox_id, [acl_column(identifier)])
            self.index.delete(self.keys.acl_index_key(identifier, mailbox_id))

    def forget(self, mailbox_id: bytes, acl: Mapping[str, str]) -> None:
        """Drop the index rows of a mailbox that is being deleted."""
        for identifier in acl:
            self.index.delete(self.keys.acl_index_key(identifier, mailbox_id))

    def candidates(self, user: str, with_anyone: bool = True) -> list[bytes]:
        """Ids of the mailboxes whose ACL may grant ``user`` something: those with an entry
        for ``user`` or for ``anyone`` (two bounded prefix scans, no scan of all users).
        Without ``with_anyone``: those with an entry for ``user`` or ``-user``."""
        found: list[bytes] = []
        for grantee in (user, ANYONE) if with_anyone else (user, "-" + user):
            prefix = self.keys.acl_index_prefix(grantee)
            found += [keys.acl_index_mailbox(key)
                      for key, _ in self.index.scan(prefix=prefix, columns=[b"g:r"])]
        return list(dict.fromkeys(found))
