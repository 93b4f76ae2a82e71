"""A batch of increments cut half-way, as a Thrift gateway that dies mid-call leaves it (HBase
applies an ``incrementRows`` cell by cell; so does the test gateway): whatever the cut, after
the roll forward the counters STATUS reports (RFC 3501 6.3.10) and the content reference counts
are never *below* what the rows hold -- too high is the safe side, repaired by fsck; too low
would hide messages from STATUS and free content still in use (decision 0004).

Before the step markers were ordered by the sign of the step, a cut that applied an uncount
step's counters but not its marker had the roll forward uncount again: the random gateway-fault
loop (bench/gateway_fault_loop.py) found mailboxes one message below their rows.
"""

from __future__ import annotations

import re

from crashing import Clock, Crash
from test_crash_counters import INTENT_TIMEOUT, _fill, _open_all, _store

from mailstore.fsck import Fsck


class Cut:
    """Lets ``calls`` increment_many calls through; the next one applies only its first cell,
    and then the process is dead (every later call raises Crash)."""

    def __init__(self, calls: int):
        self.left, self.dead, self.cut = calls, False, False


class CutTable:
    def __init__(self, table, cut: Cut):
        self._table, self._cut = table, cut

    def __getattr__(self, name):
        attr = getattr(self._table, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            cut = self._cut
            if cut.dead:
                raise Crash
            if name == "increment_many" and len(args[1]) > 1:
                if cut.left == 0:
                    row, deltas = args[0], args[1]
                    column = next(iter(deltas))
                    self._table.increment_many(row, {column: deltas[column]})
                    cut.dead = cut.cut = True
                    raise Crash
                cut.left -= 1
            return attr(*args, **kwargs)
        return call


class CutBackend:
    def __init__(self, backend, cut: Cut):
        self._backend, self._cut = backend, cut

    def table(self, name):
        return CutTable(self._backend.table(name), self._cut)

    def __getattr__(self, name):
        return getattr(self._backend, name)


def never_too_low(store, context) -> None:
    for problem in Fsck(store).run().problems:
        detail = problem.detail
        found = re.match(r"(\w+) counter (-?\d+), actual (-?\d+)$", detail) or \
            re.match(r"(refs) (\d+), actual (\d+)$", detail)
        if found:
            assert int(found.group(2)) > int(found.group(3)), (context, detail)
    Fsck(store, repair=True).run()


def cut_everywhere(backend, operation) -> int:
    clock = Clock()
    for calls in range(50):
        store = _store(backend, clock)
        user, uids = _fill(store, 3)
        cut = Cut(calls)
        try:
            operation(_store(CutBackend(backend, cut), clock), user, uids)
        except Crash:
            pass
        if not cut.cut:
            return calls
        clock.sleep(INTENT_TIMEOUT + 1)
        store = _store(backend, clock)
        _open_all(store, user)
        clock.sleep(INTENT_TIMEOUT + 1)
        _open_all(store, user)
        never_too_low(store, calls)
    raise AssertionError("the operation never completed")


def test_expunge_cut_inside_an_increment_batch(backend):
    """RFC 3501 6.4.3: EXPUNGE's uncount and reference drops cut half-way."""
    def expunge(store, user, uids):
        store.expunge(store.mailbox(user, "INBOX"), uids)
    assert cut_everywhere(backend, expunge) >= 2


def test_move_cut_inside_an_increment_batch(backend):
    """RFC 6851 3.3: MOVE's count of the target and uncount of the source cut half-way."""
    def move(store, user, uids):
        store.move(store.mailbox(user, "INBOX"), uids, store.mailbox(user, "Work"))
    assert cut_everywhere(backend, move) >= 2
