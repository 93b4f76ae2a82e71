"""Delivery with Sieve: the synchronous part of DATA when recipients may have scripts.

Runs in a worker thread, like :func:`transaction.deliver_message`, and keeps its promise: a
recipient is reported delivered only when every copy its script asked for is committed and
every message it sends (redirect, vacation, a reject notice) is durably queued; a recipient
reported failed keeps nothing.  Each recipient's script runs first (mailstore/sieve), then
the copies of all recipients are stored through ``deliver_message`` (one content for all of
them; a recipient whose script edited the header gets its own), then each delivered
recipient's outgoing mail is queued and its tracking recorded (mailstore/sieve/executor.py).

A Sieve ``reject`` (RFC 5429 2.1) refuses the message for that recipient at DATA when the
protocol can say so for it alone: LMTP always (one reply per recipient, RFC 2033 4.2), SMTP
when the message has one recipient.  An SMTP message with several recipients has one reply
for all, so the refusal goes back as a delivery status notification through the outgoing
queue instead, and the message counts as handled for that recipient.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from mailstore import dsn
from mailstore.errors import MailStoreError, Rejected
from mailstore.sieve.executor import (
    Outgoing,
    Plan,
    SieveSettings,
    abandon,
    commit,
    finish,
    plain,
    plan,
)
from mailstore.sieve.message import SieveMessage
from mailstore.store import Delivery, MailStore

from ..observe import Logger
from .transaction import _withdraw, _withdraw_marked, _withdrawn, deliver_message

log = Logger("sieve")


def make_plans(store: MailStore, recipients: Sequence[tuple[str, str, str]], source: bytes,
               mail_from: str, settings: SieveSettings, lmtp: bool,
               received_at: int = 0) -> list[Plan]:
    """One plan per (RCPT address, user, mailbox), in order.  A script that fails, or a
    store read that fails while it runs, leaves that recipient's plan as without Sieve:
    the message is kept (RFC 5228 2.10.6), and the reason logged; a script's own error is
    also recorded in the user's Sieve error log (mailstore/sieve/errorlog.py), which they
    read with GETMETADATA and the administrator with ``mailadmin sieve log``.
    ``received_at``: where the message as received starts, after this delivery's trace
    fields."""
    plans = []
    parsed = SieveMessage(source)  # decoded once for every recipient's script
    done: dict[tuple[str, str, str], Plan] = {}
    for address, user, mailbox in recipients:
        if (address, user, mailbox) in done:  # the same RCPT twice: one run, one result
            plans.append(done[address, user, mailbox])
            continue
        try:
            p = plan(store, address, user, mailbox, source, mail_from, settings, received_at,
                     parsed)
        except Exception as exc:
            # The store failed while the script ran (or a bug in the interpreter): deliver
            # as without a script rather than refuse mail because of a filter.
            if isinstance(exc, MailStoreError):
                log.warn("sieve_failed", user=user, error=str(exc))
            else:
                log.failure("sieve_failed", user=user)
            p = plain(address, user, mailbox)
            p.error = str(exc)
        if p.error is not None:
            log.warn("sieve_error", user=user, script=p.script or "", error=p.error)
            if p.script is not None:
                try:
                    store.sieve_errors.add(user, p.error_script, p.error_line,
                                           p.error_message)
                except MailStoreError as exc:  # the log is for the user: never fatal
                    log.warn("sieve_error_log_failed", user=user, error=str(exc))
        for note in p.notes:
            log.info("sieve_note", user=user, script=p.script or "", note=note)
        plans.append(p)
        done[address, user, mailbox] = p
    if not lmtp and len(recipients) > 1:
        for p in plans:
            if p.reject is not None:
                p.outgoing.append(_reject_notice(p, source, mail_from, settings))
                p.reject = None
    return plans


def _reject_notice(p: Plan, source: bytes, mail_from: str, settings: SieveSettings
                   ) -> Outgoing:
    """The DSN (RFC 3464) telling the sender that ``p``'s recipient refused the message,
    when the SMTP reply cannot (RFC 5429 2.1).  Sent with the null sender; none at all
    for a message that itself had the null sender (RFC 5321 4.5.5)."""
    head = source.split(b"\r\n\r\n", 1)[0] + b"\r\n"
    now = time.time()
    message = dsn.delivery_status_notification(
        reporting_mta=settings.hostname, recipient=mail_from, arrival=now,
        failed=[(p.address, 550, f"5.7.1 rejected by the recipient's filter: {p.reject}")],
        original_headers=head, now=now)
    return Outgoing("", [mail_from], message, "reject")


def deliver_with_sieve(store: MailStore, plans: list[Plan], source: bytes, marker: bytes,
                       all_or_nothing: bool) -> list[Delivery]:
    """Store every plan's copies and queue its mail; one Delivery per plan, in order."""
    results: list[Delivery | None] = [None] * len(plans)
    for i, p in enumerate(plans):
        if p.reject is not None:
            results[i] = Delivery(p.user, "INBOX", None, Rejected(p.reject))
    if all_or_nothing and any(r is not None for r in results):
        # SMTP with a refusal: only possible with one recipient (see make_plans).
        return [r or Delivery(p.user, p.targets[0][0] if p.targets else "", None, _conflict())
                for r, p in zip(results, plans, strict=True)]
    # The copies, grouped by content: the shared message, then each edited one.
    groups: dict[bytes, list[tuple[int, str, str, tuple[str, ...]]]] = {}
    for i, p in enumerate(plans):
        if results[i] is not None:
            continue
        content = source if p.content is None else p.content
        for mailbox, flags in p.targets:
            groups.setdefault(content, []).append((i, p.user, mailbox, flags))
    copies: dict[int, list[Delivery]] = {}
    done: list[Delivery] = []
    try:
        for content, entries in groups.items():
            stored = deliver_message(store, [(u, m) for _, u, m, _ in entries], content,
                                     marker, all_or_nothing, [f for *_, f in entries])
            for (i, *_), result in zip(entries, stored, strict=True):
                copies.setdefault(i, []).append(result)
            done.extend(r for r in stored if r.error is None)
            if all_or_nothing and any(r.error for r in stored):
                break
    except BaseException:
        _withdraw_quietly(store, done, marker)
        for p in plans:
            abandon(store, p)
        raise
    # First what was stored; the outgoing mail only once that is known to stand: in SMTP a
    # failure of any recipient takes every copy back, and the sender's retry would send
    # the redirects a second time.
    errors: dict[int, BaseException] = {}
    for i, p in enumerate(plans):
        if results[i] is not None:
            continue
        mine = copies.get(i, [])  # none for a discarded message: stored nowhere
        error = next((r.error for r in mine if r.error is not None), None)
        if error is None and len(mine) < len(p.targets):
            error = _conflict()  # its group was not reached: another recipient failed
        if error is not None:
            errors[i] = error
    if not (all_or_nothing and errors):
        finished: set[int] = set()
        for i, p in enumerate(plans):
            if results[i] is not None or i in errors or id(p) in finished:
                continue
            finished.add(id(p))  # a plan shared by a repeated RCPT sends its mail once
            try:
                finish(store, p)
            except Exception as exc:  # the queue failed: take the copies back, retry later
                errors[i] = exc
                if not isinstance(exc, MailStoreError):
                    log.failure("sieve_enqueue_failed", user=p.user)
    # The mail of recipients that stand is released; that of the others dropped with their
    # tracking claims, so the sender's retry sends it once (decision 0025).
    if not (all_or_nothing and errors):
        for i, p in enumerate(plans):
            if results[i] is not None or i in errors:
                continue
            try:
                commit(store, p)
            except Exception as exc:
                errors[i] = exc
                if not isinstance(exc, MailStoreError):
                    log.failure("sieve_release_failed", user=p.user)
                if all_or_nothing:
                    break
    for i, p in enumerate(plans):
        if results[i] is not None:
            abandon(store, p)  # refused: the ids its script took are not delivered
            continue
        mine = copies.get(i, [])
        if i in errors or (all_or_nothing and errors):
            _withdraw_quietly(store, [r for r in mine if r.error is None], marker)
            abandon(store, p)
            error = errors.get(i) or _conflict()
            results[i] = Delivery(p.user, p.targets[0][0] if p.targets else "", None, error)
        else:
            results[i] = mine[0] if mine else Delivery(p.user, "", None)
    return results


def _conflict():
    return _withdrawn()


def _withdraw_quietly(store: MailStore, done: list[Delivery], marker: bytes) -> None:
    try:
        _withdraw(store, [d for d in done if d.uid is not None])
    except MailStoreError:
        _withdraw_marked(store, [(d.user, d.mailbox) for d in done], marker)
