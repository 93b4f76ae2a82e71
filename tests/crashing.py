"""A store that dies after a given number of writes, as a killed process does, for crash tests.

:class:`DyingBackend` wraps any backend; its tables let ``budget`` writes through and then fail
every call, reads included, with :class:`Crash` (a ``BaseException``: no ``except Exception``
in the store swallows it, as nothing runs in a killed process).  Counting writes rather than
naming steps puts a crash at every step boundary of an operation without the test knowing
the steps: a test raises the budget until the operation completes.
"""

from __future__ import annotations

import threading

WRITES = ("put", "put_many", "put_large", "delete", "mutate_rows", "retire", "increment",
          "increment_many", "check_and_put", "put_then_check_and_put", "increment_rows")


class Crash(BaseException):
    """The process died: nothing catches it, and nothing is written after it."""


class Budget:
    def __init__(self, writes: int):
        self.left = writes
        self.dead = False
        self.lock = threading.Lock()

    def spend(self, write: bool, table: str = "", method: str = "", args=()) -> None:
        with self.lock:
            if self.dead:
                raise Crash
            if write:
                self.left -= 1
                if self.left < 0:
                    self.dead = True
                    raise Crash


class DieAt(Budget):
    """Dies at the first call for which ``when(table, method, args)`` is true, before it runs:
    a crash at a named step boundary (``table`` is the table's name without prefix)."""

    def __init__(self, when):
        super().__init__(0)
        self.when = when

    def spend(self, write: bool, table: str = "", method: str = "", args=()) -> None:
        with self.lock:
            if self.dead or self.when(table, method, args):
                self.dead = True
                raise Crash


class DyingTable:
    """A table that lets ``budget`` writes through, then fails every call as a dead process
    would (reads too: a dead process reads nothing either)."""

    def __init__(self, table, budget: Budget, name: str = ""):
        self._table = table
        self._budget = budget
        self._name = name

    def __getattr__(self, name):
        attr = getattr(self._table, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            self._budget.spend(name in WRITES, self._name, name, args)
            return attr(*args, **kwargs)
        return call


class DyingBackend:
    def __init__(self, backend, budget: Budget):
        self._backend = backend
        self._budget = budget

    def table(self, name):
        return DyingTable(self._backend.table(name), self._budget, name)

    def text_index(self):
        """The text index, dying too: posting rows through the dying tables; an index of the
        backend's own (FTS5) as one "text_index" table whose put and remove are writes."""
        from mailstore.backends.postings import PostingIndex
        index = self._backend.text_index()
        if isinstance(index, PostingIndex):
            return PostingIndex(self.table(index.table.name))
        return DyingTable(index, self._budget, "text_index")

    def increment_rows(self, increments):
        """One write, across rows and tables (the backend makes it one call)."""
        self._budget.spend(True, ",".join(sorted({name for name, _, _ in increments})),
                           "increment_rows", (increments,))
        return self._backend.increment_rows(increments)

    def __getattr__(self, name):
        return getattr(self._backend, name)


class Clock:
    def __init__(self, now: float = 1_800_000_000.0):
        self.now = now

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class Fault:
    """Fails the ``nth`` write call (from 0) as a gateway killed mid-call does: the caller gets
    :class:`~mailstore.errors.BackendUnavailable` with an *unknown* outcome (``unsent``
    False), the call having been ``applied`` or not.  With ``outage``, every later call (reads
    too) fails as well, refused before it is sent (``unsent``), until :meth:`restore`: the
    gateway stays down for the rest of the operation, its clean-up included.  Unlike
    :class:`Crash`, the process lives on: the store that saw the failure is used again."""

    def __init__(self, nth: int, applied: bool, outage: bool = False, when=None):
        self.when = when    # counts only the writes for which when("TABLE.method") is true
        self.left = nth
        self.applied = applied
        self.outage = outage
        self.fired = False
        self.down = False
        self.lock = threading.Lock()

    def restore(self) -> None:
        with self.lock:
            self.down = False

    def call(self, write: bool, invoke, what: str = ""):
        from mailstore.errors import BackendUnavailable
        with self.lock:
            if self.down:
                raise BackendUnavailable("store down (test fault)", unsent=True)
            write = write and (self.when is None or self.when(what))
            fire = write and not self.fired and self.left == 0
            if write and not self.fired:
                self.left -= 1
            if fire:
                self.fired = what or True
                self.down = self.outage
        if not fire:
            return invoke()
        if self.applied:
            invoke()
        raise BackendUnavailable("call cut off (test fault): outcome unknown")


class FaultyTable:
    """A table whose calls go through a :class:`Fault`."""

    def __init__(self, table, fault: Fault):
        self._table = table
        self._fault = fault

    def __getattr__(self, name):
        attr = getattr(self._table, name)
        if not callable(attr):
            return attr

        def call(*args, **kwargs):
            return self._fault.call(name in WRITES, lambda: attr(*args, **kwargs),
                                    f"{getattr(self._table, 'name', '')}.{name}")
        return call


class FaultyBackend:
    """A backend whose tables and multi-row increments go through a :class:`Fault`."""

    def __init__(self, backend, fault: Fault):
        self._backend = backend
        self._fault = fault

    def table(self, name):
        return FaultyTable(self._backend.table(name), self._fault)

    def text_index(self):
        from mailstore.backends.postings import PostingIndex
        index = self._backend.text_index()
        if isinstance(index, PostingIndex):
            return PostingIndex(self.table(index.table.name))
        return FaultyTable(index, self._fault)

    def increment_rows(self, increments):
        return self._fault.call(True, lambda: self._backend.increment_rows(increments),
                                "increment_rows")

    def __getattr__(self, name):
        return getattr(self._backend, name)
