"""MOVE and COPY into the mailbox the messages are already in (RFC 6851 3.3 and 4.3, RFC 3501
6.4.7), over IMAP and in the store, including a crash at every write of such a move.

RFC 6851 3.3 lets a client move messages to the selected mailbox itself; the answer is the
messages' new UIDs in ``COPYUID``, the ``EXPUNGE`` of the old ones and an ``EXISTS`` for the new
ones (4.3: the COPYUID in an untagged OK first).  COPY into the selected mailbox (RFC 3501
6.4.7) adds copies.  Each conversation is compared with Dovecot's (tests/differential.py).  The
move protocol of docs/decisions/0003 must stay crash-safe when source and target are one
mailbox: after a crash at any point and the roll forward of its intent, every message is there
exactly once and fsck finds nothing to repair.
"""

from __future__ import annotations

import pytest
from crashing import Budget as _Budget
from crashing import Clock, Crash
from crashing import DyingBackend as _DyingBackend
from differential import PASSWORD, Done, Idle, Script, WaitFor, append, command_text, servers

from mailstore import keys
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.fsck import Fsck
from mailstore.mailboxes import MODSEQ, UID
from mailstore.messages import HEADER, STATE, SUMMARY
from mailstore.records import MOVING, with_state
from mailstore.store import MailStore
from tests.mailgen import message

MSG = b"From: a@example.com\r\nSubject: hi\r\nMessage-ID: <k@example.com>\r\n\r\nbody\r\n"

SETUP = [("A", append("INBOX", MSG, "\\Seen")), ("A", append("INBOX", MSG)),
         ("A", append("INBOX", MSG, "\\Seen $kw")), ("A", append("INBOX", MSG)),
         ("A", "SELECT INBOX"), ("B", "SELECT INBOX")]

SCRIPTS = [
    Script("move", SETUP + [
        ("A", "MOVE 1 INBOX"), ("B", "NOOP"), ("A", "MOVE 2:3 INBOX"), ("B", "NOOP"),
        ("A", "FETCH 1:* (UID FLAGS)"), ("B", "FETCH 1:* (UID FLAGS)")]),
    Script("uid-move", SETUP + [
        ("A", "UID MOVE 2,4 INBOX"), ("B", "NOOP"), ("A", "UID MOVE 1:* INBOX"), ("B", "NOOP"),
        ("A", "UID MOVE 99 INBOX"), ("A", "UID FETCH 1:* FLAGS"), ("B", "UID FETCH 1:* FLAGS")]),
    Script("copy", SETUP + [
        ("A", "COPY 1 INBOX"), ("B", "NOOP"), ("A", "UID COPY 2:3 INBOX"), ("B", "NOOP"),
        ("A", "COPY 1:* INBOX"), ("B", "NOOP"), ("A", "FETCH 1:* (UID FLAGS)")]),
    # In IDLE, the other session hears the move as it happens.
    Script("idle", SETUP + [
        ("B", Idle()), ("A", "MOVE 3 INBOX"), ("B", WaitFor(r"EXISTS")), ("B", Done()),
        ("B", Idle()), ("A", "UID COPY 1 INBOX"), ("B", WaitFor(r"EXISTS")), ("B", Done())]),
]


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("move-into-self")) as pair:
        yield pair


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_move_and_copy_into_the_selected_mailbox_as_dovecot(differential, script):
    """RFC 6851 3.3, 4.3 and RFC 3501 6.4.7 (issue 11, case 6): MOVE, UID MOVE, COPY and
    UID COPY into the selected mailbox answer OK with COPYUID, EXPUNGE and EXISTS in Dovecot's
    order, in this session and in another one (tests/differential.py says what is
    normalised)."""
    differential.run(script)


def test_move_into_the_selected_mailbox_transcript(differential):
    """RFC 6851 4.3: the exact responses to MOVE into the selected mailbox."""
    differential.ours.add_user("move-transcript", PASSWORD)
    out = differential.play(differential.ours, Script("t", SETUP + [
        ("A", "MOVE 1:2 INBOX"), ("B", "NOOP")]), "move-transcript")
    raw = {(e.client, command_text(e)): [r.raw for r in e.responses] for e in out}
    first = raw["A", f"APPEND INBOX (\\\\Seen) {{{len(MSG)}+}}"][0]
    validity = first.split(b"[APPENDUID ")[1].split()[0]
    assert raw["A", "MOVE 1:2 INBOX"] == [b"* OK [COPYUID %s 1:2 5:6] Moved" % validity,
                                          b"* 2 EXPUNGE", b"* 1 EXPUNGE", b"* 4 EXISTS",
                                          b"A7 OK MOVE completed"]
    assert raw["B", "NOOP"][:-1] == [b"* 2 EXPUNGE", b"* 1 EXPUNGE", b"* 4 EXISTS"]


def _message_ids(store: MailStore, mailbox) -> list[str]:
    views = store.fetch(mailbox, store.uids(mailbox), [b"m:hdr"])
    return [v.header.split(b"Message-ID: <")[1].split(b"@")[0].decode() for v in views]


def _everywhere(store: MailStore) -> list[str]:
    return sorted(i for name in ("INBOX", "Archive")
                  for i in _message_ids(store, store.mailbox("u", name)))


def _setup(path) -> tuple[EmbeddedBackend, Clock, list[int]]:
    backend = EmbeddedBackend(str(path))
    clock = Clock()
    store = MailStore(backend, clock=clock.time, sleep=clock.sleep, abandon_after=5.0,
                      intent_timeout=30.0)
    user = store.create_user("u", "pw")
    uids = [store.append(user, "INBOX", message(i), flags=["\\Seen"] if i % 2 else [])[1]
            for i in range(3)]
    store.store_flags(store.mailbox(user, "INBOX"), uids[:1], ["$kw"], "add")
    return backend, clock, uids


def test_move_into_the_same_mailbox_gives_new_uids_and_keeps_one_copy(tmp_path):
    """RFC 6851 3.3: a move to the same mailbox is legal; each message gets a new UID and the
    old one is expunged.  Flags and counters follow."""
    backend, clock, uids = _setup(tmp_path / "s")
    store = MailStore(backend, clock=clock.time, sleep=clock.sleep)
    inbox = store.mailbox("u", "INBOX")
    pairs = store.move(inbox, uids[:2], inbox)
    assert [old for old, _ in pairs] == uids[:2]
    assert [new for _, new in pairs] == [4, 5]
    inbox = store.mailbox("u", "INBOX")
    assert store.uids(inbox) == [3, 4, 5]
    assert _message_ids(store, inbox) == ["m2", "m0", "m1"]   # moved ones go last
    assert (inbox.messages, inbox.unseen) == (3, 2)
    assert "$kw" in store.fetch(inbox, [4])[0].flags.names
    assert Fsck(store).run().ok
    backend.close()


@pytest.mark.parametrize("target", ["INBOX", "Archive"])
def test_a_crash_at_any_write_of_a_move_loses_and_duplicates_nothing(tmp_path, target):
    """docs/decisions/0003: a move killed before any of its writes, then rolled forward on the
    next open (and by fsck), leaves each message exactly once -- also when the target is the
    source mailbox itself (RFC 6851 3.3), where "exactly once" means once in that mailbox."""
    crash_points = 0
    for writes in range(200):
        backend, clock, uids = _setup(tmp_path / f"{target}-{writes}")
        budget = _Budget(writes)
        dying = MailStore(_DyingBackend(backend, budget), clock=clock.time, sleep=clock.sleep,
                          abandon_after=5.0, intent_timeout=30.0)
        inbox = dying.mailbox("u", "INBOX")
        try:
            dying.move(inbox, uids, dying.mailbox("u", target))
        except Crash:
            crash_points += 1
        else:
            backend.close()
            break
        clock.sleep(61)   # past intent_timeout and abandon_after: the roll forward may run
        store = MailStore(backend, clock=clock.time, sleep=clock.sleep, abandon_after=5.0,
                          intent_timeout=30.0)
        store.mailbox("u", "INBOX")           # opening the source rolls its intents forward
        # What a client sees at once, before any fsck: each message once.
        assert _everywhere(store) == ["m0", "m1", "m2"], (writes, _everywhere(store))
        assert store.transfers.pending(inbox.id) == [], writes
        # Counters may be off until fsck (0003, 0004); fsck then finds the rest consistent.
        Fsck(store, repair=True).run()
        report = Fsck(store).run()
        assert report.ok, (writes, [p.as_dict() for p in report.problems])
        assert _everywhere(store) == ["m0", "m1", "m2"], (writes, _everywhere(store))
        for name in ("INBOX", "Archive"):
            mailbox = store.mailbox("u", name)
            assert mailbox.messages == len(store.uids(mailbox)), (writes, name)
        # Flags travel with the message (the keyword was set before the move began).
        kw = [v for name in ("INBOX", "Archive") for v in store.fetch(
            store.mailbox("u", name), store.uids(store.mailbox("u", name)), [*SUMMARY, HEADER])
            if b"<m0@" in v.header]
        assert "$kw" in kw[0].flags.names, writes
        backend.close()
    else:
        raise AssertionError("the move never completed within the write budget")
    assert crash_points > 10   # the move was cut at many points, not one


@pytest.mark.parametrize("target", ["INBOX", "Archive"])
def test_a_copy_expunged_before_the_roll_forward_does_not_come_back(tmp_path, target):
    """RFC 3501 2.3.1.1 and docs/decisions/0003: a move died after its copy was committed and
    shown but before the source was removed; meanwhile the user expunged the copy (moving into
    the same mailbox shows both copies side by side).  The roll forward must not write the
    copy again under its old UID, below UIDNEXT, where a syncing client never looks again; the
    source copy stays, committed, so the message is neither lost nor doubled."""
    backend, clock, uids = _setup(tmp_path / "s")
    store = MailStore(backend, clock=clock.time, sleep=clock.sleep, abandon_after=5.0,
                      intent_timeout=30.0)
    inbox, dest = store.mailbox("u", "INBOX"), store.mailbox("u", target)
    # The move's first steps, as Transfers.move takes them, up to the crash.
    dst_uid = store.mailboxes.rows.increment(dest.id, UID, 1)
    modseq = store.mailboxes.rows.increment(dest.id, MODSEQ, 1)
    store.transfers._begin(inbox.id, {"op": "move", "target": dest.id.hex(),
                                      "pairs": [[uids[0], dst_uid]]})
    view = store.fetch(inbox, [uids[0]], None)[0]
    claimed = with_state(view.state_raw, MOVING)
    assert store.messages.table.check_and_put(keys.message_key(inbox.id, uids[0]), STATE,
                                              view.state_raw, STATE, claimed)
    view.state_raw = claimed
    store.transfers._place(dest, view, dst_uid, modseq)
    store.messages.publish(dest.id, dst_uid, dst_uid)
    assert "m0" in _message_ids(store, dest) and "m0" in _message_ids(store, inbox)
    assert store.expunge(dest, [dst_uid]) == [dst_uid]       # the user removes the copy
    clock.sleep(61)
    store.mailbox("u", "INBOX")                              # the roll forward
    assert store.transfers.pending(inbox.id) == []
    assert _everywhere(store) == ["m0", "m1", "m2"]
    assert store.uids(store.mailbox("u", "INBOX")) == uids
    assert dst_uid not in store.uids(store.mailbox("u", target))
    assert store.expunge(inbox, [uids[0]]) == [uids[0]]      # committed again, not claimed
    # The counters were left in between by the crash (0003, 0004): fsck sets them right and
    # then finds nothing else.
    Fsck(store, repair=True).run()
    report = Fsck(store).run()
    assert report.ok, [p.as_dict() for p in report.problems]
    backend.close()
