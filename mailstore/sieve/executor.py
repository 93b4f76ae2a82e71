"""Sieve at delivery: run each recipient's active script and turn its actions into work for
the store (docs/sieve.md, docs/decisions/0025-sieve-execution.md).

:func:`plan` runs the script (reading the store: the active script, mailbox existence,
tracking) and returns a :class:`Plan`: where to store the message and with which flags,
whether the recipient refuses it, what to send (redirect, vacation) and what to remember once
delivered.  The delivery code stores the message for every plan in one go (one content for
all targets, as without Sieve), then calls :func:`finish` for each delivered recipient, which
claims the vacation tracking and queues the outgoing mail durably, *held*; the 2xx is given
only after both.  Once every recipient's fate is known the delivery calls :func:`commit`
(release the held mail) for those answered 2xx and :func:`abandon` for the others (drop
their held mail, give back their tracking claims), so a withdrawn delivery leaves nothing
behind and the sender's retry sends each reply and redirect once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..errors import AlreadyExists, InvalidName, MailStoreError, NotFound
from ..metadata import DEFAULT_POLICY, InvalidEntry, Policy, entry_name
from ..outbox import check_address
from . import tracking
from .actions import Discard, Envelope, Environment, Limits, Redirect, Reject, Store, Vacation
from .interpreter import run
from .message import SieveMessage, addresses, split_message
from .vacation import build_reply


@dataclass(frozen=True)
class SieveSettings:
    """What the delivery side tells Sieve: limits, its host name (Message-IDs of replies),
    the local domains (the user's addresses are user@each domain)."""

    limits: Limits = field(default_factory=Limits)
    hostname: str = "localhost"
    domains: tuple[str, ...] = ("localhost",)
    enabled: bool = True
    global_scripts_user: str = ""
    """Whose scripts ``include :global`` reads (RFC 6609); empty: none."""
    metadata_policy: Policy = DEFAULT_POLICY
    """``[imap] metadata_*``: what /shared/admin reads as (RFC 5464 6.2.2)."""


@dataclass
class Outgoing:
    mail_from: str
    rcpt_tos: list[str]
    message: bytes
    reason: str
    claim: tuple[bytes, str, int] | None = None
    """(kind, key, seconds) to claim in the tracking before queuing (a vacation reply,
    RFC 5230 4.2): not queued if another delivery holds it."""


@dataclass
class Plan:
    """One recipient's delivery after Sieve.  ``targets`` are (mailbox, flags) in action order
    (empty: discarded); ``content`` is the edited message (editheader) or None for the
    shared one; ``reject`` the refusal text; ``script`` the active script's name (None: no
    script ran); ``error`` a runtime error (the message was kept in INBOX), ``notes`` what
    else is worth logging."""

    address: str
    user: str
    targets: list[tuple[str, tuple[str, ...]]]
    content: bytes | None = None
    reject: str | None = None
    outgoing: list[Outgoing] = field(default_factory=list)
    marks: list[tuple[bytes, str, int]] = field(default_factory=list)
    script: str | None = None
    error: str | None = None
    notes: list[str] = field(default_factory=list)
    error_line: int = 0
    """Where ``error`` happened (0: unknown) ..."""
    error_script: str = ""
    """... in which script (the active one, or the included one that failed)."""
    error_message: str = ""
    claims: list[tuple[bytes, str, bytes]] = field(default_factory=list)
    """Tracking claims taken (kind, key, claim): given back by :func:`abandon`."""
    queued: list[str] = field(default_factory=list)
    """Held queue ids: released by :func:`commit`, deleted by :func:`abandon`."""


def plain(address: str, user: str, mailbox: str) -> Plan:
    """The plan without Sieve: the RCPT's own mailbox, no flags."""
    return Plan(address, user, [(mailbox, ())])


def plan(store, address: str, user: str, mailbox: str, source: bytes, mail_from: str,
         settings: SieveSettings, received_at: int = 0,
         parsed: SieveMessage | None = None) -> Plan:
    """Run ``user``'s active script, if any, on ``source`` for RCPT ``address``.

    ``mailbox`` is where the message goes without a script (INBOX, or a plus-address folder)
    and is also the script's ``keep``.  ``received_at`` is where the message as received
    starts in ``source`` (after the trace fields this delivery added, whose Delivered-To is
    not a sign of a loop).  ``parsed``: ``source`` already parsed, shared by the recipients
    of one delivery.  Raises only what the store raises while reading.
    """
    if not settings.enabled:
        return plain(address, user, mailbox)
    active = store.sieve_scripts.active(user)
    if active is None:
        return plain(address, user, mailbox)
    name, text = active
    track = store.sieve_tracking
    claims: list[tuple[bytes, str, bytes]] = []

    def duplicate_claim(key: str, seconds: int) -> bool:
        # The same id tested twice in one run is the same message: not a duplicate of itself.
        if any(k == key for _, k, _ in claims):
            return True
        claim = track.claim(user, tracking.DUPLICATE, key, seconds)
        if claim is not None:
            claims.append((tracking.DUPLICATE, key, claim))
        return claim is not None

    env = Environment(
        user=user,
        user_addresses=[f"{user}@{domain}" for domain in settings.domains],
        default_mailbox=mailbox, now=store.clock(), hostname=settings.hostname,
        mailbox_exists=lambda n: _exists(store, user, n),
        duplicate_seen=lambda key: track.seen(user, tracking.DUPLICATE, key),
        duplicate_claim=duplicate_claim,
        vacation_replied=lambda key: track.seen(user, tracking.VACATION, key),
        get_script=lambda location, n: _included(store, user, location, n, settings),
        metadata=lambda mailbox, entry: _annotation(store, user, mailbox, entry,
                                                    settings.metadata_policy),
        limits=settings.limits)
    try:
        result = run(text, parsed or source, Envelope(mail_from, address), env)
    except BaseException:
        _give_back(store, user, claims, [])
        raise
    out = Plan(address, user, [], script=name, error=result.error, notes=list(result.notes),
               claims=claims)
    if result.error is not None:  # its actions are dropped: so are the ids it took
        _give_back(store, user, claims, out.notes)
        out.error_line = result.error_line
        out.error_script = result.error_script or name
        out.error_message = result.error_message or result.error
    content = result.message
    for action in result.actions:
        if isinstance(action, Store):
            target = _target(store, user, action, out)
            out.targets.append((target, action.flags))
        elif isinstance(action, Reject):
            out.reject = action.reason
        elif isinstance(action, Redirect):
            _redirect(out, action, content or source, source[received_at:], mail_from)
        elif isinstance(action, Vacation):
            try:
                reply = build_reply(action, settings.hostname, env.now)
                out.outgoing.append(Outgoing(
                    "", [check_address(action.to)], reply, "vacation",
                    claim=(tracking.VACATION, action.track_key, action.seconds)))
            except MailStoreError as exc:  # an address the queue cannot take
                out.notes.append(f"vacation not sent: {exc}")
        elif isinstance(action, Discard):
            pass
    for key, seconds in result.duplicate_marks:
        out.marks.append((tracking.DUPLICATE, key, seconds))
    # Targets that ended up the same mailbox (a fallback to INBOX) are stored once.
    merged: dict[str, tuple[str, ...]] = {}
    for target, flags in out.targets:
        merged[target] = flags if target not in merged else merged[target]
    out.targets = list(merged.items())
    out.content = content
    return out


def _included(store, user: str, location: str, name: str, settings: SieveSettings
              ) -> str | None:
    """An include's script (RFC 6609 3.2): :personal from the user's own scripts, :global
    from those of ``[sieve] global_scripts_user`` (none if unset)."""
    owner = user if location == "personal" else settings.global_scripts_user
    if not owner:
        return None
    try:
        return store.sieve_scripts.get(owner, name)
    except (NotFound, InvalidName):
        return None


def _annotation(store, user: str, mailbox: str | None, entry: str,
                policy: Policy) -> str | None:
    """An annotation's value as ``user`` reads it with GETMETADATA (RFC 5464 4.2); None if
    it has none, or if the mailbox or the entry name is not valid (RFC 5490 3.2)."""
    try:
        _, found = store.annotations.get(user, mailbox, [entry_name(entry)], 0, policy)
    except (NotFound, InvalidName, InvalidEntry):
        return None
    value = dict(found).get(entry.lower())
    return None if value is None else value.decode("utf-8", "replace")


def _exists(store, user: str, name: str) -> bool:
    try:
        store.mailbox(user, name, recover=False)
        return True
    except (NotFound, InvalidName):
        return False


def _target(store, user: str, action: Store, out: Plan) -> str:
    """The mailbox a store action really uses: created if :create asked for it (RFC 5490
    3.2); INBOX if it does not exist or cannot (RFC 5228 4.1 leaves the failure to the
    implementation; Pigeonhole then keeps the message in INBOX too)."""
    if action.keep or action.mailbox.upper() == "INBOX":
        return action.mailbox
    if _exists(store, user, action.mailbox):
        return store.mailbox(user, action.mailbox, recover=False).name
    if action.create:
        try:
            return store.create_mailbox(user, action.mailbox).name
        except AlreadyExists:
            return action.mailbox
        except (InvalidName, NotFound) as exc:
            out.notes.append(f"fileinto {action.mailbox!r}: cannot create ({exc}); kept in "
                             "INBOX")
            return "INBOX"
    out.notes.append(f"fileinto {action.mailbox!r}: no such mailbox; kept in INBOX")
    return "INBOX"


def _redirect(out: Plan, action: Redirect, message: bytes, received: bytes,
              mail_from: str) -> None:
    """Queue a redirect (RFC 5228 4.2) unless it would loop: the message already went
    through this recipient (a ``Delivered-To`` or ``X-Loop`` naming them), as Postfix's
    local(8) and Dovecot detect loops.  The copy sent carries ``Delivered-To: <recipient>``
    so that a loop through another server ends here next time."""
    fields, _ = split_message(received)
    recipient = out.address.lower()
    seen = set()
    for name, value in fields:
        if name.lower() in ("delivered-to", "x-loop"):
            text = value.decode("utf-8", "replace")
            seen.update(a.lower() for a in addresses(text))
            seen.add(text.strip().strip("<>").lower())
    if recipient in seen or action.address.lower() in seen:
        out.notes.append(f"redirect to {action.address} refused: mail loop")
        if not action.copy and not out.targets:
            out.targets.append(("INBOX", ()))  # never lose the message to a loop
        return
    try:
        target = check_address(action.address)
    except MailStoreError as exc:
        out.notes.append(f"redirect to {action.address!r} refused: {exc}")
        return
    stamped = b"Delivered-To: " + _header_safe(out.address) + b"\r\n" + message
    out.outgoing.append(Outgoing(mail_from, [target], stamped, "redirect"))


def _header_safe(text: str) -> bytes:
    return re.sub(r"[\r\n]", "", text).encode("utf-8")


def finish(store, plan: Plan) -> None:
    """After ``plan``'s recipient has its message durably stored: claim each vacation
    reply's tracking (RFC 5230 4.2: a reply another delivery already claimed is not sent)
    and queue the outgoing mail held (durable when this returns); refresh the ``:last``
    duplicate records.  Raises what the store raises, having given back what it took."""
    try:
        for item in plan.outgoing:
            if item.claim is not None:
                kind, key, seconds = item.claim
                claim = store.sieve_tracking.claim(plan.user, kind, key, seconds)
                if claim is None:
                    plan.notes.append("vacation not sent: already replied within the period "
                                      "(by a concurrent delivery)")
                    continue
                plan.claims.append((kind, key, claim))
            plan.queued.append(store.outbox.enqueue(item.mail_from, item.rcpt_tos,
                                                    item.message, item.reason, hold=True))
    except BaseException:
        abandon(store, plan)
        raise
    for kind, key, seconds in plan.marks:
        try:
            store.sieve_tracking.record(plan.user, kind, key, seconds)
        except MailStoreError as exc:
            plan.notes.append(f"tracking not recorded: {exc}")


def commit(store, plan: Plan) -> None:
    """``plan``'s recipient was answered 2xx: its held mail may go.  Raises what the store
    raises (the delivery then answers 451 and abandons)."""
    for qid in plan.queued:
        store.outbox.release(qid)
    plan.queued = []
    plan.claims = []


def abandon(store, plan: Plan) -> None:
    """``plan``'s recipient keeps nothing (refused, failed, withdrawn): drop its held mail
    and give back its tracking claims, so the sender's retry acts as the first attempt.
    Never raises (a held entry left behind is dropped by the queue's sweep; a claim left
    costs at most one reply not sent)."""
    for qid in plan.queued:
        try:
            store.outbox.delete(qid)
        except MailStoreError as exc:
            plan.notes.append(f"held mail {qid} not dropped: {exc}")
    plan.queued = []
    _give_back(store, plan.user, plan.claims, plan.notes)


def _give_back(store, user: str, claims: list, notes: list[str]) -> None:
    for kind, key, claim in claims:
        try:
            store.sieve_tracking.release(user, kind, key, claim)
        except MailStoreError as exc:
            notes.append(f"tracking claim not given back: {exc}")
    claims.clear()
