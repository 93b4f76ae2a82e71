"""Differential scripts for NOTIFY (RFC 5465, issue 13) against Dovecot with
``mailbox_list_index = yes`` (Dovecot 2.3 advertises NOTIFY always, but delivers mailbox
list events only with its list index).

Session A sets NOTIFY; session B changes things; A reads what arrives with no command in
progress (``WaitFor``), in IDLE, and before NOTIFY's tagged OK.  Before NOTIFY SET, every
mailbox the script uses is STATUSed once by A: Dovecot reports a mailbox it has not looked at
since its creation as new at the next notification (its list index learns of it lazily), which
is Dovecot's bookkeeping, not an event.  RFC-cited transcripts of what Dovecot does not judge
(VANISHED, SELECTED-DELAYED, two processes) are in tests/test_imap_notify.py.

Deliberate differences (tests/differential_known.py, docs/differential.md):
``notify-composition-rules`` (Dovecot accepts what RFC 5465 5 and 6.1 make BAD),
``notify-badevent`` (RFC 5465 3.1/8: NO [BADEVENT (supported events)], also for unknown
events; Dovecot answers BAD to unknown ones), ``notify-metadata-events`` (we report
MailboxMetadataChange and ServerMetadataChange, RFC 5465 5.6, 5.7; Dovecot 2.3 refuses them
with BADEVENT, so they are judged by RFC text in tests/test_imap_notify.py),
``notify-own-changes`` (RFC 5465 5: we omit events a session caused itself; Dovecot
reports them).  Not compared: Dovecot's NOTIFY SET STATUS with FlagChange adds
HIGHESTMODSEQ and so enables CONDSTORE, which RFC 7162 3.1 does not make NOTIFY do; no script
uses FlagChange with STATUS before CONDSTORE is enabled (docs/notify.md).
"""

from __future__ import annotations

import time

import pytest
from differential import Done, Idle, Script, WaitFor, plus, servers
from mailgen import message

DOVECOT_NOTIFY = "mailbox_list_index = yes\n"

@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-notify"), DOVECOT_NOTIFY) as d:
        yield d


def prime(*names: str) -> list:
    """B creates ``names``; A looks at each (see the module docstring)."""
    steps = [("B", f"CREATE {n}") for n in names]
    steps += [("A", f"STATUS {n} (MESSAGES)") for n in ("INBOX", "Drafts", "Sent", "Trash",
                                                         "Junk", "Archive", *names)]
    return steps


def settle(seconds: float = 1.5) -> tuple:
    """A pause before the next change: Dovecot starts watching the selected mailbox for
    NOTIFY one second after the client's last command (imap-notify.c,
    IMAP_NOTIFY_WATCH_ADD_DELAY_MSECS), and misses what changes before.  A timing difference,
    normalised by waiting; ours watches at once.  Played as B's NOOP after the pause."""
    def step(user: str) -> str:
        time.sleep(seconds)
        return "NOOP"
    return ("B", step)


def mail(mailbox: str, n: int) -> tuple:
    return (f"APPEND {mailbox} ", plus(message(n)))


SCRIPTS = [
    Script("notify-status-of-other-mailboxes", [
        *prime("Lists", "Lists/Lemonade", "misc"),
        ("A", "SELECT INBOX"),
        # RFC 5465 3.1: STATUS before the tagged OK for each watched mailbox.
        ("A", "NOTIFY SET STATUS (subtree Lists (MessageNew MessageExpunge))"),
        ("B", mail("Lists/Lemonade", 1)),
        ("A", WaitFor(r"STATUS Lists/Lemonade")),          # RFC 5465 5.2
        ("B", mail("misc", 2)),
        ("B", mail("Lists", 3)),
        ("A", WaitFor(r"STATUS Lists ")),                  # misc is not watched
        ("B", "SELECT Lists/Lemonade"),
        ("B", "STORE 1 +FLAGS (\\Deleted)"),
        ("B", "EXPUNGE"),
        ("A", WaitFor(r"STATUS Lists/Lemonade")),          # RFC 5465 5.3
        ("A", "NOOP"),
    ]),
    Script("notify-selected-mailbox", [
        *prime(),
        ("A", "SELECT INBOX"),
        ("A", "NOTIFY SET (selected (MessageNew (UID FLAGS) MessageExpunge FlagChange))"),
        settle(),
        ("B", mail("INBOX", 1)),
        ("A", WaitFor(r"FETCH")),                          # RFC 5465 5.2: EXISTS, FETCH
        ("B", "SELECT INBOX"),
        settle(),
        ("B", "STORE 1 +FLAGS (\\Flagged)"),
        ("A", WaitFor(r"FETCH")),                          # 5.1
        settle(),
        ("B", "STORE 1 +FLAGS (\\Deleted)"),
        ("A", WaitFor(r"FETCH")),
        settle(),
        ("B", "EXPUNGE"),
        ("A", WaitFor(r"EXPUNGE")),                        # 5.3
        ("A", "NOOP"),
    ], deliberate=("unsolicited-fetch-uid",)),
    Script("notify-flag-changes-elsewhere", [
        *prime("Work"),
        ("B", mail("Work", 1)),
        ("A", "STATUS Work (MESSAGES)"),
        ("A", "NOTIFY SET (mailboxes Work (MessageNew MessageExpunge FlagChange))"),
        ("B", "SELECT Work"),
        ("B", "STORE 1 +FLAGS (\\Seen)"),
        ("A", WaitFor(r"STATUS Work")),                    # 5.1: UNSEEN, HIGHESTMODSEQ
    ], deliberate=("modseq-values",)),
    Script("notify-mailbox-names-and-subscriptions", [
        *prime("Lists"),
        ("A", "NOTIFY SET (personal (MailboxName SubscriptionChange))"),
        ("B", "CREATE New"),
        ("A", WaitFor(r"LIST")),                           # 5.4
        ("B", "DELETE New"),
        ("A", WaitFor(r"LIST")),                           # 5.4: \NonExistent
        ("B", "SUBSCRIBE Lists"),
        ("A", WaitFor(r"LIST")),                           # 5.5: \Subscribed
        ("B", "UNSUBSCRIBE Lists"),
        ("A", WaitFor(r"LIST")),
        ("A", "NOTIFY NONE"),
        ("B", "CREATE Quiet"),
        ("A", "NOOP"),
    ]),
    Script("notify-in-idle", [
        *prime("Lists"),
        ("A", "SELECT INBOX"),
        ("A", "NOTIFY SET (selected (MessageNew MessageExpunge)) "
              "(subtree Lists (MessageNew MessageExpunge))"),
        ("A", Idle()),
        settle(),
        ("B", mail("Lists", 1)),
        ("A", WaitFor(r"STATUS Lists")),                   # RFC 5465 4
        ("B", mail("INBOX", 2)),
        ("A", WaitFor(r"EXISTS")),
        ("A", Done()),
    ]),
    Script("notify-syntax", [
        ("A", "NOTIFY"),
        ("A", "NOTIFY BOGUS"),
        ("A", "NOTIFY SET (personal MessageNew)"),
        ("A", "NOTIFY SET (nowhere (MessageNew MessageExpunge))"),
        ("A", "NOTIFY SET (selected (MessageNew)) "),
        ("A", "NOTIFY SET (selected (MessageNew MessageExpunge)) "
              "(selected-delayed (MessageNew MessageExpunge))"),
        ("A", "NOTIFY SET (selected (MessageNew (NOSUCHITEM) MessageExpunge))"),
        ("A", "NOTIFY SET (mailboxes Lists NONE)"),
        ("A", "NOTIFY NONE"),
    ]),
    Script("notify-composition-rules", [
        # RFC 5465 5: FlagChange needs MessageNew and MessageExpunge, which go together;
        # 6.1: only message events with SELECTED.  Dovecot checks the first for SELECTED only.
        ("A", "NOTIFY SET (personal (FlagChange))"),
        ("A", "NOTIFY SET (personal (MessageNew))"),
        ("A", "NOTIFY SET (selected (MailboxName))"),
        ("A", "NOTIFY SET"),  # RFC 5465 8: notify-set = "SET" [status-indicator] SP event-groups
    ], deliberate=("notify-composition-rules",)),
    Script("notify-badevent", [
        ("A", "NOTIFY SET (personal (MessageNew MessageExpunge MailboxMetadataChange))"),
        ("A", "NOTIFY SET (personal (ServerMetadataChange))"),
        ("A", "NOTIFY SET (personal (XUnknownEvent))"),
    ], deliberate=("notify-badevent", "notify-metadata-events")),
    Script("notify-own-changes", [
        *prime("Box"),
        ("A", "NOTIFY SET (personal (MessageNew MessageExpunge MailboxName))"),
        ("A", mail("Box", 1)),
        ("A", "CREATE Mine"),
        ("B", "CREATE Theirs"),
        ("A", WaitFor(r"LIST .* Theirs")),
    ], deliberate=("notify-own-changes",)),
    Script("notify-rename", [
        *prime("Old"),
        ("A", "NOTIFY SET (personal (MailboxName))"),
        ("B", "RENAME Old New"),
        ("B", "CREATE Sentinel"),
        ("A", WaitFor(r"LIST .* Sentinel")),              # 5.4: OLDNAME
    ]),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_notify_matches_dovecot(differential, script):
    differential.run(script)
