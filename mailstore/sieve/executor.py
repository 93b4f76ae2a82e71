"""Sieve at delivery: run each recipient's active script and turn its actions into work for
the store (docs/sieve.md, docs/decisions/0025-sieve-execution.md).

:func:`plan` runs the script (reading the store: the active script, mailbox existence,
tracking) and returns a :class:`Plan`: where to store the message and with which flags,
whether the recipient refuses it, what to send (redirect, vacation) and what to remember once
delivered.  The delivery code stores the message for every plan in one go (one content for
all targets, as without Sieve), then calls :func:`finish` for each delivered recipient, which
queues the outgoing mail durably and records the tracking; the 2xx is given only after both.
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
    env = Environment(
        user=user,
        user_addresses=[f"{user}@{domain}" for domain in settings.domains],
        default_mailbox=mailbox, now=store.clock(), hostname=settings.hostname,
        mailbox_exists=lambda n: _exists(store, user, n),
        duplicate_seen=lambda key: track.seen(user, tracking.DUPLICATE, key),
        vacation_replied=lambda key: track.seen(user, tracking.VACATION, key),
        get_script=lambda location, n: _included(store, user, location, n, settings),
        metadata=lambda mailbox, entry: _annotation(store, user, mailbox, entry,
                                                    settings.metadata_policy),
        limits=settings.limits)
    result = run(text, parsed or source, Envelope(mail_from, address), env)
    out = Plan(address, user, [], script=name, error=result.error, notes=list(result.notes))
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
                out.outgoing.append(Outgoing("", [check_address(action.to)], reply,
                                             "vacation"))
                out.marks.append((tracking.VACATION, action.track_key, action.seconds))
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
    """After ``plan``'s recipient has its message durably stored: queue its outgoing mail
    (durable when this returns) and record its tracking.  Raises what the outbox raises;
    tracking failures are not fatal (the worst is a second vacation reply)."""
    for item in plan.outgoing:
        store.outbox.enqueue(item.mail_from, item.rcpt_tos, item.message, item.reason)
    for kind, key, seconds in plan.marks:
        try:
            store.sieve_tracking.record(plan.user, kind, key, seconds)
        except MailStoreError as exc:
            plan.notes.append(f"tracking not recorded: {exc}")
