"""What a script run decides: the actions (RFC 5228 2.10), the environment it runs in, and its
limits.  Pure data: carrying the actions out is :mod:`mailstore.sieve.executor`'s job."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Limits:
    """Bounds on one run (``[sieve]`` in conf/imapserver.conf).  Exceeding one is a runtime
    error: the script's actions are dropped and the message is kept (RFC 5228 2.10.6)."""

    max_actions: int = 32
    """Actions (keep, fileinto, redirect, vacation, ...) one run may take (Pigeonhole: 32)."""
    max_redirects: int = 4
    """redirect actions one run may take (Pigeonhole's sieve_max_redirects: 4)."""
    max_steps: int = 100_000
    """Commands and tests evaluated, counting each loop of a match; the CPU bound."""
    max_include_depth: int = 10
    """Nested include levels (RFC 6609 3.2 asks for a limit; Pigeonhole: 10)."""
    max_variable_size: int = 4096
    """Longest variable value in characters, longer values are truncated (RFC 5229 6)."""
    max_added_header_bytes: int = 64 * 1024
    """Characters of header fields ``addheader`` may add in one run (RFC 5293 7 allows a
    limit): beyond it the run fails and the message is kept unedited."""
    vacation_min_days: int = 1
    vacation_max_days: int = 60
    vacation_default_days: int = 7
    duplicate_default_seconds: int = 7 * 86400
    duplicate_max_seconds: int = 7 * 86400


@dataclass
class Envelope:
    """The SMTP envelope of the message for one recipient (RFC 5228 5.4)."""

    mail_from: str
    """The reverse-path without brackets; "" for the null sender."""
    rcpt_to: str
    """This recipient's address as given in RCPT TO."""


def _never(*_args) -> bool:
    return False


def _no_script(*_args) -> str | None:
    return None


@dataclass
class Environment:
    """What a run may ask of the world, all optional (the defaults suit a syntax check).

    ``mailbox_exists(name)`` answers the mailbox test; ``duplicate_seen(key)`` and
    ``vacation_replied(key)`` ask the tracking store (RFC 7352, RFC 5230 4.2) without
    recording anything -- records are made only once the delivery has succeeded;
    ``get_script(location, name)`` returns an included script's text (RFC 6609);
    ``metadata(mailbox, entry)`` an annotation (RFC 5490).
    """

    user: str = ""
    user_addresses: list[str] = field(default_factory=list)
    default_mailbox: str = "INBOX"
    now: float = field(default_factory=time.time)
    local_zone: int = 0
    """Minutes east of UTC for currentdate and date without :zone (RFC 5260 4.2)."""
    hostname: str = "localhost"
    mailbox_exists: Callable[[str], bool] = _never
    duplicate_seen: Callable[[str], bool] = _never
    duplicate_claim: Callable[[str, int], bool] | None = None
    """``duplicate_claim(key, seconds)``: take the id atomically (RFC 7352 3); False when
    another delivery holds it (the message is a duplicate).  When given, it replaces
    ``duplicate_seen``; the delivery gives the claim back if the message is not stored."""
    vacation_replied: Callable[[str], bool] = _never
    get_script: Callable[[str, str], str | None] = _no_script
    metadata: Callable[[str | None, str], str | None] = _no_script
    """``metadata(mailbox or None for the server, entry name)``: the annotation's value as
    the user reads it (RFC 5464 via RFC 5490 3.2-3.5), None when it has none."""
    limits: Limits = field(default_factory=Limits)


@dataclass
class Store:
    """Store the message into ``mailbox`` with ``flags`` (keep: the default mailbox).
    ``create``: make the mailbox if it is missing (RFC 5490 3.2)."""

    mailbox: str
    flags: tuple[str, ...] = ()
    create: bool = False
    keep: bool = False
    implicit: bool = False


@dataclass
class Reject:
    """Refuse the message for this recipient (RFC 5429); ``extended``: ereject."""

    reason: str
    extended: bool = False


@dataclass
class Redirect:
    address: str
    copy: bool = False


@dataclass
class Vacation:
    """A reply to send (RFC 5230): the decision is made; ``track_key`` is recorded with
    ``seconds`` once the delivery succeeded."""

    to: str
    from_: str
    subject: str
    reason: str
    mime: bool
    track_key: str
    seconds: int
    in_reply_to: str | None
    references: str | None


@dataclass
class Discard:
    pass


@dataclass
class Result:
    """The outcome of one run.  ``actions`` are in the order the script took them, the
    implicit keep (if any) last.  ``error`` is the runtime error's text when the script
    failed (its actions are then replaced by an implicit keep).  ``message`` is the edited
    message (editheader) or None when unchanged; ``duplicate_marks`` are (key, seconds) to
    record once delivered (RFC 7352 3); ``notes`` are things worth logging that are not
    errors (a redirect loop refused, a vacation not sent and why)."""

    actions: list = field(default_factory=list)
    error: str | None = None
    message: bytes | None = None
    duplicate_marks: list[tuple[str, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error_line: int = 0
    """The line of the command or test that failed (0: unknown)."""
    error_script: str = ""
    """The included script it failed in ("" for the script that ran)."""
    error_message: str = ""
    """``error`` without its line prefix."""

    @property
    def stores(self) -> list[Store]:
        return [a for a in self.actions if isinstance(a, Store)]

    @property
    def reject(self) -> Reject | None:
        return next((a for a in self.actions if isinstance(a, Reject)), None)
