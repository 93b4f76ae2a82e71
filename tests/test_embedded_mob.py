"""The embedded store's large values in files (decision 0028, as HBase's MOB): what lands
where, and that nothing is lost or left behind.

The contract suite (tests/test_backend_contract.py, its "mob" tables) checks that callers read
the same with large values in files as without, on both backends; these check the files
themselves: the threshold on both sides byte for byte, a value that imitates a reference,
removal with the row, what a kill or a grouped delete leaves and that reclaim and fsck find
it, fsync before the log, and a store made before taking MOB on.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time

import pytest

from mailstore.backends.base import Mutation
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.backends.embedded_mob import REF_LEN
from mailstore.content import chunk_column
from mailstore.fsck import Fsck
from mailstore.schema import CONTENT, Layout
from mailstore.store import MailStore

FAMILIES = {"c": {"max_versions": 1}, "m": {"max_versions": 1}}
LIMIT = 1000


@pytest.fixture
def backend(tmp_path):
    backend = EmbeddedBackend(str(tmp_path / "store"), synchronous="FULL")
    backend.create_table("BIG", FAMILIES, mob=("c", LIMIT))
    yield backend
    backend.close()


def stored(backend, table: str, row: bytes, col: bytes) -> bytes:
    """The cell as SQLite holds it (a reference or the value itself)."""
    return backend._db().execute(f'SELECT val FROM "t_{table}" WHERE row = ? AND col = ?',
                                 (row, col)).fetchone()[0]


def files(backend, table: str = "BIG") -> list[str]:
    root = os.path.join(backend.mob_root, table)
    return sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names)


def age(paths, seconds: float) -> None:
    then = time.time() - seconds
    for path in paths:
        os.utime(path, (then, then))


@pytest.mark.parametrize("size", [LIMIT - 1, LIMIT, LIMIT + 1, 3 * LIMIT])
def test_values_over_the_threshold_go_to_a_file_and_read_back_byte_for_byte(backend, size):
    """At or under the threshold a value is an ordinary cell; over it, its row's file holds
    it and the cell a reference.  Every read path returns the same octets either way."""
    table = backend.table("BIG")
    value = bytes(range(256)) * (size // 256) + bytes(size % 256)
    table.put(b"r1", {b"c:1": value, b"m:info": b"x" * (2 * LIMIT)})
    in_file = size > LIMIT
    assert (len(stored(backend, "BIG", b"r1", b"c:1")) == REF_LEN) is in_file
    assert stored(backend, "BIG", b"r1", b"m:info") == b"x" * (2 * LIMIT)  # not the family
    assert len(files(backend)) == int(in_file)
    want = {b"c:1": value, b"m:info": b"x" * (2 * LIMIT)}
    assert table.row(b"r1") == want
    assert table.large_cells(b"r1", [b"c:1"]) == {b"c:1": value}
    assert table.rows([b"r1", b"r0"]) == [(b"r1", want)]
    assert list(table.scan(prefix=b"r")) == [(b"r1", want)]
    if in_file:
        mode = os.stat(files(backend)[0]).st_mode
        assert stat.S_IMODE(mode) == 0o600  # the store's files are private (private.py)


def test_a_value_that_imitates_a_reference_stays_its_own_octets(backend):
    """A short value beginning with what a reference begins with is kept in the file too, so
    a message cannot make the store read another message's bytes."""
    table = backend.table("BIG")
    table.put(b"victim", {b"c:1": b"secret " * 500})
    forged = stored(backend, "BIG", b"victim", b"c:1")
    assert len(forged) == REF_LEN
    table.put(b"mallory", {b"c:1": forged})
    assert table.row(b"mallory") == {b"c:1": forged}


def test_deleting_a_row_removes_its_file(backend):
    table = backend.table("BIG")
    table.put(b"r", {b"c:1": b"a" * 5000})
    table.put(b"r", {b"c:2": b"b" * 5000})   # appended to the same file
    table.put(b"s", {b"c:1": b"c" * 5000})
    assert len(files(backend)) == 2
    table.delete(b"r")
    assert len(files(backend)) == 1
    table.mutate_rows([Mutation(b"s", delete_row=True)])
    assert files(backend) == []
    assert table.row(b"r") == table.row(b"s") == {}


def test_a_delete_inside_a_group_leaves_the_file_to_reclaim(backend):
    """Inside a grouped transaction the delete may yet be rolled back: the file stays until
    reclaim finds its row gone (and not before ``min_age``)."""
    table = backend.table("BIG")
    table.put(b"r", {b"c:1": b"a" * 5000})
    with backend.grouped():
        table.delete(b"r")
    assert len(files(backend)) == 1
    assert table.reclaim() == 0               # written just now: a writer may be at work
    assert table.reclaim(min_age=0, remove=False) == 1
    assert table.reclaim(min_age=0) == 1
    assert files(backend) == []


def test_a_rolled_back_group_keeps_the_value(backend):
    table = backend.table("BIG")
    table.put(b"r", {b"c:1": b"a" * 5000})
    with pytest.raises(RuntimeError), backend.grouped():
        table.delete(b"r")
        raise RuntimeError("roll back")
    assert table.reclaim(min_age=0) == 0
    assert table.row(b"r") == {b"c:1": b"a" * 5000}


def test_sync_fsyncs_the_files_before_the_log(backend, monkeypatch):
    """synchronous=FULL: what sync() makes durable refers only to durable bytes."""
    table = backend.table("BIG")
    table.put(b"r", {b"c:1": b"a" * 5000})
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(
        f"/proc/self/fd/{fd}")), real(fd)))
    backend.sync()
    path = files(backend)[0]
    assert synced[0] == path
    assert synced[-1] == backend.path + "-wal"
    assert os.path.dirname(path) in synced      # its new directory entry too
    synced.clear()
    backend.sync()
    assert synced == [backend.path + "-wal"]    # nothing written since


def test_a_store_made_before_takes_mob_on_and_reads_its_old_values(tmp_path):
    backend = EmbeddedBackend(str(tmp_path / "old"))
    backend.create_table("BIG", FAMILIES)
    backend.table("BIG").put(b"old", {b"c:1": b"o" * 5000})
    assert backend.create_table("BIG", FAMILIES, mob=("c", LIMIT)) is False
    table = backend.table("BIG")
    table.put(b"new", {b"c:1": b"n" * 5000})
    assert len(stored(backend, "BIG", b"old", b"c:1")) == 5000
    assert len(stored(backend, "BIG", b"new", b"c:1")) == REF_LEN
    assert table.row(b"old") == {b"c:1": b"o" * 5000}
    assert table.row(b"new") == {b"c:1": b"n" * 5000}
    backend.delete_table("BIG")
    assert not os.path.exists(os.path.join(backend.mob_root, "BIG"))
    backend.close()


def test_the_content_table_keeps_chunks_over_the_schema_threshold_in_files(tmp_path):
    """The schema's MOB family of JAMES_CONTENT (decision 0015's threshold) is what the
    embedded store keeps in files: a one-chunk message at the threshold stays a cell."""
    backend = EmbeddedBackend(str(tmp_path / "s"))
    store = MailStore(backend)
    limit = Layout().mob_threshold
    small = store.content.store(b"s" * limit)
    big = store.content.store(b"b" * (limit + 1))
    col = chunk_column(1)
    assert len(stored(backend, CONTENT.name, small, col)) == limit
    assert len(stored(backend, CONTENT.name, big, col)) == REF_LEN
    assert store.content.open(big, limit + 1, store.content.chunk_size).read() == \
        b"b" * (limit + 1)
    backend.close()


KILLED = r"""
import os, signal, sys
from mailstore.backends import embedded
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore

real = embedded.EmbeddedTable._insert
def dying(self, row, puts):
    if self.name == "JAMES_CONTENT" and any(len(v) == 36 for v in puts.values()):
        os.kill(os.getpid(), signal.SIGKILL)   # the chunk is in its file, its cell is not
    return real(self, row, puts)
embedded.EmbeddedTable._insert = dying
store = MailStore(EmbeddedBackend(sys.argv[1]))
store.append("k", "INBOX", b"Subject: big\r\n\r\n" + b"x" * 600_000)
"""


def test_a_kill_between_a_chunk_and_its_cell_leaves_a_file_fsck_removes(tmp_path):
    """SIGKILL after a chunk's file write, before its cell (a server killed mid-APPEND): no
    message, no content row; fsck reports the file once it is old enough for no writer to be
    at work on it, and --repair removes it."""
    path = str(tmp_path / "store")
    store = MailStore(EmbeddedBackend(path))
    store.create_user("k", "pw", default_folders=False)
    proc = subprocess.run([sys.executable, "-c", KILLED, path], capture_output=True,
                          timeout=60, env=dict(os.environ))
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    store = MailStore(EmbeddedBackend(path))
    assert list(store.iter_messages(store.mailbox("k", "INBOX"))) == []
    left = files(store.backend, CONTENT.name)
    assert len(left) == 1
    assert Fsck(store).run().ok         # fresh: maybe a writer's, not reported yet
    age(left, 3600)
    problems = [p.as_dict() for p in Fsck(store).run().problems]
    assert [(p["kind"], p["detail"]) for p in problems] == [
        ("content", "1 file(s) of chunks no content row refers to")]
    assert not Fsck(store, repair=True).run().ok
    assert files(store.backend, CONTENT.name) == []
    assert Fsck(store).run().ok


def test_under_synchronous_normal_nothing_waits_for_a_sync(tmp_path):
    """synchronous=NORMAL never fsyncs: the files written are not remembered for a sync that
    will not come (the set would grow for as long as the server runs)."""
    backend = EmbeddedBackend(str(tmp_path / "n"), synchronous="NORMAL")
    backend.create_table("BIG", FAMILIES, mob=("c", LIMIT))
    backend.table("BIG").put(b"r", {b"c:1": b"a" * 5000})
    assert len(files(backend)) == 1
    assert backend.mob_dirty.pending() == 0
    backend.close()
