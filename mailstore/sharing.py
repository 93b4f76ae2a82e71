"""Mailboxes by the names a user sees them by, with the rights the ACL gives (RFC 4314, 2342).

The one choke point for every access to a mailbox named by a client: :func:`open_mailbox`
maps the name to its owner's mailbox (mailstore/acl.py namespaces), works out the caller's
rights with :func:`acl.rights_of` and refuses what they do not allow.  A mailbox the caller
may not see answers exactly as one that does not exist: same error, same text (the name as
given), and the same store reads on both paths (RFC 4314 6: no existence oracle).

Messages of a shared mailbox stay in the owner's mailbox (one copy, on the owner's quota);
sessions of other users select that same mailbox, so IDLE and refreshes reach them as they
reach the owner's.  Flags are the mailbox's, shared by everyone who may read it (no private
\\Seen per user, as Dovecot without its private-flags index).
"""

from __future__ import annotations

import unicodedata
from dataclasses import replace

from . import names
from .acl import (
    ALL_RIGHTS,
    SHARED_OWNER,
    Location,
    acl_from_row,
    check_identifier,
    locate,
    parse_rights,
    public_name,
    rights_of,
)
from .errors import InvalidName, NotFound, PermissionDenied
from .mailboxes import LIVE, Mailbox

DENIED = "Permission denied"


def _missing(imap_name: str) -> NotFound:
    return NotFound(f"no such mailbox: {imap_name}")


def _locate(user: str, imap_name: str) -> Location:
    location = locate(user, imap_name)
    if location is None:
        raise _missing(imap_name)
    return location


def open_mailbox(store, user: str, imap_name: str, need: str = "", any_of: str = ""
                 ) -> tuple[Mailbox, frozenset[str]]:
    """``(mailbox, rights)`` for the mailbox ``user`` calls ``imap_name``, if the ACL grants
    every right in ``need`` (with ``need`` empty: any right at all, as MYRIGHTS asks) and,
    with ``any_of``, at least one of those (METADATA: ``l`` and one of ``rswip``).

    The name is looked up as given, then, if no mailbox has it, in Unicode NFC: mailbox names
    are Net-Unicode (RFC 9051 5.1, RFC 6855 3, RFC 5198 2), and CREATE and RENAME store a
    UTF-8 session's names in NFC, so the decomposed spelling of such a name reaches it while a
    mailbox an IMAP4rev1 client created decomposed stays reachable as it was created.  Both
    lookups run for a hidden mailbox as for a missing one (no oracle).

    Raises NotFound (text ``no such mailbox: <imap_name>``) when it does not exist or the
    user lacks ``l`` as well as what is needed, PermissionDenied when the user may see it but
    not do this (RFC 4314 4, 6), InvalidName for a name no mailbox can have."""
    try:
        return _open(store, user, imap_name, need, any_of)
    except NotFound:
        composed = unicodedata.normalize("NFC", imap_name)
        if composed == imap_name:
            raise
    try:
        return _open(store, user, composed, need, any_of)
    except NotFound:
        raise _missing(imap_name) from None


def _open(store, user: str, imap_name: str, need: str, any_of: str
          ) -> tuple[Mailbox, frozenset[str]]:
    location = _locate(user, imap_name)
    if location.owner == user:
        try:
            return store.mailbox(user, location.name), ALL_RIGHTS
        except NotFound:
            raise _missing(imap_name) from None
    try:
        mailbox = store.mailboxes.get(location.owner, location.name, uniform=True)
    except NotFound:
        raise _missing(imap_name) from None
    rights = rights_of(user, mailbox.owner, mailbox.acl)
    if not _allows(rights, need) or (any_of and not rights & set(any_of)):
        if "l" in rights:
            raise PermissionDenied(DENIED)
        raise _missing(imap_name)
    # Granted: now as the owner's own lookups get it (rolled forward, fresh counters).
    return store.mailbox(mailbox.owner, mailbox.name), rights


def current_rights(store, user: str, mailbox: Mailbox) -> frozenset[str]:
    """``user``'s rights on ``mailbox`` as its ACL says now (one get of the row's meta
    cells): for a session that has another user's mailbox selected, at each refresh."""
    if user == mailbox.owner:
        return ALL_RIGHTS
    row = store.mailboxes.rows.row(mailbox.id, [b"m"])
    if row.get(b"m:state") != LIVE:
        return frozenset()
    return rights_of(user, mailbox.owner, acl_from_row(row))


def _allows(rights: frozenset[str], need: str) -> bool:
    return bool(rights) if not need else set(need) <= rights


def visible_mailboxes(store, user: str) -> list[tuple[Mailbox, frozenset[str]]]:
    """Every mailbox ``user`` may list (own ones, and others' whose ACL gives ``l``), each a
    copy named as the user sees it (``Other Users/bob/Team``), with the user's rights.

    Others' mailboxes come from the grant index (two prefix scans) and one multi-get of
    their rows: no scan of other users' mailboxes."""
    found = [(m, ALL_RIGHTS) for m in store.list_mailboxes(user)]
    ids = store.grants.candidates(user)
    if ids:
        for mailbox_id, row in store.mailboxes.rows.rows(ids):
            if row.get(b"m:state") != LIVE:
                continue
            mailbox = Mailbox.from_row(mailbox_id, row)
            if mailbox.owner == user:
                continue
            rights = rights_of(user, mailbox.owner, mailbox.acl)
            if "l" in rights:
                found.append((replace(mailbox, name=public_name(user, mailbox.owner,
                                                                mailbox.name)), rights))
    return found


def seen_by_id(store, user: str, mailbox_ids) -> dict[bytes, tuple[Mailbox, frozenset[str]]]:
    """The live ones of ``mailbox_ids``, each a copy named as ``user`` sees it, with
    ``user``'s rights as its ACL says now (one multi-get; rights may be none): for NOTIFY,
    which re-checks them each time it reports on a mailbox (RFC 5465 5.9, RFC 4314 4)."""
    found = {}
    for mailbox_id, mailbox in store.mailboxes.load_many(list(mailbox_ids)).items():
        rights = rights_of(user, mailbox.owner, mailbox.acl)
        found[mailbox_id] = (replace(mailbox, name=public_name(user, mailbox.owner,
                                                               mailbox.name)), rights)
    return found


def create_mailbox(store, user: str, imap_name: str, special_use: str | None = None
                   ) -> Mailbox:
    """CREATE (RFC 3501 6.3.3) by the name the user sees.  In another user's or the shared
    namespace it needs ``k`` on the parent (RFC 4314 4), which must exist; the new mailbox
    starts with the parent's ACL, so whoever could create it can see it (as Dovecot)."""
    location = locate(user, imap_name)
    if location is None:
        raise InvalidName(f"cannot create a mailbox named {imap_name}")
    if location.owner == user:
        return store.create_mailbox(user, location.name, special_use)
    parents = names.parent_names(location.name)
    if not parents:
        raise PermissionDenied(DENIED)  # top level of a namespace: mailadmin's to create
    try:
        parent = store.mailboxes.get(location.owner, parents[-1], uniform=True)
    except NotFound:
        raise PermissionDenied(DENIED) from None
    if "k" not in rights_of(user, parent.owner, parent.acl):
        raise PermissionDenied(DENIED)
    mailbox = store.create_mailbox(location.owner, location.name, special_use)
    for identifier, letters in parent.acl.items():
        store.grants.set(mailbox.id, identifier, frozenset(letters))
    mailbox.acl = dict(parent.acl)
    store.bump_grantees(mailbox.acl)  # a mailbox new to them (RFC 5465 5.4)
    return mailbox


def delete_mailbox(store, user: str, imap_name: str) -> Mailbox:
    """DELETE (RFC 3501 6.3.4): needs ``x`` (RFC 4314 4).  Children stay a reason to refuse
    (NO [HASCHILDREN]: raised as AlreadyExists is not, so the caller checks them)."""
    mailbox, _rights = open_mailbox(store, user, imap_name, "x")
    store.delete_mailbox(mailbox.owner, mailbox.name)
    return mailbox


def has_children(store, mailbox: Mailbox) -> bool:
    return bool(store.mailboxes.list(mailbox.owner, under=mailbox.name))


def rename_mailbox(store, user: str, old: str, new: str) -> list[Mailbox]:
    """RENAME (RFC 3501 6.3.5): ``x`` on the mailbox, ``k`` on the new parent (RFC 4314 4),
    within one owner's mailboxes."""
    mailbox, _rights = open_mailbox(store, user, old, "x")
    target = locate(user, new)
    if target is None:
        raise InvalidName(f"cannot rename to {new}")
    if target.owner != mailbox.owner:
        raise InvalidName("a mailbox cannot move to another user's namespace")
    if target.owner != user:
        parents = names.parent_names(target.name)
        if not parents:
            raise PermissionDenied(DENIED)
        try:
            parent = store.mailboxes.get(target.owner, parents[-1], uniform=True)
        except NotFound:
            raise PermissionDenied(DENIED) from None
        if "k" not in rights_of(user, parent.owner, parent.acl):
            raise PermissionDenied(DENIED)
    return store.rename_mailbox(mailbox.owner, mailbox.name, target.name)


# -- ACL commands (RFC 4314 3) ---------------------------------------------------------------

def acl_entries(mailbox: Mailbox) -> list[tuple[str, frozenset[str]]]:
    """The ACL as GETACL shows it: the stored entries by identifier, then the owner's implicit
    all-rights entry (none for a shared mailbox, which has no owner with rights)."""
    entries = [(ident, frozenset(letters)) for ident, letters in sorted(mailbox.acl.items())
               if ident != mailbox.owner and letters]
    if mailbox.owner != SHARED_OWNER:
        entries.append((mailbox.owner, ALL_RIGHTS))
    return entries


def set_acl(store, user: str, imap_name: str, identifier: str, mod_rights: str
            ) -> frozenset[str]:
    """SETACL (RFC 4314 3.1): needs ``a``; returns the identifier's rights now.
    ValueError for a right letter that is none; InvalidName for a bad identifier."""
    mode, rights = parse_rights(mod_rights)
    identifier = check_identifier(identifier)
    mailbox, _ = open_mailbox(store, user, imap_name, "a")
    current = frozenset(mailbox.acl.get(identifier, ""))
    new = rights if mode == "=" else current | rights if mode == "+" else current - rights
    store.grants.set(mailbox.id, identifier, new)
    _announce(store, identifier)
    return new


def _announce(store, identifier: str) -> None:
    """What a user sees changed with their rights: their NOTIFY sessions look at their
    mailboxes again (RFC 5465 5.9); ``-bob``'s change is bob's."""
    store.bump_grantees({identifier.lstrip("-"): ""})


def delete_acl(store, user: str, imap_name: str, identifier: str) -> None:
    """DELETEACL (RFC 4314 3.2): needs ``a``."""
    identifier = check_identifier(identifier)
    mailbox, _ = open_mailbox(store, user, imap_name, "a")
    store.grants.set(mailbox.id, identifier, frozenset())
    _announce(store, identifier)


def admin_set_acl(store, owner: str, name: str, identifier: str, mod_rights: str
                  ) -> frozenset[str]:
    """``mailadmin acl set``: SETACL without the ``a`` check, on ``owner``'s mailbox
    ``name`` (SHARED_OWNER for the shared namespace).  Returns the identifier's rights now.
    NotFound, InvalidName; ValueError for a letter that is no right."""
    mode, rights = parse_rights(mod_rights)
    identifier = check_identifier(identifier)
    mailbox = store.mailbox(owner, name)
    current = frozenset(mailbox.acl.get(identifier, ""))
    new = rights if mode == "=" else current | rights if mode == "+" else current - rights
    store.grants.set(mailbox.id, identifier, new)
    _announce(store, identifier)
    return new


def admin_create_shared(store, name: str) -> Mailbox:
    """``mailadmin mailbox create --shared``: a mailbox under ``Shared/``, with no rights for
    anyone until ``mailadmin acl set`` gives some."""
    return store.create_mailbox(SHARED_OWNER, names.normalize_mailbox(name))
