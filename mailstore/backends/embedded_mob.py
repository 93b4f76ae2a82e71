"""Large values of the embedded store in files beside the database, as HBase keeps MOBs.

HBase stores the cells of a family declared ``IS_MOB`` that are over ``MOB_THRESHOLD`` in
files of their own, with a reference in the ordinary store; a client reads and writes them as
any cell.  The embedded store does the same for the family the schema names (the content
table's chunks, docs/decisions/0028-large-values-in-files.md): a value over the threshold is
appended to ``<data_dir>/mob/<table>/<xx>/<row key hex>`` (one file per row, ``xx`` its last
byte) and its cell holds a reference of :data:`REF_LEN` octets.  Nothing a caller reads
changes; what changes is the cost: a 50 MB body is one file written and read with a few system
calls instead of 12,800 SQLite pages written twice (log, then database) and read one by one.

A reference is ``MAGIC``, the table's 16-octet secret (random, made when the table took MOB
on), the offset and the length.  An inline value can only be taken for one if it begins with
the magic and the secret, which no one outside the store knows; a value that does begin so is
put in a file whatever its size, so the two never mix.

Order and crashes: a value is written to its file before the cell that refers to it, under the
file's lock, which a delete also takes; so a reference never points past what was written, and
a kill leaves at worst bytes no cell refers to.  Bytes of a row whose cells are all gone are
removed when the row is deleted (outside a grouped transaction), else by :meth:`MobFiles.reclaim`
(fsck, and the server's content sweep).  Space of a cell replaced or deleted alone stays in its
row's file until the row goes (HBase keeps it until MOB compaction).  Power loss:
:meth:`EmbeddedBackend.sync` fsyncs the files written since the last sync before the log.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping

from ..errors import BackendUnavailable
from .private import DIR_MODE, FILE_MODE

MAGIC = b"\x00mob"
_REF = struct.Struct(">4s16sQQ")
REF_LEN = _REF.size
"""Octets of a reference cell (36)."""
TAG_LEN = 20
"""Octets of a reference that identify it as one: the magic and the table's secret."""
MAX_ROW_KEY = 64
"""Rows with longer keys keep every value inline (a file name holds the key in hex)."""
RECLAIM_AGE = 600.0
"""Seconds a file must have been left unwritten before :meth:`MobFiles.reclaim` may remove it
for want of a row: a writer appends, then inserts its reference, within the same call."""


class MobFiles:
    """The large values of one table: where they live, how they are written, read, removed.

    ``exists(row)`` says whether the table still has a cell in ``row`` (committed);
    ``dirty(path, new)`` notes a file written, for the next :meth:`EmbeddedBackend.sync`.
    """

    def __init__(self, root: str, table: str, family: bytes, threshold: int, secret: bytes,
                 exists: Callable[[bytes], bool], dirty: Callable[[str, bool], None]):
        self.dir = os.path.join(root, table)
        self.family = family.rstrip(b":") + b":"
        self.threshold = threshold
        self.tag = MAGIC + secret
        self._exists = exists
        self._dirty = dirty

    # -- which values --------------------------------------------------------------------------

    def wants(self, row: bytes, column: bytes, value) -> bool:
        """Whether this value goes to a file: one of the family's, over the threshold or
        looking like a reference, in a row whose key fits a file name."""
        return (column.startswith(self.family) and len(row) <= MAX_ROW_KEY
                and (len(value) > self.threshold or bytes(value[:TAG_LEN]) == self.tag))

    def is_ref(self, value: bytes) -> bool:
        return len(value) == REF_LEN and value[:TAG_LEN] == self.tag

    def path(self, row: bytes) -> str:
        name = row.hex()
        return os.path.join(self.dir, name[-2:] or "00", name or "-")

    # -- writing -------------------------------------------------------------------------------

    @contextlib.contextmanager
    def appending(self, row: bytes) -> Iterator[Callable[[object], bytes]]:
        """Lock the row's file and yield ``append(value) -> reference``.  The caller inserts
        the references before leaving, so that a delete (which takes the same lock) never
        finds the row empty between a value and its reference."""
        path = self.path(row)
        fd, new = self._open_locked(path)
        try:
            offset = os.fstat(fd).st_size

            def append(value) -> bytes:
                nonlocal offset
                view = memoryview(value).cast("B")
                start, left = offset, len(view)
                while left:
                    done = os.write(fd, view[len(view) - left:])
                    left -= done
                offset += len(view)
                return _REF.pack(MAGIC, self.tag[len(MAGIC):], start, len(view))
            yield append
        except OSError as exc:
            # A partial value at the end of the file is never referred to: harmless.
            raise BackendUnavailable(f"embedded store: cannot write {path}: {exc}") from exc
        finally:
            self._dirty(path, new)
            os.close(fd)  # releases the lock

    def _open_locked(self, path: str) -> tuple[int, bool]:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        while True:
            try:
                before = os.path.exists(path)
                try:
                    fd = os.open(path, flags, FILE_MODE)
                except FileNotFoundError:
                    _make_dirs(os.path.dirname(path))
                    fd = os.open(path, flags, FILE_MODE)
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:
                raise BackendUnavailable(f"embedded store: cannot open {path}: {exc}") from exc
            if os.fstat(fd).st_nlink:
                return fd, not before
            os.close(fd)  # removed while we waited for its lock: start a new one

    # -- reading -------------------------------------------------------------------------------

    def resolve(self, row: bytes, cells: dict[bytes, bytes]) -> dict[bytes, bytes]:
        """``cells`` with each reference replaced by its value (in place; returned)."""
        refs = [(col, val) for col, val in cells.items()
                if len(val) == REF_LEN and val[:TAG_LEN] == self.tag]
        if not refs:
            return cells
        path = self.path(row)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return self._gone(row, cells, [col for col, _ in refs], path)
        except OSError as exc:
            raise BackendUnavailable(f"embedded store: cannot read {path}: {exc}") from exc
        try:
            for col, ref in refs:
                _magic, _secret, offset, length = _REF.unpack(ref)
                value = os.pread(fd, length, offset)
                if len(value) != length:
                    raise BackendUnavailable(
                        f"embedded store: {path} ends before the value of {col!r}")
                cells[col] = value
        except OSError as exc:
            raise BackendUnavailable(f"embedded store: cannot read {path}: {exc}") from exc
        finally:
            os.close(fd)
        return cells

    def _gone(self, row: bytes, cells: dict[bytes, bytes], columns: list[bytes],
              path: str) -> dict[bytes, bytes]:
        """The file went between the cells' read and its own: the row was deleted meanwhile
        (only a deleted row's file is removed), so its cells are answered as they are now."""
        if self._exists(row):
            raise BackendUnavailable(f"embedded store: {path} is missing")
        for col in columns:
            del cells[col]
        return cells

    # -- removing ------------------------------------------------------------------------------

    def forget(self, rows) -> None:
        """Remove the files of rows just deleted, unless a writer has put cells in them again
        (checked under the file's lock).  Never raises: what is left, reclaim removes."""
        for row in rows:
            if len(row) <= MAX_ROW_KEY:
                with contextlib.suppress(Exception):
                    self._remove_if_unused(self.path(row), row, 0.0)

    def _remove_if_unused(self, path: str, row: bytes, min_age: float) -> bool:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            st = os.fstat(fd)
            if not st.st_nlink or time.time() - st.st_mtime < min_age or self._exists(row):
                return False
            os.unlink(path)
            return True
        finally:
            os.close(fd)

    def orphans(self, min_age: float = RECLAIM_AGE) -> Iterator[tuple[str, bytes]]:
        """(path, row) of each file whose row has no cell left, unwritten for ``min_age``
        seconds."""
        now = time.time()
        for sub in _listdir(self.dir):
            for name in _listdir(os.path.join(self.dir, sub)):
                path = os.path.join(self.dir, sub, name)
                try:
                    row = bytes.fromhex(name)
                    if now - os.stat(path).st_mtime < min_age:
                        continue
                except (ValueError, OSError):
                    continue  # not ours, or gone meanwhile
                if not self._exists(row):
                    yield path, row

    def reclaim(self, min_age: float = RECLAIM_AGE, remove: bool = True) -> int:
        """Remove the files of :meth:`orphans`; return how many were removed (with ``remove``
        false: how many there are)."""
        found = list(self.orphans(min_age))
        if not remove:
            return len(found)
        removed = 0
        for path, row in found:
            with contextlib.suppress(OSError):
                removed += self._remove_if_unused(path, row, min_age)
        return removed

    def drop(self) -> None:
        """Every file of the table (the table is being dropped)."""
        shutil.rmtree(self.dir, ignore_errors=True)


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return []


def _make_dirs(path: str) -> None:
    """The table's directories, owner-only as the rest of the store (private.py)."""
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        _make_dirs(parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        return
    os.chmod(path, DIR_MODE)


class DirtyFiles:
    """Files written since the last sync, fsynced by the next one (with the directories that
    gained an entry) before the write-ahead log, so that after a power cut no reference that
    survived points to bytes that did not."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: set[str] = set()
        self._dirs: set[str] = set()

    def note(self, path: str, new: bool) -> None:
        with self._lock:
            self._files.add(path)
            if new:
                self._dirs.add(os.path.dirname(path))
                self._dirs.add(os.path.dirname(os.path.dirname(path)))

    def pending(self) -> int:
        """How many files wait for the next sync."""
        with self._lock:
            return len(self._files)

    def sync(self) -> None:
        with self._lock:
            files, self._files = self._files, set()
            dirs, self._dirs = self._dirs, set()
        for path in [*files, *sorted(dirs)]:
            try:
                fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # removed since: nothing refers to it
            except OSError as exc:
                raise BackendUnavailable(f"embedded store: cannot sync {path}: {exc}") from exc
            try:
                os.fsync(fd)
            except OSError as exc:
                if exc.errno != errno.EINVAL:  # a directory some systems will not fsync
                    raise BackendUnavailable(
                        f"embedded store: fsync of {path} failed: {exc}") from exc
            finally:
                os.close(fd)


def externalise(files: MobFiles, row: bytes, puts: Mapping[bytes, object],
                append: Callable[[object], bytes]) -> dict[bytes, object]:
    """``puts`` with the values :meth:`MobFiles.wants` written by ``append`` and replaced by
    their references."""
    return {col: append(val) if files.wants(row, col, val) else val
            for col, val in puts.items()}


def _ignore(path: str, new: bool) -> None:
    return None


def mob_table(base):
    """The table class of a table with large values: ``base`` (EmbeddedTable) with its reads
    resolving references and its writes putting large values in files.  Made here, from the
    class passed in, so that embedded.py need not be imported by this module."""

    class MobTable(base):
        def __init__(self, backend, name: str, spec: tuple[bytes, int, bytes]):
            super().__init__(backend, name)
            family, threshold, secret = spec
            exists_sql = f"SELECT 1 FROM {self._sql} WHERE row = ? LIMIT 1"
            # Only synchronous=FULL syncs (and so forgets) what was written: under NORMAL
            # nothing is noted, or the set would grow for as long as the process runs.
            dirty = backend.mob_dirty.note if backend.synchronous == "FULL" else _ignore
            self.files = MobFiles(backend.mob_root, name, family, threshold, secret,
                                  lambda row: backend._read(exists_sql, (row,)).fetchone()
                                  is not None, dirty)

        # -- reads: the references replaced by their values ------------------------------------

        def row(self, row, columns=None):
            return self.files.resolve(row, super().row(row, columns))

        def large_cells(self, row, columns):
            # Values stored before the table took MOB on are still SQLite pages: read mapped.
            return self.files.resolve(row, super().large_cells(row, columns))

        def rows(self, rows, columns=None):
            return [(key, self.files.resolve(key, cells))
                    for key, cells in super().rows(rows, columns)]

        def scan(self, *args, **kwargs):
            for key, cells in super().scan(*args, **kwargs):
                yield key, self.files.resolve(key, cells)

        # -- writes: large values to the row's file first, then their references -------------

        def put_large(self, row, data):
            # The cells put are references: no log growth worth holding checkpoints for.
            self.put(row, data)

        def _insert(self, row, puts):
            if not any(self.files.wants(row, c, v) for c, v in puts.items()):
                return super()._insert(row, puts)
            with self.files.appending(row) as append:
                super()._insert(row, externalise(self.files, row, puts, append))

        def mutate_rows(self, mutations):
            if len(mutations) == 1 and not mutations[0].deletes and not mutations[0].delete_row:
                if mutations[0].puts:
                    self._insert(mutations[0].row, mutations[0].puts)
                return
            with contextlib.ExitStack() as stack:
                out = []
                appends = {}  # one lock per file: a second flock of it here would wait forever
                for m in mutations:
                    if any(self.files.wants(m.row, c, v) for c, v in m.puts.items()):
                        append = appends.get(m.row)
                        if append is None:
                            append = appends[m.row] = stack.enter_context(
                                self.files.appending(m.row))
                        m = type(m)(m.row, externalise(self.files, m.row, m.puts, append),
                                    m.deletes, m.delete_row)
                    out.append(m)
                super().mutate_rows(out)
            deleted = [m.row for m in mutations if m.delete_row]
            if deleted and not self.backend._db().in_transaction:
                # Inside a grouped transaction the delete is not committed yet (and may be
                # rolled back): its files are left to reclaim.
                self.files.forget(deleted)

        def put_then_check_and_put(self, row, data, column, value):
            if not any(self.files.wants(row, c, v) for c, v in data.items()):
                return super().put_then_check_and_put(row, data, column, value)
            with self.files.appending(row) as append:
                return super().put_then_check_and_put(
                    row, externalise(self.files, row, data, append), column, value)

        def check_and_put(self, row, column, expected, put_column, value):
            # A large value put is written to the file first (left unreferenced if the check
            # fails: it goes with the row); a compared cell of the family is read whole.
            if not self.files.wants(row, put_column, value):
                return self._check_and_put(row, column, expected, put_column, value)
            with self.files.appending(row) as append:
                return self._check_and_put(row, column, expected, put_column, append(value))

        def _check_and_put(self, row, column, expected, put_column, value):
            if expected in (None, b"") or not column.startswith(self.files.family):
                return super().check_and_put(row, column, expected, put_column, value)
            with self.backend._write() as db:
                found = db.execute(f"SELECT val FROM {self._sql} WHERE row = ? AND col = ?",
                                   (row, column)).fetchone()
                current = self.files.resolve(row, {column: found[0]})[column] if found else None
                if current != expected:
                    return False
                db.execute(f"INSERT OR REPLACE INTO {self._sql} (row, col, val) "
                           "VALUES (?, ?, ?)", (row, put_column, bytes(value)))
                return True

        def reclaim(self, min_age: float = RECLAIM_AGE, remove: bool = True) -> int:
            return self.files.reclaim(min_age, remove)

    return MobTable
