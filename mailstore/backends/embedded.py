"""The embedded backend: HBase's data model in one on-disk SQLite database.

Why SQLite: it is a real embedded database in Python's standard library (nothing to install for
``make run``), crash-safe through its write-ahead log, and safe for several server processes on
one machine through its file locks.  Each HBase table becomes one SQL table of cells,
``(row BLOB, col BLOB, val BLOB)`` with primary key ``(row, col)`` and no rowid, so cells are
stored clustered by row key.  SQLite compares BLOBs with ``memcmp``, which is exactly HBase's
row ordering, so bounded scans are index range scans in the same order HBase returns them.

Atomicity: every call runs in one SQLite transaction (``BEGIN IMMEDIATE`` for writes, so two
processes never deadlock upgrading a read lock), which is at least as strong as HBase's per-row
atomicity.  Durability: every committed call survives a crash of the process (SIGKILL): SQLite
runs with ``synchronous=NORMAL`` in WAL mode.  With the store's ``synchronous=FULL`` (the default)
:meth:`EmbeddedBackend.sync` also fsyncs the log, so what the mail store acknowledges survives a
power cut -- one fsync per acknowledged operation instead of one per write, which is what makes
an append (four write statements, one transaction: see :meth:`EmbeddedBackend.grouped`) cost
about one fsync.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Collection, Iterator, Mapping, Sequence

from ..errors import BackendUnavailable, WriteRefused
from .base import (
    Backend,
    Columns,
    Mutation,
    ReadsOnly,
    Row,
    Table,
    decode_counter,
    encode_counter,
    scan_bounds,
)
from .private import private_dir, private_file

_SYNC_MODES = ("NORMAL", "FULL")
AUTOCHECKPOINT = 1000
"""SQLite's default ``wal_autocheckpoint`` (pages), restored after each EmbeddedTable.put_large."""
MAP_READS = 1 << 40
"""The memory map asked for while reading large cells (EmbeddedTable.large_cells): the whole
file, as far as SQLite's build allows (Debian's: 2 GiB; pages past it are read as usual)."""
_LOST_GROUP = "embedded store: the group's transaction was rolled back by an earlier error"


def _family_bounds(family: bytes) -> tuple[bytes, bytes]:
    """Cells of a family sort between ``b"fam:"`` and ``b"fam;"`` (``;`` follows ``:``)."""
    family = family.rstrip(b":")
    return family + b":", family + b";"


def _column_filter(columns: Columns) -> tuple[str, list[bytes]]:
    """An SQL condition on ``col`` for a column selection, and its parameters."""
    if columns is None:
        return "", []
    terms, params = [], []
    for column in columns:
        if b":" not in column or column.endswith(b":"):
            low, high = _family_bounds(column)
            terms.append("(col >= ? AND col < ?)")
            params += [low, high]
        else:
            terms.append("col = ?")
            params.append(column)
    if not terms:
        return " AND 0", []
    return " AND (" + " OR ".join(terms) + ")", params


class EmbeddedTable(Table):
    ordered_keys = True  # a B-tree: appending at the right edge is the cheap insert

    def __init__(self, backend: EmbeddedBackend, name: str):
        self.backend = backend
        self.name = name
        self._sql = '"t_' + name + '"'
        self._inserts: dict[int, str] = {}  # INSERT statements by number of cells
        self._statements: dict[tuple[str, int], str] = {}  # other hot statements, built once
        # Cells come in column order, as HBase returns them, whatever the physical order
        # (ORDER BY col costs no sort on either layout: it is the primary key's order).
        self._row_sql = f"SELECT col, val FROM {self._sql} WHERE row = ? ORDER BY col"

    # -- reads ------------------------------------------------------------------------------

    def row(self, row: bytes, columns: Columns = None) -> Row:
        if columns is None:
            return dict(self.backend._read(self._row_sql, (row,)))
        where, params = _column_filter(columns)
        cur = self.backend._read(
            f"SELECT col, val FROM {self._sql} WHERE row = ?{where} ORDER BY col", [row, *params])
        return dict(cur)

    def large_cells(self, row: bytes, columns: Sequence[bytes]) -> Row:
        # Big values live in chains of overflow pages.  Read through a memory map of the
        # database file, each page is copied once, into the value, instead of being read with
        # a system call into SQLite's page cache first: about 40% less CPU for a 50 MB body
        # (bench/RESULTS.md, issue 14).  The map is dropped again after the read, since its
        # pages count in the process's RSS while they are mapped (a body must not grow the
        # server by its size).  Pages still in the write-ahead log are read as before.
        with self.backend._mapped():
            return self.row(row, columns)

    def rows(self, rows: Sequence[bytes], columns: Columns = None) -> list[tuple[bytes, Row]]:
        found: dict[bytes, Row] = {}
        where, params = _column_filter(columns)
        # One statement per 500 keys keeps us under SQLite's bound-parameter limit.
        for i in range(0, len(rows), 500):
            keys = list(rows[i:i + 500])
            marks = ",".join("?" * len(keys))
            cur = self.backend._read(
                f"SELECT row, col, val FROM {self._sql} WHERE row IN ({marks}){where} "
                "ORDER BY row, col",
                [*keys, *params])
            for key, col, val in cur:
                found.setdefault(key, {})[col] = val
        return [(key, found[key]) for key in rows if key in found]

    def scan(self, start: bytes | None = None, stop: bytes | None = None,
             prefix: bytes | None = None, columns: Columns = None, limit: int | None = None,
             reverse: bool = False, batch_size: int = 1000) -> Iterator[tuple[bytes, Row]]:
        start, stop = scan_bounds(start, stop, prefix)
        if limit is not None and limit <= 0:
            return
        if columns is not None and len(columns) == 1 and b":" in columns[0] \
                and not columns[0].endswith(b":"):
            yield from self._scan_one_column(start, stop, columns[0], limit, reverse, batch_size)
            return
        where, params = _column_filter(columns)
        # Cells are read in pages, each its own short read transaction, so a long scan never
        # holds a snapshot open (which would stop the WAL from being checkpointed).  A page ends
        # at a cell, not a row; the next page resumes after that (row, col).
        page_cells = max(batch_size, 1) * 8
        low = start if start is not None else b""
        high = stop
        cursor_key: tuple[bytes, bytes] | None = None
        current_key: bytes | None = None
        current: Row = {}
        emitted = 0
        order = "DESC" if reverse else "ASC"
        while True:
            # The resumed page replaces the bound it moves (rather than adding a condition), so
            # SQLite seeks straight to the cursor instead of walking past every earlier row.
            conds, args = [], []
            if cursor_key is not None and not reverse:
                conds.append("row >= ?")
                args.append(cursor_key[0])
            else:
                conds.append("row >= ?")
                args.append(low)
            if cursor_key is not None and reverse:
                conds.append("row <= ?")
                args.append(cursor_key[0])
            elif high is not None:
                conds.append("row < ?")
                args.append(high)
            if cursor_key is not None:
                conds.append("(row, col) < (?, ?)" if reverse else "(row, col) > (?, ?)")
                args += list(cursor_key)
            sql = (f"SELECT row, col, val FROM {self._sql} WHERE {' AND '.join(conds)}{where} "
                   f"ORDER BY row {order}, col {order} LIMIT ?")
            page = self.backend._read(sql, [*args, *params, page_cells]).fetchall()
            for key, col, val in page:
                if key != current_key:
                    if current_key is not None:
                        yield current_key, current
                        emitted += 1
                        if limit is not None and emitted >= limit:
                            return
                    current_key, current = key, {}
                current[col] = val
            if len(page) < page_cells:
                break
            cursor_key = (page[-1][0], page[-1][1])
        if current_key is not None:
            yield current_key, current

    def _scan_one_column(self, start: bytes | None, stop: bytes | None, column: bytes,
                         limit: int | None, reverse: bool, batch_size: int
                         ) -> Iterator[tuple[bytes, Row]]:
        """The common scan of one cell per row (UID listings): a row is a cell, so pages are
        counted in rows and no per-row grouping is needed."""
        low = start if start is not None else b""
        order = "DESC" if reverse else "ASC"
        page = max(batch_size, 1) if limit is None else min(max(batch_size, 1), limit)
        left = limit
        high = stop
        while True:
            # Each page moves one bound to the cursor, so SQLite seeks straight to it.
            conds, args = ["row >= ?"], [low]
            if high is not None:
                conds.append("row < ?")
                args.append(high)
            want = page if left is None else min(page, left)
            found = self.backend._read(
                f"SELECT row, val FROM {self._sql} WHERE {' AND '.join(conds)} AND col = ? "
                f"ORDER BY row {order} LIMIT ?", [*args, column, want]).fetchall()
            for key, val in found:
                yield key, {column: val}
            if left is not None:
                left -= len(found)
                if left <= 0:
                    return
            if len(found) < want:
                return
            if reverse:
                high = found[-1][0]
            else:
                low = found[-1][0] + b"\x00"  # the first key after it

    # -- writes -----------------------------------------------------------------------------

    def put(self, row: bytes, data: Mapping[bytes, bytes]) -> None:
        if data:
            self._insert(row, data)

    def put_large(self, row: bytes, data: Mapping[bytes, bytes]) -> None:
        # A commit that finds the write-ahead log over 1,000 pages checkpoints it, and each
        # checkpoint fsyncs the log and the database: a 50 MB message put chunk by chunk paid
        # about a dozen of them (24 fsyncs), which is most of an APPEND's time when the disk
        # is busy.  Its chunks go to the log without checkpointing; the put that completes the
        # content (ChunkWriter.commit, an ordinary put) checkpoints all of it once.  The log
        # grows by at most one message meanwhile.
        if not data:
            return
        db = self.backend._conn()
        try:
            db.execute("PRAGMA wal_autocheckpoint=0")
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"embedded store: {exc}") from exc
        try:
            self._insert(row, data)
        finally:
            try:
                db.execute(f"PRAGMA wal_autocheckpoint={AUTOCHECKPOINT}")
            except sqlite3.Error:
                pass  # the put's own outcome is what the caller hears of

    def _insert(self, row: bytes, puts: Mapping[bytes, bytes]) -> None:
        # One row of puts is one multi-row INSERT: a single statement is atomic on its own,
        # which saves the BEGIN/COMMIT round of a transaction (puts are the hot path).
        params: list[bytes] = []
        for col, val in puts.items():
            params += (row, col, bytes(val))
        self.backend._single(self._insert_sql(len(puts)), params)

    def _insert_sql(self, cells: int) -> str:
        sql = self._inserts.get(cells)
        if sql is None:
            marks = ",".join(["(?, ?, ?)"] * cells)
            sql = self._inserts[cells] = (
                f"INSERT OR REPLACE INTO {self._sql} (row, col, val) VALUES {marks}")
        return sql

    def delete(self, row: bytes, columns: Columns = None) -> None:
        if columns is None:
            self.mutate_rows([Mutation(row, delete_row=True)])
        else:
            self.mutate_rows([Mutation(row, deletes=columns)])

    def mutate_rows(self, mutations: Sequence[Mutation]) -> None:
        if len(mutations) == 1 and not mutations[0].deletes and not mutations[0].delete_row:
            if mutations[0].puts:
                self._insert(mutations[0].row, mutations[0].puts)
            return
        with self.backend._write() as db:
            for m in mutations:
                self._apply(db, m)

    def _apply(self, db: sqlite3.Connection, m: Mutation) -> None:
        if m.delete_row:
            db.execute(f"DELETE FROM {self._sql} WHERE row = ?", (m.row,))
        for column in m.deletes:
            if column.endswith(b":") or b":" not in column:
                low, high = _family_bounds(column)
                db.execute(f"DELETE FROM {self._sql} WHERE row = ? AND col >= ? AND col < ?",
                           (m.row, low, high))
            else:
                db.execute(f"DELETE FROM {self._sql} WHERE row = ? AND col = ?", (m.row, column))
        if m.puts:
            db.executemany(f"INSERT OR REPLACE INTO {self._sql} (row, col, val) VALUES (?, ?, ?)",
                           [(m.row, col, bytes(val)) for col, val in m.puts.items()])

    def increment(self, row: bytes, column: bytes, delta: int = 1) -> int:
        return self.increment_many(row, {column: delta}, returning=(column,))[column]

    def increment_many(self, row: bytes, deltas: Mapping[bytes, int],
                       returning: Collection[bytes] = ()) -> dict[bytes, int]:
        wanted = _returned(deltas, returning)
        if not deltas:
            return {}
        # Read the counters, add in Python, write them back with one INSERT, all under the
        # write lock.  Measured against the one-statement upsert this replaced (ON CONFLICT
        # DO UPDATE with a Python SQL function adding the 8-byte cells, RETURNING the new
        # values): 98 us against 55 on its own, 80 against 27 inside an append's transaction
        # -- RETURNING alone more than doubled the upsert's cost.
        count = len(deltas)
        # The cells between the first and the last counter asked for, in one range read: an
        # IN list costs a B-tree descent per counter (18 us for an append's five, against 7).
        select = self._statements.get(("counters", 0))
        if select is None:
            select = self._statements["counters", 0] = (
                f"SELECT col, val FROM {self._sql} WHERE row = ? AND col >= ? AND col <= ?")
        with self.backend._locked() as db:
            current = dict(db.execute(select, (row, min(deltas), max(deltas))))
            values: dict[bytes, int] = {}
            params: list[object] = []
            try:
                for column, delta in deltas.items():
                    value = values[column] = decode_counter(current.get(column)) + delta
                    params += (row, column, encode_counter(value))
            except (ValueError, OverflowError) as exc:
                raise ValueError(f"cell is not a counter (8-byte big-endian integer), or "
                                 f"would overflow: {exc}") from exc
            db.execute(self._insert_sql(count), params)
        return {column: values[column] for column in wanted}

    def put_then_check_and_put(self, row: bytes, data: Mapping[bytes, bytes], column: bytes,
                               value: bytes) -> bool:
        if column in data:
            raise ValueError("the checked column cannot also be one of the data cells")
        # Both steps as one statement: every cell, the checked one included, is inserted only
        # while that cell is absent -- atomic, and nothing is left behind when the check fails.
        # One write instead of two also writes the row's B-tree page to the log once.
        sql = self._statements.get(("commit", len(data)))
        if sql is None:
            marks = ",".join(["(?, ?)"] * (len(data) + 1))
            sql = self._statements["commit", len(data)] = (
                f"INSERT OR REPLACE INTO {self._sql} (row, col, val) SELECT ?, column1, column2 "
                f"FROM (VALUES {marks}) WHERE NOT EXISTS "
                f"(SELECT 1 FROM {self._sql} WHERE row = ? AND col = ?)")
        params: list[object] = [row]
        for col, val in data.items():
            params += (col, bytes(val))
        params += (column, bytes(value), row, column)
        return self.backend._single(sql, params).rowcount > 0

    def check_and_put(self, row: bytes, column: bytes, expected: bytes | None,
                      put_column: bytes, value: bytes) -> bool:
        if expected == b"":
            expected = None  # HBase treats an empty expected value as "absent"; so do we.
        if put_column == column:
            # The usual case (commit records, flags, watermarks): one conditional statement.
            if expected is None:
                cur = self.backend._single(
                    f"INSERT OR IGNORE INTO {self._sql} (row, col, val) VALUES (?, ?, ?)",
                    [row, column, bytes(value)])
            else:
                cur = self.backend._single(
                    f"UPDATE {self._sql} SET val = ? WHERE row = ? AND col = ? AND val = ?",
                    [bytes(value), row, column, bytes(expected)])
            return cur.rowcount == 1
        with self.backend._write() as db:
            found = db.execute(f"SELECT val FROM {self._sql} WHERE row = ? AND col = ?",
                               (row, column)).fetchone()
            current = found[0] if found else None
            if current != expected:
                return False
            db.execute(f"INSERT OR REPLACE INTO {self._sql} (row, col, val) VALUES (?, ?, ?)",
                       (row, put_column, bytes(value)))
            return True


def _returned(deltas: Mapping[bytes, int], returning: Collection[bytes]) -> frozenset[bytes]:
    wanted = frozenset(returning)
    if not wanted <= deltas.keys():
        raise ValueError(
            f"returning names counters not incremented: {sorted(wanted - deltas.keys())}")
    return wanted


class _WriteTxn:
    """One call's write transaction; inside a group (already in a transaction) a savepoint,
    so that a failing call still undoes only itself."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db
        self.nested = False

    def __enter__(self) -> sqlite3.Connection:
        self.nested = self.db.in_transaction
        self.db.execute("SAVEPOINT call" if self.nested else "BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            if self.nested:
                self.db.execute("RELEASE call")
            else:
                _commit(self.db)
        elif self.nested:
            self.db.execute("ROLLBACK TO call")
            self.db.execute("RELEASE call")
        else:
            self.db.execute("ROLLBACK")


def _commit(db: sqlite3.Connection) -> None:
    """COMMIT, and if it fails, leave no transaction open: a COMMIT that fails without SQLite
    rolling back (busy, I/O error) would otherwise keep the write lock and fold every later
    call of this connection into a transaction that is never committed."""
    try:
        db.execute("COMMIT")
    except sqlite3.Error:
        if db.in_transaction:
            try:
                db.execute("ROLLBACK")
            except sqlite3.Error:
                pass
        raise


class EmbeddedBackend(Backend):
    """HBase's data model in ``<data_dir>/store.sqlite3``.

    ``data_dir`` is created if missing, mode 0700, and the database in it 0600, whatever the
    umask; an existing directory or database that the group or others can reach raises
    :class:`~mailstore.errors.SharedPermissions` unless ``allow_shared_permissions`` (see
    ``private.py``).  ``synchronous``: FULL makes :meth:`sync` fsync the write-ahead log
    (durable on power loss); NORMAL makes it a no-op (durable on process crash).
    ``busy_timeout`` is how long, in seconds, a writer waits for another process's write to
    finish before reporting the backend unavailable.
    """

    name = "embedded"
    # SQLite in WAL mode: a reader never waits for a writer (only for WAL recovery, rare).
    local_reads = True

    def __init__(self, data_dir: str, synchronous: str = "FULL", busy_timeout: float = 30.0,
                 allow_shared_permissions: bool = False, **_ignored: object):
        if str(synchronous).upper() not in _SYNC_MODES:
            raise ValueError(f"synchronous must be one of {', '.join(_SYNC_MODES)}")
        self.path = os.path.join(data_dir, "store.sqlite3")
        # Before SQLite opens it: SQLite would create the file with 0644 minus the umask.
        try:
            private_dir(data_dir, allow_shared_permissions)
            private_file(self.path, allow_shared_permissions)
        except OSError as exc:
            raise BackendUnavailable(f"cannot open {self.path}: {exc}") from exc
        self.synchronous = str(synchronous).upper()
        self.busy_timeout = float(busy_timeout)
        self._local = threading.local()
        self._all: list[sqlite3.Connection] = []
        self._all_lock = threading.Lock()
        self._sync_state = threading.Lock()
        self._sync_lock = threading.Lock()
        self._sync_requested = 0
        self._sync_done = 0
        # The first connection is made immediately so that a bad path or a locked file is
        # reported at start-up, not at the first mail.
        db = self._db()
        db.execute("CREATE TABLE IF NOT EXISTS _families (tbl TEXT, family TEXT, options TEXT, "
                   "PRIMARY KEY (tbl, family)) WITHOUT ROWID")

    def _db(self) -> sqlite3.Connection:
        # sqlite3 connections must not be shared between threads; each thread gets its own.
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(self.path, timeout=self.busy_timeout,
                                     isolation_level=None, check_same_thread=False)
                db.execute("PRAGMA journal_mode=WAL")
                # Each commit is durable against a process crash; power-loss durability comes
                # from sync(), once per acknowledged operation.
                db.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                raise BackendUnavailable(f"cannot open {self.path}: {exc}") from exc
            self._local.db = db
            with self._all_lock:
                self._all.append(db)
        return db

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection for one call."""
        db = self._db()
        local = self._local
        if getattr(local, "group", 0) and not local.flushed and not db.in_transaction:
            # SQLite rolled the group back itself (disk full, I/O error).  Going on call by
            # call would leave later writes without the earlier ones (counts taken back that
            # were never taken): every further call of the group fails instead.
            raise BackendUnavailable(_LOST_GROUP)
        return db

    @contextlib.contextmanager
    def reads_only(self) -> Iterator[ReadsOnly]:
        probe = ReadsOnly()
        local = self._local
        outer = getattr(local, "reads_only", None)
        local.reads_only = probe
        try:
            yield probe
        finally:
            local.reads_only = outer

    def _refuse_writes(self) -> None:
        """Raise WriteRefused inside reads_only() (every write path calls this first)."""
        probe = getattr(self._local, "reads_only", None)
        if probe is not None:
            probe.refused = True
            raise WriteRefused("a write inside reads_only()")

    def _single(self, sql: str, params: Sequence[object]) -> sqlite3.Cursor:
        """Run one statement in its own implicit transaction (atomic on its own)."""
        self._refuse_writes()
        try:
            return self._conn().execute(sql, params)
        except sqlite3.OperationalError as exc:
            raise BackendUnavailable(f"embedded store: {exc}") from exc

    def _read(self, sql: str, params: Sequence[object]) -> sqlite3.Cursor:
        try:
            return self._conn().execute(sql, params)
        except sqlite3.OperationalError as exc:
            raise BackendUnavailable(f"embedded store: {exc}") from exc

    @contextlib.contextmanager
    def _mapped(self):
        """This thread's connection reads the database file through a memory map meanwhile
        (SQLite's ``mmap_size``: at most MAP_READS octets of the file; SQLite clamps it to the
        largest it was built for).  Unmapped afterwards, whatever happens."""
        db = self._conn()
        try:
            db.execute(f"PRAGMA mmap_size={MAP_READS}")
        except sqlite3.Error as exc:
            raise BackendUnavailable(f"embedded store: {exc}") from exc
        try:
            yield db
        finally:
            try:
                db.execute("PRAGMA mmap_size=0")
            except sqlite3.Error:
                pass  # the read's own outcome is what the caller hears of

    def _write(self) -> _Guarded:
        self._refuse_writes()
        return _Guarded(self._conn())

    def _locked(self):
        """The connection under the write lock for a read-then-write: the group's transaction
        if one is open (its lock is held already, and the one writing statement is atomic on
        its own), else a transaction of its own."""
        self._refuse_writes()
        db = self._conn()
        if db.in_transaction:
            return contextlib.nullcontext(db)
        return _Guarded(db)

    def table(self, name: str) -> Table:
        return EmbeddedTable(self, name)

    def increment_rows(self, increments: Sequence[tuple[str, bytes, Mapping[bytes, int]]]
                       ) -> None:
        # One transaction (the group's, if one is open): all or nothing, even for a kill.
        with self._locked():
            for name, row, deltas in increments:
                self.table(name).increment_many(row, deltas)

    def grouped(self) -> _Group:
        # One BEGIN IMMEDIATE ... COMMIT around the calls: the write lock is taken once, each
        # page the calls change goes to the log once (an append changes its mailbox row twice),
        # and the commit work is paid once.  Measured on the store bench: ~55 us less per
        # append (bench/RESULTS.md).  A failure inside rolls back what the group has not
        # flushed.
        return _Group(self)

    def flush_group(self) -> None:
        # Commit, and let the rest of the group run call by call: a caller flushes before it
        # waits for another writer, so the lock must stay free while it waits.
        local = self._local
        if getattr(local, "group", 0) and not local.flushed:
            local.flushed = True
            self._end(self._db(), "COMMIT")

    def _begin(self, db: sqlite3.Connection) -> None:
        self._refuse_writes()
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise BackendUnavailable(f"embedded store: {exc}") from exc

    def _end(self, db: sqlite3.Connection, how: str) -> None:
        if not db.in_transaction:
            # SQLite rolled the group back itself (disk full, I/O error): if the caller went
            # on regardless, committing now would report success for writes that are gone.
            if how == "COMMIT":
                raise BackendUnavailable(_LOST_GROUP)
            return
        try:
            if how == "COMMIT":
                _commit(db)
            else:
                db.execute(how)
        except sqlite3.Error as exc:
            if how == "ROLLBACK":
                return  # the original error is the one to report
            raise BackendUnavailable(f"embedded store: {exc}") from exc

    def sync(self) -> None:
        self._refuse_writes()
        if self.synchronous != "FULL":
            return
        # Group commit: a caller is covered by any fsync that *starts* after it asked, so
        # threads that ask while one fsync runs share the next one instead of queueing one each.
        with self._sync_state:
            self._sync_requested += 1
            ticket = self._sync_requested
        with self._sync_lock:
            if self._sync_done >= ticket:
                return
            with self._sync_state:
                covered = self._sync_requested
            self._fsync_log()
            self._sync_done = covered

    def _fsync_log(self) -> None:
        # Commits append to the WAL in order, so one fsync of it covers every earlier commit of
        # every connection.  After a checkpoint reset it, the data is in the main file, which
        # SQLite fsyncs (synchronous=NORMAL does at checkpoints) before resetting the log; and
        # a missing WAL means a checkpoint moved everything there.  The main file itself is
        # never opened here: closing any descriptor of it would drop the POSIX locks SQLite
        # holds on it in this process (fcntl locks belong to the process, not the descriptor).
        try:
            fd = os.open(self.path + "-wal", os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        except OSError as exc:
            raise BackendUnavailable(f"embedded store: fsync failed: {exc}") from exc
        finally:
            os.close(fd)

    def create_table(self, name: str, families: Mapping[str, Mapping[str, object]], *,
                     new_keys_descend: bool = False) -> bool:
        if not name.replace("_", "").isalnum():
            raise ValueError(f"bad table name {name!r}")
        import json
        # A table whose new keys descend is kept in descending key order: a new row then
        # lands at the end of its run of keys instead of at the start.  SQLite fills B-tree
        # pages from the left, so an insert before a full page rebalances it with its
        # neighbours every time, and one after it mostly does not: measured on message rows,
        # 3.1-4.1 pages written to the log per insert instead of 5.6, and a third less CPU
        # (bench/RESULTS.md).  The order is only physical: every query names its ORDER BY,
        # and (row DESC, col DESC) read backwards is (row, col) ascending, so no query sorts.
        order = "row DESC, col DESC" if new_keys_descend else "row, col"
        with self._write() as db:
            exists = db.execute("SELECT 1 FROM _families WHERE tbl = ?", (name,)).fetchone()
            if exists:
                return False
            db.execute(f'CREATE TABLE "t_{name}" (row BLOB NOT NULL, col BLOB NOT NULL, '
                       f"val BLOB NOT NULL, PRIMARY KEY ({order})) WITHOUT ROWID")
            db.executemany("INSERT INTO _families VALUES (?, ?, ?)",
                           [(name, fam, json.dumps(dict(opts), sort_keys=True))
                            for fam, opts in families.items()])
            return True

    def text_index(self):
        """SQLite FTS5 with the trigram tokenizer (:mod:`.embedded_fts`), not posting rows."""
        from .embedded_fts import Fts5TextIndex
        index = getattr(self, "_text_index", None)
        if index is None:
            index = self._text_index = Fts5TextIndex(self)
        return index

    def tables(self) -> list[str]:
        cur = self._read("SELECT DISTINCT tbl FROM _families ORDER BY tbl", [])
        return [r[0] for r in cur]

    def families(self, name: str) -> dict[str, dict]:
        import json
        cur = self._read("SELECT family, options FROM _families WHERE tbl = ?", [name])
        return {fam: json.loads(opts) for fam, opts in cur}

    def delete_table(self, name: str) -> None:
        with self._write() as db:
            db.execute(f'DROP TABLE IF EXISTS "t_{name}"')
            db.execute("DELETE FROM _families WHERE tbl = ?", (name,))

    def release_thread(self) -> None:
        """Close this thread's connection (a thread that is about to end: a server thread
        per client, as the test gateway's).  Without it the connection, and its two file
        descriptors, would stay open until :meth:`close`."""
        db = getattr(self._local, "db", None)
        if db is None:
            return
        self._local.db = None
        with self._all_lock:
            if db in self._all:
                self._all.remove(db)
        try:
            db.close()
        except sqlite3.Error:
            pass

    def close(self) -> None:
        with self._all_lock:
            for db in self._all:
                try:
                    db.close()
                except sqlite3.Error:
                    pass
            self._all.clear()
        self._local = threading.local()


class _Group:
    """The context of :meth:`EmbeddedBackend.grouped` (a class: it is entered on every
    append, and a generator-based context manager cost twice as much)."""

    __slots__ = ("backend", "db", "outer")

    def __init__(self, backend: EmbeddedBackend):
        self.backend = backend

    def __enter__(self) -> None:
        local = self.backend._local
        self.outer = not getattr(local, "group", 0)
        if not self.outer:
            local.group += 1  # joins the enclosing group
            return
        self.db = self.backend._db()
        self.backend._begin(self.db)
        local.group, local.flushed = 1, False

    def __exit__(self, exc_type, exc, tb) -> None:
        local = self.backend._local
        if not self.outer:
            local.group -= 1
            return
        local.group = 0
        if not local.flushed:
            self.backend._end(self.db, "COMMIT" if exc_type is None else "ROLLBACK")


class _Guarded(_WriteTxn):
    """A write transaction whose SQLite failures surface as :class:`BackendUnavailable`."""

    def __enter__(self) -> sqlite3.Connection:
        try:
            return super().__enter__()
        except sqlite3.OperationalError as exc:
            raise BackendUnavailable(f"embedded store: {exc}") from exc

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            super().__exit__(exc_type, exc, tb)
        except sqlite3.Error as commit_exc:
            raise BackendUnavailable(f"embedded store: {commit_exc}") from commit_exc
        if isinstance(exc, sqlite3.OperationalError):
            raise BackendUnavailable(f"embedded store: {exc}") from exc
