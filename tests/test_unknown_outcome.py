"""Counters and content references stay exact through a store call that fails with an
*unknown* outcome -- the Thrift gateway killed with the call in flight, which it may or may
not have applied -- while the server lives on (issue 16; docs/decisions/0003, 0004).

Unlike tests/test_crash_counters.py (the process dies), the store that saw the failure keeps
working: its own clean-up runs, and with ``outage`` every call after the failed one fails too
(refused unsent) until the operation has returned, as while the gateway restarts.  Each test
fails the 0th, 1st, 2nd, ... write of an operation (tests/crashing.py ``Fault``), applied or
not, brings the store back, lets the intent timeout pass and opens the mailboxes (the next
SELECT or STATUS), and then requires, without any repair: STATUS MESSAGES/UNSEEN (RFC 3501
6.3.10) and the size counter equal the rows, and ``fsck`` finds nothing at all.

Before the fix an APPEND (RFC 3501 6.3.11) or an LMTP delivery (RFC 2033 4.2) whose call
failed during an outage left its content with no message referring to it (``no message refers
to it (refs 1)``) or referenced once too often (``refs 2, actual 1``): its clean-up's reference
drop or delete failed too and was dropped, or had been sent and could not be replayed.
"""

from __future__ import annotations

import pytest
from crashing import Clock, Fault, FaultyBackend

from mailstore.errors import BackendUnavailable
from mailstore.fsck import Fsck
from tests.mailgen import message
from tests.test_crash_counters import (
    ABANDON_AFTER,
    INTENT_TIMEOUT,
    _fill,
    _open_all,
    _store,
    assert_exact,
)

OPERATIONS = {
    "append": lambda s, u, uids: s.append(u, "INBOX", message(99, size=5000)),
    "deliver": lambda s, u, uids: s.deliver([(u, "INBOX"), (u, "Work")], message(98)),
    "move": lambda s, u, uids: s.move(s.mailbox(u, "INBOX"), uids, s.mailbox(u, "Work")),
    "copy": lambda s, u, uids: s.copy(s.mailbox(u, "INBOX"), uids, s.mailbox(u, "Work")),
    "expunge": lambda s, u, uids: s.expunge(s.mailbox(u, "INBOX"), uids),
    "store": lambda s, u, uids: s.store_flags(s.mailbox(u, "INBOX"), uids, ["\\Seen"],
                                              "add"),
}


def fail_everywhere(backend, operation, applied: bool, outage: bool, limit: int = 100) -> int:
    """Fail each write of ``operation`` in turn (see the module's docstring); returns how
    many were tried."""
    clock = Clock()
    for nth in range(limit):
        store = _store(backend, clock)
        user, uids = _fill(store, 2)
        fault = Fault(nth, applied, outage)
        live = _store(FaultyBackend(backend, fault), clock)
        try:
            operation(live, user, uids)
        except BackendUnavailable:
            pass
        if not fault.fired:
            assert_exact(store, user, "completed")
            return nth
        fault.restore()
        clock.sleep(INTENT_TIMEOUT + 1)
        _open_all(live, user)               # the same process, the store answering again
        clock.sleep(ABANDON_AFTER + 1)
        _open_all(live, user)
        assert_exact(store, user, (nth, fault.fired, "applied" if applied else "not applied"))
    raise AssertionError("the operation never completed")


APPLIED = pytest.mark.parametrize("applied", [False, True], ids=["unapplied", "applied"])


@APPLIED
@pytest.mark.parametrize("op", ["append", "deliver"])
def test_a_call_failing_during_an_outage_leaves_status_and_references_exact(
        backend, op, applied):
    """RFC 3501 6.3.11, RFC 2033 4.2: each write of an APPEND or a delivery to two mailboxes
    fails with an unknown outcome (applied or not) and the store stays down for the rest of
    it; once it is back, the next opens leave STATUS equal to the rows and fsck with no
    problem (before: the content was left unreferenced or referenced once too often)."""
    assert fail_everywhere(backend, OPERATIONS[op], applied, outage=True) > 3


def test_a_move_call_failing_during_an_outage_is_rolled_forward_exactly(backend):
    """RFC 6851 3.3, decision 0003: a MOVE whose calls fail (applied) while the store goes
    down keeps its intent, and the roll forward leaves STATUS and fsck exact (the short
    sibling of the slow test below)."""
    assert fail_everywhere(backend, OPERATIONS["move"], True, outage=True) > 8


@pytest.mark.slow
@APPLIED
@pytest.mark.parametrize("op", ["move", "copy", "expunge", "store"])
def test_intent_operations_failing_during_an_outage_stay_exact(backend, op, applied):
    """RFC 6851, RFC 3501 6.4.7, 6.4.3, 6.4.6: the same for every write of MOVE, COPY,
    EXPUNGE and STORE \\Seen: their intents are rolled forward exactly."""
    assert fail_everywhere(backend, OPERATIONS[op], applied, outage=True) > 3


@pytest.mark.parametrize("applied", [False, True], ids=["unapplied", "applied"])
def test_a_take_back_of_an_abandoned_uid_failing_is_replayed_once(backend, applied):
    """Decision 0001/0004: an APPEND (RFC 3501 6.3.11) killed between counting its message and
    committing it leaves a UID that a reader gives up after ``abandon_after``, taking the
    counts back.  If that take-back call fails with an unknown outcome after the claim, it
    is replayed by the reader's next open, once: before, the counts stayed one message too
    high until fsck (the gateway-fault loop's "counter too high")."""
    from crashing import Crash, DieAt, DyingBackend
    clock = Clock()
    store = _store(backend, clock)
    user, _uids = _fill(store, 1)
    dying = _store(DyingBackend(backend, DieAt(lambda table, method, args: (
        table == "JAMES_MESSAGES" and method == "put_then_check_and_put"))), clock)
    with pytest.raises(Crash):
        # Streamed (above a chunk): not one unit of work on the embedded store either.
        dying.append(user, "INBOX", message(7, size=300_000))
    assert store.mailbox(user, "INBOX").messages == 2      # counted, never committed

    def take_back(what):
        return what == "JAMES_MAILBOXES.increment_many"
    fault = Fault(0, applied, when=take_back)
    reader = _store(FaultyBackend(backend, fault), clock)
    reader.mailbox(user, "INBOX")                          # the reader first sees the UID
    clock.sleep(ABANDON_AFTER + 1)
    reader.mailbox(user, "INBOX")                          # gives it up: the take-back fails
    assert fault.fired
    fault.restore()
    reader.mailbox(user, "INBOX")                          # replayed, once
    reader.mailbox(user, "INBOX")
    inbox = store.mailbox(user, "INBOX")
    views = list(store.iter_messages(inbox))
    assert (inbox.messages, inbox.unseen, inbox.size) == (
        len(views), sum(1 for v in views if not v.flags.seen),
        sum(v.record.size for v in views))
    # The killed writer's content, which no row names (decision 0004's known leftover of a
    # process killed mid-APPEND), is all fsck may find.
    assert all(p.detail.startswith("no message refers to it")
               for p in Fsck(store).run().problems)


@APPLIED
def test_thrift2_commit_failing_during_an_outage_takes_its_own_counts_back(
        hbase_store, applied):
    """RFC 3501 6.3.11 over HBase's Thrift2 API, where an append's counts go with its UID
    and no marker records them (decision 0029): its commit call fails with an unknown
    outcome and the store stays down (Unpublished).  Once the store answers, the next open
    settles it: committed, or the UID given up and the writer's own counts taken back, so
    STATUS equals the rows and fsck finds nothing.  Before, the owed settling was made
    without those counts: one message too many in STATUS MESSAGES, UNSEEN and the size
    until fsck --repair."""
    backend = hbase_store.backend("thrift2")
    try:
        clock = Clock()
        store = _store(backend, clock)
        user, _uids = _fill(store, 2)
        fault = Fault(0, applied, outage=True,
                      when=lambda what: what == "JAMES_MESSAGES.put_then_check_and_put")
        live = _store(FaultyBackend(backend, fault), clock)
        with pytest.raises(BackendUnavailable):
            OPERATIONS["append"](live, user, [])
        assert fault.fired
        fault.restore()
        clock.sleep(INTENT_TIMEOUT + 1)
        _open_all(live, user)
        clock.sleep(ABANDON_AFTER + 1)
        _open_all(live, user)
        assert_exact(store, user, "applied" if applied else "not applied")
    finally:
        backend.close()
