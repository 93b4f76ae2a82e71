"""Storing one received message for all its recipients: the synchronous part of DATA.

Runs in a worker thread (``asyncio.to_thread``).  The message goes through one
:meth:`MailStore.deliver` call, so its content is stored once whatever the number of
recipients.  The promise kept here: a recipient is reported delivered only if its message row
is committed, and a recipient reported failed has no row — also when the store fails half-way
through the recipients, in which case the rows already written are taken back (withdrawn).
"""

from __future__ import annotations

from collections.abc import Sequence

from mailstore.errors import Conflict, MailStoreError, NotFound, OverQuota
from mailstore.store import Delivery, MailStore

from ..observe import Logger

log = Logger("delivery")

WITHDRAW_SCAN = 100
"""Newest messages of a mailbox searched for a row to withdraw.  Rows of other deliveries that
land in the same mailbox while this one fails can push ours down; 100 is far more than that."""


def deliver_message(store: MailStore, targets: Sequence[tuple[str, str]], source: bytes,
                    marker: bytes, all_or_nothing: bool,
                    flags: Sequence[tuple[str, ...]] | None = None) -> list[Delivery]:
    """Deliver ``source`` to every (user, mailbox) of ``targets``; one Delivery per target.

    ``marker`` is a byte string found only in this message's header (its delivery id): it is
    how rows are found again to withdraw them.  A target whose mailbox (a plus-address folder)
    was deleted since RCPT gets INBOX.  With ``all_or_nothing`` (SMTP: one reply for the whole
    message) a failure of any target withdraws every other one, which then fails with Conflict.
    ``flags``, parallel to ``targets``, are each row's flags (Sieve imap4flags, RFC 5232); a
    target given twice gets the first one's.
    Raises what the store raised if it failed as a whole, having withdrawn what it could.
    """
    unique = list(dict.fromkeys(targets))
    flags_of: dict[tuple[str, str], tuple[str, ...]] = {}
    for target, target_flags in zip(targets, flags or [()] * len(targets), strict=True):
        flags_of.setdefault(target, tuple(target_flags))
    if all_or_nothing:
        refused = _over_quota(store, unique, len(source))
        if refused:
            return [Delivery(user, name, None, refused.get(user, _withdrawn()))
                    for user, name in targets]
    try:
        results = store.deliver(unique, source, [flags_of[t] for t in unique])
        retry = [i for i, r in enumerate(results)
                 if isinstance(r.error, NotFound) and r.mailbox != "INBOX"]
        if retry:
            again = store.deliver([(results[i].user, "INBOX") for i in retry], source,
                                  [flags_of[unique[i]] for i in retry])
            for i, result in zip(retry, again, strict=True):
                results[i] = result
    except BaseException:
        _withdraw_marked(store, unique + [(u, "INBOX") for u, _ in unique], marker)
        raise
    if all_or_nothing and any(r.error for r in results):
        done = [r for r in results if r.error is None]
        _withdraw(store, done)
        results = [r if r.error else Delivery(r.user, r.mailbox, None, _withdrawn())
                   for r in results]
    by_target = dict(zip(unique, results, strict=True))
    return [by_target[t] for t in targets]


def _withdrawn() -> Conflict:
    return Conflict("not delivered: another recipient of the message failed")


def _over_quota(store: MailStore, targets: list[tuple[str, str]], size: int
                ) -> dict[str, OverQuota]:
    refused = {}
    for user in dict.fromkeys(user for user, _ in targets):
        try:
            store.check_quota(user, size, 1)
        except OverQuota as exc:
            refused[user] = exc
    return refused


def _withdraw(store: MailStore, done: list[Delivery]) -> None:
    """Expunge rows that were committed, by UID; raises if the store fails."""
    for result in done:
        store.expunge(store.mailbox(result.user, result.mailbox), [result.uid])


def _withdraw_marked(store: MailStore, targets: list[tuple[str, str]], marker: bytes) -> None:
    """After the store failed mid-delivery: expunge whatever rows of this message it kept.

    :meth:`MailStore.deliver` raises without saying which recipients it had written, so they
    are found by ``marker`` among each mailbox's newest messages.  If the store is still
    failing, the rows stay, and the sender's retry will deliver a second copy to those
    recipients: logged, since nothing better can be done without the store.
    """
    for user, name in dict.fromkeys(targets):
        try:
            mailbox = store.mailbox(user, name)
            uids = [v.uid for v in store.newest(mailbox, WITHDRAW_SCAN)
                    if v.header and marker in v.header]
            if uids:
                store.expunge(mailbox, uids)
        except NotFound:
            continue
        except MailStoreError as exc:
            # A retry may deliver it twice: the operator should know (docs/logs.md).
            log.error("withdraw_failed", queue_id=marker.decode(), user=user, mailbox=name,
                      error=str(exc))
