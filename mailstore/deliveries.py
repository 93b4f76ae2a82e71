"""Delivery of one message to several recipients (LMTP/SMTP, after Sieve), storing its content
once: each recipient gets a row of their own, UID and flags.

Over HBase the recipients are independent work, so it overlaps (``Backend.concurrently``):
the content's put beside every recipient's account and mailbox reads, then every recipient's
message row at once -- for three recipients, 7 round trips one after the other instead of 25
(bench/RESULTS.md).  The embedded store runs the same steps one after the other.  Each step
notes its own outcome and never raises, so that one recipient's refusal does not stop the
others; a failure of the store itself withdraws every row added, so that the MTA's retry
neither loses nor doubles anything.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .acl import SHARED_OWNER
from .errors import InvalidName, NotFound, OverQuota, Unpublished
from .mailboxes import Mailbox
from .messages import StoredContent
from .users import User, check_quota

if TYPE_CHECKING:
    from .store import MailStore


@dataclass
class Delivery:
    """The outcome of delivering one message to one recipient."""

    user: str
    mailbox: str
    uid: int | None
    error: Exception | None = None



def deliver_all(store: MailStore, recipients: Sequence[tuple[str, str]], source,
                flags: Sequence[Iterable[str]] | None = None) -> list[Delivery]:
    """MailStore.deliver's work (see there), outside the unit of work it opens."""
    count = len(recipients)
    got: dict[str, StoredContent] = {}
    accounts: dict[str, object] = {}
    boxes: list[object] = [None] * count

    def ingest() -> None:
        got["stored"] = store.ingest(source, refs=count)

    def account(user: str):
        def read() -> None:
            try:
                accounts[user] = (None if user == SHARED_OWNER
                                  else store.users.get(user))
            except (NotFound, InvalidName) as exc:
                accounts[user] = exc
        return read

    def lookup(i: int, user: str, name: str):
        def read() -> None:
            try:
                boxes[i] = store.mailboxes.get(user, name)
            except (NotFound, InvalidName) as exc:
                boxes[i] = exc
        return read
    users = dict.fromkeys(user for user, _ in recipients)
    try:
        # The content first in argument order: on the embedded store a failure there
        # stops before anything else is read.
        store.backend.concurrently(
            ingest, *(account(u) for u in users),
            *(lookup(i, u, n) for i, (u, n) in enumerate(recipients)))
        _check_quota(store, recipients, accounts, boxes, got["stored"].size)
    except BaseException:
        if "stored" in got:  # no row refers to it yet
            store.content.give_back(got["stored"].content_id, count)
        raise
    return _add_all(store, recipients, got["stored"], boxes, flags)

def _check_quota(store: MailStore, recipients: Sequence[tuple[str, str]],
                            accounts: dict[str, object], boxes: list, size: int) -> None:
    """Replace ``boxes[i]`` by the error refusing recipient ``i``, in the order the checks
    always came: no such account, over quota, no such mailbox.  The recipients of one
    account are counted together against its limits, as they are added at once."""
    taking: Counter[str] = Counter()
    for i, (user, _name) in enumerate(recipients):
        owner = accounts[user]
        if isinstance(owner, Exception):
            boxes[i] = owner
            continue
        if isinstance(owner, User) and (owner.storage_limit is not None
                                        or owner.message_limit is not None):
            taking[user] += 1
            try:
                check_quota(owner, store.usage(user), size * taking[user], taking[user])
            except OverQuota as exc:
                boxes[i] = exc
                taking[user] -= 1
                continue
            if isinstance(boxes[i], Exception):
                taking[user] -= 1

def _add_all(store: MailStore, recipients: Sequence[tuple[str, str]], stored: StoredContent,
             boxes: list, flags: Sequence[Iterable[str]] | None) -> list[Delivery]:
    """Add a row for each recipient whose mailbox was found (``boxes[i]`` a Mailbox, else
    the error that refused it); withdraw them all if the store fails for any."""
    count = len(recipients)
    added: list[object] = [None] * count    # UID, or the exception the add raised
    failed: list[BaseException] = []

    def add(i: int, mailbox: Mailbox):
        def call() -> None:
            if failed:
                return  # the store failed for another recipient: all is withdrawn
            try:
                added[i] = store.add_stored(mailbox, stored, flags[i] if flags else ())
            except (NotFound, OverQuota, InvalidName) as exc:
                added[i] = exc
            except BaseException as exc:
                added[i] = exc
                failed.append(exc)
        return call
    store.backend.concurrently(*(add(i, box) for i, box in enumerate(boxes)
                                if isinstance(box, Mailbox)))
    results: list[Delivery] = []
    refused = 0
    for i, (user, name) in enumerate(recipients):
        outcome = added[i] if isinstance(boxes[i], Mailbox) else boxes[i]
        if isinstance(outcome, int):
            results.append(Delivery(user, boxes[i].name, outcome))
        elif isinstance(outcome, Unpublished):
            # Its row holds its reference, so it is withdrawn with the others -- or,
            # if it cannot be expunged before it is visible, stays: the sender's
            # retry may deliver it twice, never lose it.
            results.append(Delivery(user, name, outcome.uid))
        else:
            refused += 1
            if isinstance(outcome, (NotFound, OverQuota, InvalidName)):
                results.append(Delivery(user, name, None, outcome))
    if failed:
        # The store failed: nothing may stay half-delivered, so the rows added for the
        # other recipients are withdrawn before the caller is told to retry.
        store.content.give_back(stored.content_id, refused)
        _withdraw(store, [r for r in results if r.uid is not None])
        raise failed[0]
    if refused:
        store.content.give_back(stored.content_id, refused)
    return results

def _withdraw(store: MailStore, deliveries: list[Delivery]) -> None:
    for done in deliveries:
        try:
            store.transfers.expunge(store.mailboxes.get(done.user, done.mailbox), [done.uid])
        except Exception:  # still failing: fsck and the caller's own cleanup remain
            pass
