"""What a NOTIFY SET asks for (RFC 5465 3.1, 5, 6, 8), parsed and checked; no I/O.

    notify          = "NOTIFY" SP (notify-set / notify-none)
    notify-set      = "SET" [status-indicator] SP event-groups
    status-indicator = SP "STATUS"
    notify-none     = "NONE"
    event-groups    = event-group *(SP event-group)
    event-group     = "(" filter-mailboxes SP events ")"
    filter-mailboxes = filter-mailboxes-selected / filter-mailboxes-other
    filter-mailboxes-selected = "selected" / "selected-delayed"
    filter-mailboxes-other = "inboxes" / "personal" / "subscribed" /
                             ("subtree" SP one-or-more-mailbox) /
                             ("mailboxes" SP one-or-more-mailbox)
    one-or-more-mailbox = mailbox / "(" mailbox *(SP mailbox) ")"
    events          = ( "(" event *(SP event) ")" ) / "NONE"
    event           = message-event / mailbox-event / user-event / event-ext
    message-event   = ("MessageNew" [SP "(" fetch-att *(SP fetch-att) ")"]) /
                      "MessageExpunge" / "FlagChange" / "AnnotationChange"
    mailbox-event   = "MailboxName" / "SubscriptionChange" / "MailboxMetadataChange"
    user-event      = "ServerMetadataChange"

Checks (all BAD with the reason, but for unsupported events): MessageNew and MessageExpunge
together, FlagChange/AnnotationChange only with both (5); only one of SELECTED and
SELECTED-DELAYED, and only message events with them (6.1); fetch-atts only for the selected
mailbox (5.2).  An event the server does not support is NO [BADEVENT (...)] listing every
event it does support (3.1): a known one we lack, or an unknown atom (event-ext).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mailstore.acl import NAMESPACE_ROOTS

from .context import Bad, No
from .names import DELIMITER, decode_name
from .render import parse_fetch_items
from .wire import Atom

MESSAGE_NEW, MESSAGE_EXPUNGE, FLAG_CHANGE, ANNOTATION_CHANGE = (
    "MessageNew", "MessageExpunge", "FlagChange", "AnnotationChange")
MAILBOX_NAME, SUBSCRIPTION_CHANGE = "MailboxName", "SubscriptionChange"
MAILBOX_METADATA_CHANGE, SERVER_METADATA_CHANGE = "MailboxMetadataChange", "ServerMetadataChange"

MESSAGE_EVENTS = (MESSAGE_NEW, MESSAGE_EXPUNGE, FLAG_CHANGE, ANNOTATION_CHANGE)
ALL_EVENTS = (*MESSAGE_EVENTS, MAILBOX_NAME, SUBSCRIPTION_CHANGE, MAILBOX_METADATA_CHANGE,
              SERVER_METADATA_CHANGE)
_BY_UPPER = {e.upper(): e for e in ALL_EVENTS}

SELECTED, SELECTED_DELAYED = "SELECTED", "SELECTED-DELAYED"
INBOXES, PERSONAL, SUBSCRIBED, SUBTREE, MAILBOXES = (
    "INBOXES", "PERSONAL", "SUBSCRIBED", "SUBTREE", "MAILBOXES")
OTHER_FILTERS = (INBOXES, PERSONAL, SUBSCRIBED, SUBTREE, MAILBOXES)
_OTHER_NAMESPACES = tuple(root + DELIMITER for root in NAMESPACE_ROOTS)


def supported_events(metadata: bool) -> tuple[str, ...]:
    """The events this server reports: all but AnnotationChange (no ANNOTATE), and the
    metadata ones only once METADATA is there to change anything (RFC 5465 5.6, 5.7)."""
    events = [MESSAGE_NEW, MESSAGE_EXPUNGE, FLAG_CHANGE, MAILBOX_NAME, SUBSCRIPTION_CHANGE]
    if metadata:
        events += [MAILBOX_METADATA_CHANGE, SERVER_METADATA_CHANGE]
    return tuple(events)


@dataclass
class Filter:
    """One event group for mailboxes other than the selected one (RFC 5465 6.2-6.6)."""

    kind: str                       # one of OTHER_FILTERS
    names: tuple[str, ...] = ()     # SUBTREE / MAILBOXES
    events: frozenset[str] = frozenset()

    def matches(self, name: str, subscribed: set[str]) -> bool:
        """Whether mailbox ``name`` is one this filter names (the subscription list as it
        stands now for SUBSCRIBED: 6.4 re-evaluates it as it changes)."""
        if self.kind == PERSONAL:
            # 6.2: the user's personal namespace only, never others' or Shared/ (RFC 2342).
            return not name.startswith(_OTHER_NAMESPACES)
        if self.kind == INBOXES:
            # 6.3: the mailboxes delivery may put mail in: INBOX only, unless plus-addressing
            # can deliver to any folder (parse_notify_set made INBOXES PERSONAL then).
            return name == "INBOX"
        if self.kind == SUBSCRIBED:
            return name in subscribed
        if self.kind == MAILBOXES:
            return name in self.names  # 6.6: no wildcard expansion
        return any(name == root or name.startswith(root + DELIMITER) for root in self.names)


@dataclass
class NotifySpec:
    """A parsed NOTIFY SET."""

    status: bool = False
    selected_events: frozenset[str] = frozenset()  # empty: SELECTED NONE (3.1's default)
    delayed: bool = False                          # SELECTED-DELAYED (6.1.2)
    fetch_atts: list | None = None                 # MessageNew's fetch-att list, as sent
    filters: list[Filter] = field(default_factory=list)

    def events_for(self, name: str, subscribed: set[str]) -> frozenset[str]:
        """The events wanted for a mailbox other than the selected one: those of the first
        filter that names it (Dovecot's rule too; RFC 5465 leaves overlaps open)."""
        for f in self.filters:
            if f.matches(name, subscribed):
                return f.events
        return frozenset()

    def wants(self, event: str) -> bool:
        return any(event in f.events for f in self.filters)

    @property
    def watches_others(self) -> bool:
        return bool(self.filters)


def _event_name(token) -> str:
    if not isinstance(token, Atom):
        raise Bad("NOTIFY events must be atoms")
    return _BY_UPPER.get(token.upper(), str(token))


def _events(token, selected: bool, spec: NotifySpec, unsupported: list[str],
            supported: tuple[str, ...]) -> frozenset[str]:
    if isinstance(token, Atom) and token.upper() == "NONE":
        return frozenset()
    if not isinstance(token, list) or not token:
        raise Bad("NOTIFY expects a list of events or NONE")
    events: set[str] = set()
    i = 0
    while i < len(token):
        name = _event_name(token[i])
        if name == MESSAGE_NEW and i + 1 < len(token) and isinstance(token[i + 1], list):
            if not selected:
                raise Bad("MessageNew fetch attributes are only for SELECTED or "
                          "SELECTED-DELAYED (RFC 5465 5.2)")
            try:
                parse_fetch_items(token[i + 1])
            except ValueError as exc:
                raise Bad(f"Invalid MessageNew fetch attribute: {exc}") from None
            spec.fetch_atts = token[i + 1]
            i += 1
        if selected and name not in MESSAGE_EVENTS:
            raise Bad(f"{name} is not a message event: not allowed with SELECTED "
                      "(RFC 5465 6.1)")
        if name not in supported and name not in unsupported:
            unsupported.append(name)
        events.add(name)
        i += 1
    if (MESSAGE_NEW in events) != (MESSAGE_EXPUNGE in events):
        raise Bad("MessageNew and MessageExpunge must be given together (RFC 5465 5)")
    if events & {FLAG_CHANGE, ANNOTATION_CHANGE} and MESSAGE_NEW not in events:
        raise Bad("FlagChange needs MessageNew and MessageExpunge too (RFC 5465 5)")
    return frozenset(events)


def _mailbox_names(token, utf8: bool = False) -> tuple[str, ...]:
    items = token if isinstance(token, list) else [token]
    if not items:
        raise Bad("SUBTREE and MAILBOXES need at least one mailbox name")
    out = []
    for item in items:
        if isinstance(item, list):
            raise Bad("Expected a mailbox name")
        name = decode_name(item, utf8)
        out.append("INBOX" if name.upper() == "INBOX" else name)
    return tuple(out)


def parse_notify_set(args: list, supported: tuple[str, ...],
                     any_folder_delivery: bool = False, utf8: bool = False) -> NotifySpec:
    """The arguments after ``NOTIFY SET``.  Raises Bad (syntax, composition rules) or
    No with BADEVENT (events this server does not support).  ``any_folder_delivery``:
    delivery may file mail in any mailbox (``[delivery] plus_addressing``), so INBOXES is
    every personal mailbox (RFC 5465 6.3: "all selectable mailboxes in the user's personal
    namespace(s) to which messages may be delivered by an MDA").  ``utf8``: mailbox names
    are UTF-8, not modified UTF-7 (the session enabled UTF8=ACCEPT or IMAP4rev2)."""
    spec = NotifySpec()
    args = list(args)
    if args and isinstance(args[0], Atom) and args[0].upper() == "STATUS":
        spec.status = True
        args.pop(0)
    if not args:
        raise Bad("NOTIFY SET needs at least one event group")
    unsupported: list[str] = []
    selected_seen = False
    for group in args:
        if not isinstance(group, list) or len(group) < 2 or not isinstance(group[0], Atom):
            raise Bad("Expected an event group: (filter events)")
        kind = group[0].upper()
        if kind in (SELECTED, SELECTED_DELAYED):
            if selected_seen:
                raise Bad("Only one of SELECTED and SELECTED-DELAYED (RFC 5465 6.1)")
            if len(group) != 2:
                raise Bad(f"{kind} takes one list of events")
            selected_seen = True
            spec.delayed = kind == SELECTED_DELAYED
            spec.selected_events = _events(group[1], True, spec, unsupported, supported)
            continue
        if kind not in OTHER_FILTERS:
            raise Bad(f"Unknown NOTIFY mailbox filter {group[0]}")
        names: tuple[str, ...] = ()
        rest = group[1:]
        if kind in (SUBTREE, MAILBOXES):
            if len(rest) != 2:
                raise Bad(f"{kind} takes mailbox names and a list of events")
            names = _mailbox_names(rest[0], utf8)
            rest = rest[1:]
        elif len(rest) != 1:
            raise Bad(f"{kind} takes one list of events")
        events = _events(rest[0], False, spec, unsupported, supported)
        if kind == INBOXES and any_folder_delivery:
            kind = PERSONAL
        if events:
            spec.filters.append(Filter(kind, names, events))
    if unsupported:
        raise No("Unsupported NOTIFY event(s): " + " ".join(unsupported),
                 "BADEVENT (" + " ".join(supported) + ")")
    return spec
