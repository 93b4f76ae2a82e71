"""Which user key format a store has, and converting a store from one to another
(docs/decisions/0027-salted-user-keys.md).

The format (:class:`keys.UserKeys`: unsalted, or salted with N buckets) is recorded in one
cell, :data:`keys.USER_KEY_MARKER` of the store-wide row of ``JAMES_MAILBOXES``.  It is written
once, by check-and-put from absent, and every process uses what it reads back, never what it
proposed: two processes opening a new store at once agree.  A store without the cell proposes
the salted format only when no user-name-keyed table holds a row (a new store); a store with
rows was made before salting and is recorded as unsalted, so it keeps working unchanged until
``mailadmin migrate-keys`` converts it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .backends.base import Backend, Mutation
from .keys import STORE_ROW, USER_KEY_MARKER, UserKeys
from .schema import MAILBOXES, TABLES, TableDef

USER_KEYED: tuple[TableDef, ...] = tuple(t for t in TABLES if t.user_keyed)
"""The tables whose keys :class:`UserKeys` makes."""

BATCH = 500


def recorded(backend: Backend) -> UserKeys | None:
    """The format recorded in the store, None if none is (yet)."""
    raw = backend.table(MAILBOXES.name).row(STORE_ROW, [USER_KEY_MARKER]).get(USER_KEY_MARKER)
    return None if raw is None else UserKeys.from_marker(raw)


def has_user_rows(backend: Backend) -> bool:
    """Whether any user-name-keyed table holds a row (one bounded scan of one row each)."""
    return any(next(iter(backend.table(t.name).scan(start=b"", stop=None, limit=1)), None)
               for t in USER_KEYED)


def settle(backend: Backend, proposed: UserKeys) -> UserKeys:
    """The store's format: the recorded one, else ``proposed`` for a store without user rows
    (unsalted for one with), recorded now by check-and-put.  One get when already recorded."""
    found = recorded(backend)
    if found is not None:
        return found
    offer = UserKeys(0) if has_user_rows(backend) else proposed
    backend.table(MAILBOXES.name).check_and_put(STORE_ROW, USER_KEY_MARKER, None,
                                                USER_KEY_MARKER, offer.marker())
    found = recorded(backend)
    assert found is not None
    return found


def _rows(backend: Backend, table: TableDef) -> Iterator[tuple[bytes, dict[bytes, bytes]]]:
    return backend.table(table.name).scan(start=b"", stop=None, batch_size=BATCH)


def stray_rows(backend: Backend, current: UserKeys) -> dict[str, int]:
    """Rows of each user-name-keyed table that are not keys of ``current`` (leftovers of an
    interrupted migration, or of a process of another format): table name -> count."""
    found = {}
    for table in USER_KEYED:
        count = sum(1 for key, _ in _rows(backend, table)
                    if current.owner(key, table.user_keyed) is None)
        if count:
            found[table.name] = count
    return found


class MigrationError(RuntimeError):
    pass


def migrate(backend: Backend, target: UserKeys,
            progress: Callable[[str, str, int], None] = lambda phase, table, rows: None
            ) -> dict:
    """Convert a *stopped* store's user-name-keyed rows to ``target``'s keys.

    1. Per table, delete the rows already in ``target``'s format that the current format does
       not read (copies made by an earlier run that did not finish: they may be stale), then
       copy every row of the current format to its ``target`` key (batched puts).
    2. Record ``target`` in the store (check-and-put from the current format): the commit
       point.  A crash before it leaves the store as it was, readable by the current format;
       running again starts over.
    3. Delete the rows not in ``target``'s format, copying first any whose ``target`` row is
       missing (nothing is dropped that was not copied).  A crash here is finished by running
       again, which does only this step.

    Mailbox, message and content keys do not change.  ``progress(phase, table, rows)`` is
    called as rows are copied or deleted.  Returns what was done (for mailadmin's output)."""
    current = settle(backend, target)
    done = {"from": current.marker().decode(), "to": target.marker().decode(),
            "copied": {}, "deleted": {}}
    if current != target:
        for table in USER_KEYED:
            rows = backend.table(table.name)
            stale = [key for key, _ in _rows(backend, table)
                     if current.owner(key, table.user_keyed) is None
                     and target.owner(key, table.user_keyed) is not None]
            for i in range(0, len(stale), BATCH):
                rows.mutate_rows([Mutation(key, delete_row=True) for key in stale[i:i + BATCH]])
            copied, batch = 0, []
            for key, cells in _rows(backend, table):
                new = current.rekey(key, table.user_keyed, target)
                if new is None or new == key:
                    continue
                batch.append(Mutation(new, puts=cells, delete_row=True))
                if len(batch) >= BATCH:
                    rows.mutate_rows(batch)
                    copied += len(batch)
                    batch = []
                    progress("copying", table.name, copied)
            if batch:
                rows.mutate_rows(batch)
                copied += len(batch)
            progress("copying", table.name, copied)
            done["copied"][table.name] = copied
        marks = backend.table(MAILBOXES.name)
        if not marks.check_and_put(STORE_ROW, USER_KEY_MARKER, current.marker(),
                                   USER_KEY_MARKER, target.marker()):
            raise MigrationError("the store's key format changed during the migration: "
                                 "is another migrate-keys running?")
    for table in USER_KEYED:
        rows = backend.table(table.name)
        deleted, batch = 0, []
        for key, cells in _rows(backend, table):
            if target.owner(key, table.user_keyed) is None:
                batch.append((key, cells))
            if len(batch) >= BATCH:
                deleted += _remove(rows, table, target, batch)
                batch = []
                progress("removing old keys of", table.name, deleted)
        deleted += _remove(rows, table, target, batch)
        if deleted:
            progress("removing old keys of", table.name, deleted)
        done["deleted"][table.name] = deleted
    return done


def _remove(rows, table: TableDef, target: UserKeys,
            batch: list[tuple[bytes, dict[bytes, bytes]]]) -> int:
    """Delete rows not in ``target``'s format, copying first those whose ``target`` row is
    missing: one multi-get, then two batched mutations."""
    if not batch:
        return 0
    moved = {key: _rekey_any(key, table, target) for key, _ in batch}
    wanted = [new for new in moved.values() if new is not None]
    present = {key for key, _ in rows.rows(wanted)} if wanted else set()
    copies = [Mutation(moved[key], puts=cells) for key, cells in batch
              if moved[key] is not None and moved[key] not in present]
    if copies:
        rows.mutate_rows(copies)
    rows.mutate_rows([Mutation(key, delete_row=True) for key, _ in batch])
    return len(batch)


def _rekey_any(key: bytes, table: TableDef, target: UserKeys) -> bytes | None:
    """``key`` in ``target``'s format, whatever format it is in (unsalted, or salted with any
    bucket count whose salt matches its name); None when no format makes it."""
    for buckets in range(0, 33):
        new = UserKeys(buckets).rekey(key, table.user_keyed, target)
        if new is not None:
            return new
    return None
