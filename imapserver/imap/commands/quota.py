"""QUOTA (RFC 9208): the limits ``mailadmin quota set`` puts on a user, as IMAP reports them.

    getquota     = "GETQUOTA" SP quota-root-name                     ; RFC 9208 4.1.1
    getquotaroot = "GETQUOTAROOT" SP mailbox                         ; 4.1.2
    status-att   =/ "DELETED" / "DELETED-STORAGE"                    ; 4.1.4
    setquota     = "SETQUOTA" SP quota-root-name SP setquota-list    ; 4.1.3 (refused)
    quota-response     = "QUOTA" SP quota-root-name SP quota-list    ; 4.2.1
    quotaroot-response = "QUOTAROOT" SP mailbox *(SP quota-root-name) ; 4.2.2

Every mailbox of a user with a limit has one quota root, :data:`ROOT` (the name Dovecot's
configurations conventionally use); a user without limits has none, so GETQUOTAROOT answers
``* QUOTAROOT mailbox`` and no QUOTA (the RFC's own example of a mailbox with no quota root,
4.2.2; a QUOTA response needs at least one resource, section 7).  Resources: STORAGE in units
of 1024 octets (5.1), rounded up as Dovecot does, and MESSAGE (5.2); a resource without a
limit is left out of the list ("not limited", 4.2.1).  Usage is the sum of the user's mailbox
counters, the figure APPEND, COPY, delivery and import check against (mailstore.users).

SETQUOTA is refused with NO: limits are the administrator's (``mailadmin quota set``), and
QUOTASET is not advertised (4.1.3).  Going over a limit is ``NO [OVERQUOTA]`` (4.3.1), mapped
from the store's OverQuota in server.py for APPEND, COPY and MOVE alike.
"""

from __future__ import annotations

from twisted.internet import defer

from mailstore.acl import locate
from mailstore.errors import MailStoreError
from mailstore.users import QuotaUsage

from ..context import AUTH, SELECTED, Bad, No, command
from ..names import decode_name, encode_name
from ..rev2 import utf8_names
from ..wire import ParseError, as_text, astring

ROOT = "User quota"
"""The name of a user's one quota root (opaque to clients, RFC 9208 3.2)."""

DELETED_ITEMS = ("DELETED", "DELETED-STORAGE")
"""STATUS items RFC 9208 4.1.4 requires with QUOTA=RES-MESSAGE and QUOTA=RES-STORAGE."""


def deleted_values(store, mailbox, items) -> dict[str, int]:
    """STATUS DELETED (messages with \\Deleted) and DELETED-STORAGE (their RFC822.SIZEs
    added up, in octets: RFC 9208 4.1.4 allows that sum, and the store frees exactly that
    much of the user's usage on EXPUNGE), if asked for; nothing read otherwise.  Runs in a
    thread: the \\Deleted UIDs come from the mailbox index, their sizes from their rows."""
    if not set(items) & set(DELETED_ITEMS):
        return {}
    count, octets = store.deleted_usage(mailbox)
    return {"DELETED": count, "DELETED-STORAGE": octets}


def _kib(octets: int) -> int:
    """Octets in units of 1024, rounded up (a small message uses 1, not 0; Dovecot's way)."""
    return -(-octets // 1024)


def quota_list(usage: QuotaUsage) -> bytes:
    """The parenthesised resource list of a QUOTA response: STORAGE in KiB, MESSAGE."""
    items = []
    if usage.storage_limit is not None:
        items.append(b"STORAGE %d %d" % (_kib(usage.storage_used), _kib(usage.storage_limit)))
    if usage.message_limit is not None:
        items.append(b"MESSAGE %d %d" % (usage.messages_used, usage.message_limit))
    return b"(" + b" ".join(items) + b")"


def quota_response(usage: QuotaUsage) -> bytes:
    return b"QUOTA " + astring(ROOT) + b" " + quota_list(usage)


def _others(user: str, name: str) -> bool:
    """Whether ``name`` is in the other users' or the shared namespace (mailstore.acl)."""
    try:
        location = locate(user, name)
    except MailStoreError:
        return False
    return location is not None and location.owner != user


@command("GETQUOTAROOT", AUTH, SELECTED)
@defer.inlineCallbacks
def getquotaroot(ctx):
    ctx.expect_args(1)
    utf8 = utf8_names(ctx.session)
    name = decode_name(ctx.args[0], utf8)  # need not exist (RFC 9208 4.1.2); echoed as given
    line = b"QUOTAROOT " + encode_name(name, utf8)
    if _others(ctx.session.user, name):
        # Another user's or a shared mailbox (RFC 4314): its quota is its owner's, which is
        # not the asker's to see; no root, whether the mailbox exists or not.
        ctx.untagged(line)
        return
    usage = yield ctx.call(ctx.store.quota, ctx.session.user)
    if usage.limited:
        ctx.untagged(line + b" " + astring(ROOT))
        ctx.untagged(quota_response(usage))
    else:
        ctx.untagged(line)


@command("GETQUOTA", AUTH, SELECTED)
@defer.inlineCallbacks
def getquota(ctx):
    ctx.expect_args(1)
    try:
        root = as_text(ctx.args[0], "quota root")
    except ParseError as exc:
        raise Bad(str(exc)) from None
    usage = yield ctx.call(ctx.store.quota, ctx.session.user)
    if root != ROOT or not usage.limited:
        raise No(f"No such quota root: {root}", "NONEXISTENT")
    ctx.untagged(quota_response(usage))


@command("SETQUOTA", AUTH, SELECTED)
def setquota(ctx):
    ctx.expect_args(2)
    if not isinstance(ctx.args[1], list):
        raise Bad("SETQUOTA takes a quota root and a parenthesized list of limits")
    raise No("Quota limits are set by the administrator (mailadmin quota set)", "NOPERM")
