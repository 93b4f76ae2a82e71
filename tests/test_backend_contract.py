"""The storage contract (``mailstore.backends.base``), checked the same way on every backend.

Every test taking ``backend`` runs against the embedded store and against the HBase backend over
Thrift, so the two cannot drift apart: what the mail store may rely on is exactly what passes
here on both.  The last tests are specific to the HBase backend (unreachable servers, transports)
and to the test gateway's fidelity to HBase, on which the HBase runs depend.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from mailstore.backends.base import Mutation, decode_counter, encode_counter
from mailstore.backends.embedded import EmbeddedBackend
from mailstore.errors import BackendUnavailable
from tests.conftest import open_store
from tests.gatewayproc import EXTERNAL_SKIP

FAMILIES = {"m": {"max_versions": 1}, "f": {"max_versions": 1}}

KEYS = [b"\x00", b"\x00\x00", b"\x00\xff", b"a", b"a\x00", b"a\x00\x00", b"a\x01", b"a\xfe",
        b"a\xff", b"a\xff\x00", b"a\xff\xff", b"b", b"\xff", b"\xff\x00", b"\xff\xff"]
SORTED = sorted(KEYS)   # Python compares bytes as memcmp does, which is HBase's row order


@pytest.fixture(params=["embedded", "hbase", "hbase-thrift2"])
def backend(request, tmp_path):
    """The contract runs over every backend, and over both of HBase's Thrift APIs
    (docs/decisions/0029): the session's Thrift1 and Thrift2 servers share one store."""
    store = open_store(request, tmp_path, request.param)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(params=[(False, None), (True, None), (False, ("m", 8))],
                ids=["ascending", "new-keys-descend", "mob"])
def table(backend, request):
    # new_keys_descend is a layout hint (the embedded store keeps such a table in descending
    # key order), and mob one for big values (the embedded store keeps family m's values over
    # 8 octets, counters excepted, in files: decision 0028): every contract test must pass
    # the same with each.
    descend, mob = request.param
    backend.create_table("CONTRACT", FAMILIES, new_keys_descend=descend, mob=mob)
    return backend.table("CONTRACT")


@pytest.fixture
def filled(table):
    for key in reversed(KEYS):
        table.put(key, {b"m:k": key})
    return table


def keys(rows):
    return [key for key, _ in rows]


def in_range(start, stop, reverse=False):
    found = [k for k in SORTED if (start is None or k >= start) and (stop is None or k < stop)]
    return found[::-1] if reverse else found


# -- tables ---------------------------------------------------------------------------------

def test_create_table_is_idempotent_and_tables_lists_them(backend):
    # On HBase the test's prefix already holds the schema's tables (tests/hbasetarget.py).
    before = backend.tables()
    assert "A_ONE" not in before and "B_TWO" not in before
    assert backend.create_table("A_ONE", FAMILIES) is True
    assert backend.create_table("A_ONE", FAMILIES) is False
    assert backend.create_table("B_TWO", {"x": {"max_versions": 1}}) is True
    assert backend.tables() == sorted([*before, "A_ONE", "B_TWO"])
    backend.table("A_ONE").put(b"r", {b"m:a": b"1"})
    backend.delete_table("A_ONE")
    backend.delete_table("A_ONE")       # already gone: nothing to do
    assert backend.tables() == sorted([*before, "B_TWO"])
    assert backend.create_table("A_ONE", FAMILIES) is True
    assert backend.table("A_ONE").row(b"r") == {}


def test_embedded_tables_whose_new_keys_descend_are_kept_in_descending_order(tmp_path):
    """The layout behind the hint: a new message row lands after its mailbox's existing rows
    in the B-tree (the cheap place), not before them.  Reads are checked by every contract
    test above on both layouts."""
    from mailstore.schema import MESSAGES, create_schema
    backend = EmbeddedBackend(str(tmp_path / "e"))
    create_schema(backend)
    backend.create_table("PLAIN", FAMILIES)
    ddl = dict(backend._db().execute("SELECT name, sql FROM sqlite_schema WHERE type = 'table'"))
    assert MESSAGES.new_keys_descend
    assert "PRIMARY KEY (row DESC, col DESC)" in ddl["t_JAMES_MESSAGES"]
    assert "PRIMARY KEY (row, col)" in ddl["t_PLAIN"]
    assert "PRIMARY KEY (row, col)" in ddl["t_JAMES_CONTENT"]
    table = backend.table("JAMES_MESSAGES")
    for key in (b"b", b"a", b"c"):
        table.put(key, {b"m:s": key, b"f:v": key})
    # Physically descending (what SQLite returns without ORDER BY, walking the key) ...
    assert [r for r, in backend._db().execute('SELECT row FROM "t_JAMES_MESSAGES"')] == \
        [b"c", b"c", b"b", b"b", b"a", b"a"]
    # ... and read in key order all the same.
    assert [k for k, _ in table.scan(start=b"a", stop=b"d")] == [b"a", b"b", b"c"]
    assert [k for k, _ in table.scan(start=b"a", stop=b"d", reverse=True)] == [b"c", b"b", b"a"]
    assert list(table.row(b"b")) == [b"f:v", b"m:s"]
    backend.close()


def test_a_missing_table_is_reported_as_unavailable(backend):
    with pytest.raises(BackendUnavailable):
        backend.table("NO_SUCH_TABLE").row(b"r")
    with pytest.raises(BackendUnavailable):
        backend.table("NO_SUCH_TABLE").put(b"r", {b"m:a": b"1"})


# -- reads and column selections ------------------------------------------------------------

def test_put_row_and_rows_with_family_and_column_selections(table):
    table.put(b"r1", {b"m:a": b"1", b"m:b": b"2", b"f:x": b"3"})
    table.put(b"r2", {b"f:x": b"4"})
    whole = {b"m:a": b"1", b"m:b": b"2", b"f:x": b"3"}
    assert table.row(b"r1") == whole
    assert table.row(b"r1", [b"m"]) == {b"m:a": b"1", b"m:b": b"2"}
    assert table.row(b"r1", [b"m:"]) == {b"m:a": b"1", b"m:b": b"2"}
    assert table.row(b"r1", [b"m:a", b"f"]) == {b"m:a": b"1", b"f:x": b"3"}
    # A family selected whole stays whole, in whatever order the selection names it.
    assert table.row(b"r1", [b"m", b"m:a"]) == {b"m:a": b"1", b"m:b": b"2"}
    assert table.row(b"r1", [b"m:a", b"m:"]) == {b"m:a": b"1", b"m:b": b"2"}
    assert table.row(b"r1", [b"m:zz"]) == {}
    assert table.row(b"r1", []) == {}
    assert table.row(b"nope") == {}
    assert table.rows([b"r2", b"nope", b"r1"]) == [(b"r2", {b"f:x": b"4"}), (b"r1", whole)]
    assert table.rows([b"r1", b"r2"], [b"m"]) == [(b"r1", {b"m:a": b"1", b"m:b": b"2"})]
    assert table.rows([b"r1", b"r2"], [b"f:x"]) == [(b"r1", {b"f:x": b"3"}),
                                                     (b"r2", {b"f:x": b"4"})]
    assert table.rows([]) == []
    assert table.rows([b"r1"], []) == []
    table.put(b"r1", {b"m:a": b"new"})
    assert table.row(b"r1") == {**whole, b"m:a": b"new"}


def test_cells_come_in_column_order(table):
    """HBase returns a row's cells sorted by column; so does every read here, on any layout."""
    table.put(b"r", {b"m:z": b"1", b"f:b": b"2", b"m:a": b"3", b"f:a": b"4"})
    table.put(b"s", {b"m:b": b"5", b"f:c": b"6"})
    order = [b"f:a", b"f:b", b"m:a", b"m:z"]
    assert list(table.row(b"r")) == order
    assert list(table.row(b"r", [b"m", b"f:b"])) == [b"f:b", b"m:a", b"m:z"]
    assert [list(cells) for _, cells in table.rows([b"s", b"r"])] == [[b"f:c", b"m:b"], order]
    assert [list(cells) for _, cells in table.scan(start=b"r", stop=b"t")] == \
        [order, [b"f:c", b"m:b"]]


def test_binary_keys_sort_bytewise_and_values_round_trip_exactly(table):
    values = [b"", b"\x00", b"0", b" ", b"\xff\xff", b"\x00" * 8, bytes(range(256))]
    for i, key in enumerate(reversed(KEYS)):
        table.put(key, {b"m:v": values[i % len(values)], b"f:" + key: key})
    for i, key in enumerate(reversed(KEYS)):
        assert table.row(key) == {b"m:v": values[i % len(values)], b"f:" + key: key}
    assert keys(table.scan(start=b"\x00")) == SORTED
    assert table.row(b"\x00") and table.row(b"\x00\x00") != table.row(b"\x00")
    empty = [k for i, k in enumerate(reversed(KEYS)) if values[i % len(values)] == b""]
    assert table.rows(empty, [b"m:v"]) == [(k, {b"m:v": b""}) for k in empty]


# -- scans ----------------------------------------------------------------------------------

@pytest.mark.parametrize("start, stop", [
    (b"a", b"b"), (b"a\x00", b"a\xff"), (b"a\x01", b"a\xff\x00"), (None, b"a"), (b"a\xff", None),
    (b"\x00", b"\xff\xff"), (b"a\x00\x00", b"a\x00\x00\x00"), (b"c", b"d"), (b"\x00", None)])
def test_scan_ranges_forward_and_reverse(filled, start, stop):
    assert keys(filled.scan(start=start, stop=stop)) == in_range(start, stop)
    assert keys(filled.scan(start=start, stop=stop, reverse=True)) == in_range(start, stop, True)
    for batch in (1, 2):
        for limit in (1, 3):
            assert (keys(filled.scan(start=start, stop=stop, reverse=True, batch_size=batch,
                                     limit=limit)) == in_range(start, stop, True)[:limit])
            assert (keys(filled.scan(start=start, stop=stop, batch_size=batch, limit=limit))
                    == in_range(start, stop)[:limit])


def test_reverse_scan_includes_start_and_excludes_stop(filled):
    found = keys(filled.scan(start=b"a\x01", stop=b"a\xff", reverse=True))
    assert found == [b"a\xfe", b"a\x01"]     # not a\xff (= stop), not a\x00\x00 (< start)
    found = keys(filled.scan(start=b"a", stop=b"a\x01", reverse=True))
    assert found == [b"a\x00\x00", b"a\x00", b"a"]


@pytest.mark.parametrize("prefix", [b"a", b"a\x00", b"a\xff", b"\xff", b"\xff\xff", b"\x00",
                                    b"zz"])
def test_prefix_scans_including_prefixes_ending_in_ff(filled, prefix):
    expected = [k for k in SORTED if k.startswith(prefix)]
    assert keys(filled.scan(prefix=prefix)) == expected
    assert keys(filled.scan(prefix=prefix, reverse=True)) == expected[::-1]
    assert keys(filled.scan(prefix=prefix, reverse=True, batch_size=1, limit=2)) == \
        expected[::-1][:2]
    assert [row for _, row in filled.scan(prefix=prefix)] == [{b"m:k": k} for k in expected]


def test_scan_limit(filled):
    assert keys(filled.scan(start=b"a", stop=b"b", limit=3)) == in_range(b"a", b"b")[:3]
    assert keys(filled.scan(start=b"a", stop=b"b", limit=100)) == in_range(b"a", b"b")
    assert keys(filled.scan(start=b"a", stop=b"b", limit=0)) == []


def test_large_cells_reads_what_row_reads(table, backend):
    """``large_cells`` (how a content reader gets its chunks) returns what ``row`` returns,
    values of hundreds of KiB and values still in the write-ahead log included."""
    big = [bytes([i]) * (300_000 + i) for i in range(3)]
    table.put(b"big", {b"m:1": big[0], b"m:2": big[1], b"f:x": b"small"})
    if isinstance(backend, EmbeddedBackend):
        backend._db().execute("PRAGMA wal_checkpoint(TRUNCATE)")  # in the file, then the log
    table.put(b"big", {b"m:3": big[2]})
    want = [b"m:1", b"m:3", b"m:9", b"f:x"]
    assert table.large_cells(b"big", want) == table.row(b"big", want)
    assert table.large_cells(b"big", want) == {b"m:1": big[0], b"m:3": big[2], b"f:x": b"small"}
    assert table.large_cells(b"nope", want) == {}


def test_put_large_puts_what_put_puts(table, backend):
    """``put_large`` (a big message's chunks) stores what ``put`` stores; on the embedded store
    it leaves the connection checkpointing as before (SQLite's 1,000 pages) once done."""
    big = b"\x00\xff" * 200_000
    table.put_large(b"big", {b"m:1": big, b"m:2": b"x"})
    table.put_large(b"big", {})
    assert table.row(b"big") == {b"m:1": big, b"m:2": b"x"}
    if isinstance(backend, EmbeddedBackend):
        assert backend._db().execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 1000


def test_embedded_put_large_leaves_the_checkpoint_to_the_completing_put(tmp_path):
    """Chunks put with ``put_large`` stay in the write-ahead log (no checkpoint, so none of its
    fsyncs, per chunk: issue 14); the next ordinary put checkpoints them (the log's frames are
    then all in the database)."""
    backend = EmbeddedBackend(str(tmp_path / "store"), synchronous="NORMAL")
    backend.create_table("CONTRACT", FAMILIES)
    table = backend.table("CONTRACT")
    for i in range(20):   # 20 x 256 KiB: about 1,300 pages, past the 1,000-page threshold
        table.put_large(b"r", {b"m:%d" % i: bytes([i]) * 262_144})
    frames, done = _wal_frames(backend)
    assert frames > 1000 and done == 0
    table.put(b"r", {b"f:info": b"done"})
    _frames, done = _wal_frames(backend)
    assert done == _frames
    assert table.row(b"r", [b"m:19"]) == {b"m:19": bytes([19]) * 262_144}
    backend.close()


def _wal_frames(backend) -> tuple[int, int]:
    """(frames in the write-ahead log, frames of it already checkpointed), from SQLite's
    wal-index header (the -shm file: mxFrame at offset 16, nBackfill at 96)."""
    import struct
    with open(backend.path + "-shm", "rb") as shm:
        head = shm.read(136)
    return struct.unpack_from("=I", head, 16)[0], struct.unpack_from("=I", head, 96)[0]


def test_embedded_large_cells_drop_their_memory_map(tmp_path):
    """The embedded store reads large cells through a memory map of its file and unmaps it
    afterwards: the mapped pages would otherwise count in the server's RSS for good (issue 14:
    a 50 MB body must not grow the server by 50 MB).  Checked in /proc/self/maps."""
    backend = EmbeddedBackend(str(tmp_path / "store"), synchronous="NORMAL")
    backend.create_table("CONTRACT", FAMILIES)
    table = backend.table("CONTRACT")
    table.put(b"r", {b"m:1": b"x" * 2_000_000})
    backend._db().execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def mapped() -> bool:
        with open("/proc/self/maps") as maps:
            return any(line.rstrip().endswith(backend.path) for line in maps)
    seen = []
    real_row = table.row

    def row(key, columns=None):  # looks at the maps just after the read, still inside it
        found = real_row(key, columns)
        seen.append(mapped())
        return found
    table.row = row
    assert table.large_cells(b"r", [b"m:1"]) == {b"m:1": b"x" * 2_000_000}
    assert seen == [True] and not mapped()
    assert backend._db().execute("PRAGMA mmap_size").fetchone()[0] == 0
    backend.close()


def test_scan_column_selection_skips_rows_without_selected_cells(table):
    for i in range(12):
        table.put(b"k%02d" % i, {b"m:a": b"%d" % i})
        if i % 3 == 0:
            table.put(b"k%02d" % i, {b"f:x": b"x%d" % i})
    with_f = [b"k00", b"k03", b"k06", b"k09"]
    assert keys(table.scan(prefix=b"k", columns=[b"f"])) == with_f
    assert keys(table.scan(prefix=b"k", columns=[b"f:x", b"m:nope"], batch_size=1)) == with_f
    assert keys(table.scan(prefix=b"k", columns=[b"f"], reverse=True)) == with_f[::-1]
    assert keys(table.scan(prefix=b"k", columns=[b"f"], batch_size=1, limit=2)) == with_f[:2]
    assert (keys(table.scan(prefix=b"k", columns=[b"f"], reverse=True, batch_size=1, limit=3))
            == with_f[::-1][:3])
    assert dict(table.scan(prefix=b"k", columns=[b"f:"]))[b"k03"] == {b"f:x": b"x3"}
    assert list(table.scan(prefix=b"k", columns=[b"m:nope"])) == []
    assert list(table.scan(prefix=b"k", columns=[])) == []


@pytest.mark.parametrize("batch", [1, 2, 7, 25, 1000])
def test_scan_batches_smaller_than_the_result(table, batch):
    all_keys = [b"row%03d" % i for i in range(25)]
    for key in all_keys:
        table.put(key, {b"m:a": key, b"f:b": key})
    for reverse in (False, True):
        expected = all_keys[::-1] if reverse else all_keys
        for limit in (None, 1, 7, 24, 25, 30):
            found = list(table.scan(prefix=b"row", batch_size=batch, limit=limit,
                                    reverse=reverse))
            assert keys(found) == expected[:limit]
            assert all(row == {b"m:a": key, b"f:b": key} for key, row in found)


def test_unbounded_and_ambiguous_scans_are_refused(table):
    with pytest.raises(ValueError):
        list(table.scan())
    with pytest.raises(ValueError):
        list(table.scan(reverse=True, limit=1))
    with pytest.raises(ValueError):
        list(table.scan(prefix=b"a", start=b"a"))


# -- writes ---------------------------------------------------------------------------------

def test_mutate_rows_applies_each_rows_changes_in_order(table):
    table.put(b"r1", {b"m:a": b"1", b"m:b": b"2", b"f:x": b"3"})
    table.put(b"r2", {b"m:a": b"1", b"f:x": b"2", b"f:y": b"3"})
    table.put(b"r3", {b"m:a": b"1", b"f:x": b"2"})
    table.put(b"r4", {b"m:a": b"1"})
    table.put(b"r7", {b"m:a": b"1", b"f:old": b"2", b"f:x": b"3"})
    table.mutate_rows([
        Mutation(b"r1", puts={b"m:c": b"new"}, deletes=[b"m:a", b"f:"]),
        Mutation(b"r2", delete_row=True, puts={b"f:x": b"fresh"}),
        Mutation(b"r3", puts={b"f:x": b"again"}, deletes=[b"f:x", b"m"]),
        Mutation(b"r4", puts={b"m:z": b"1"}),
        Mutation(b"r4", deletes=[b"m:a"]),
        Mutation(b"r4", puts={b"m:a": b"back"}, deletes=[b"m:z"]),
        Mutation(b"r5", puts={b"m:a": b"new row"}),
        Mutation(b"r6", delete_row=True),
        Mutation(b"r7", deletes=[b"f:"], puts={b"f:new": b"n"}),
    ])
    assert table.row(b"r1") == {b"m:b": b"2", b"m:c": b"new"}
    assert table.row(b"r2") == {b"f:x": b"fresh"}
    assert table.row(b"r3") == {b"f:x": b"again"}
    assert table.row(b"r4") == {b"m:a": b"back"}
    assert table.row(b"r5") == {b"m:a": b"new row"}
    assert table.row(b"r6") == {}
    assert table.row(b"r7") == {b"m:a": b"1", b"f:new": b"n"}
    table.mutate_rows([])


def test_delete_selected_cells_and_whole_rows(table):
    table.put(b"r", {b"m:a": b"1", b"m:b": b"2", b"f:x": b"3"})
    table.delete(b"r", [b"m:a"])
    assert table.row(b"r") == {b"m:b": b"2", b"f:x": b"3"}
    table.delete(b"r", [b"f"])
    assert table.row(b"r") == {b"m:b": b"2"}
    table.delete(b"r", [])
    assert table.row(b"r") == {b"m:b": b"2"}
    table.delete(b"r")
    assert table.row(b"r") == {}


def test_writes_right_after_deletes_are_not_lost(table):
    """HBase hides a put stamped in the same millisecond as a delete marker covering it."""
    for i in range(25):
        value = b"%d" % i
        table.mutate_rows([Mutation(b"row", delete_row=True, puts={b"m:a": value})])
        assert table.row(b"row") == {b"m:a": value}
        table.delete(b"row")
        table.put(b"row", {b"m:a": value, b"f:x": value})
        assert table.row(b"row") == {b"m:a": value, b"f:x": value}
        table.delete(b"row", [b"m:a"])
        assert table.check_and_put(b"row", b"m:a", None, b"m:a", value) is True
        table.mutate_rows([Mutation(b"row", deletes=[b"f"])])
        table.mutate_rows([Mutation(b"row", puts={b"f:x": value})])
        assert table.row(b"row") == {b"m:a": value, b"f:x": value}


def test_increment_returns_new_values_stored_as_8_byte_big_endian_signed(table):
    assert table.increment(b"c", b"m:n") == 1
    assert table.increment(b"c", b"m:n", 41) == 42
    assert table.increment(b"c", b"m:n", -50) == -8
    assert table.increment(b"c", b"m:n", 0) == -8
    raw = table.row(b"c", [b"m:n"])[b"m:n"]
    assert raw == b"\xff" * 7 + b"\xf8" == encode_counter(-8)
    table.put(b"c", {b"m:p": encode_counter(2**40)})
    assert table.increment(b"c", b"m:p", 1) == 2**40 + 1
    assert table.increment(b"c", b"m:big", 2**62) == 2**62
    assert table.row(b"c", [b"m:big"])[b"m:big"] == b"\x40" + b"\x00" * 7


def test_increment_many(table):
    table.increment_many(b"c", {b"m:a": 1, b"m:b": -2, b"f:c": 3})
    table.increment_many(b"c", {b"m:a": 10, b"m:b": -2})
    table.increment_many(b"c", {})
    row = table.row(b"c")
    assert {col: decode_counter(raw) for col, raw in row.items()} == \
        {b"m:a": 11, b"m:b": -4, b"f:c": 3}
    assert all(len(raw) == 8 for raw in row.values())


def test_increment_many_returns_the_values_asked_for(table):
    assert table.increment_many(b"c", {b"m:uid": 1, b"m:ms": 1, b"m:n": 5},
                                returning=(b"m:uid", b"m:ms")) == {b"m:uid": 1, b"m:ms": 1}
    assert table.increment_many(b"c", {b"m:uid": 2, b"m:ms": 1, b"m:n": 5},
                                returning=[b"m:ms"]) == {b"m:ms": 2}
    assert table.increment_many(b"c", {b"m:uid": -1}, returning={b"m:uid"}) == {b"m:uid": 2}
    assert table.increment_many(b"c", {b"m:n": 1}) == {}
    row = table.row(b"c")
    assert {col: decode_counter(raw) for col, raw in row.items()} == \
        {b"m:uid": 2, b"m:ms": 2, b"m:n": 11}
    with pytest.raises(ValueError):
        table.increment_many(b"c", {b"m:n": 1}, returning=[b"m:uid"])


def test_increment_many_returning_is_atomic_under_contention(table):
    seen = []

    def work():
        for _ in range(20):
            got = table.increment_many(b"ctr", {b"m:n": 1, b"f:t": 3}, returning=[b"m:n"])
            seen.append(got[b"m:n"])

    run_threads(6, work)
    assert sorted(seen) == list(range(1, 121))
    assert decode_counter(table.row(b"ctr")[b"f:t"]) == 360


def test_put_then_check_and_put(table):
    assert table.put_then_check_and_put(b"r", {b"m:a": b"1", b"f:b": b"2"}, b"m:s", b"C1")
    assert table.row(b"r") == {b"m:a": b"1", b"f:b": b"2", b"m:s": b"C1"}
    # The check fails: the checked cell keeps its value.  Whether the data cells were put
    # is up to the backend (HBase puts them, the embedded store does not); the caller
    # removes them.
    assert not table.put_then_check_and_put(b"r", {b"m:a": b"3"}, b"m:s", b"C2")
    assert table.row(b"r", [b"m:s", b"f:b"]) == {b"m:s": b"C1", b"f:b": b"2"}
    assert table.row(b"r", [b"m:a"])[b"m:a"] in (b"1", b"3")
    # Nothing but the checked cell is fine too, and other rows are untouched.
    assert table.put_then_check_and_put(b"q", {}, b"m:s", b"X")
    assert table.row(b"q") == {b"m:s": b"X"}
    with pytest.raises(ValueError):
        table.put_then_check_and_put(b"p", {b"m:s": b"1"}, b"m:s", b"C")
    assert table.row(b"p") == {}


def test_put_then_check_and_put_lets_exactly_one_writer_commit(table):
    wins = []

    def work():
        if table.put_then_check_and_put(b"race", {b"f:v": b"x"}, b"m:s",
                                        str(threading.get_ident()).encode()):
            wins.append(threading.get_ident())

    run_threads(8, work)
    assert len(wins) == 1
    assert table.row(b"race", [b"m:s"]) == {b"m:s": str(wins[0]).encode()}


def test_check_and_put(table):
    assert table.check_and_put(b"r", b"m:owner", None, b"m:owner", b"alice") is True
    assert table.check_and_put(b"r", b"m:owner", None, b"m:owner", b"bob") is False
    assert table.row(b"r") == {b"m:owner": b"alice"}
    assert table.check_and_put(b"r", b"m:owner", b"bob", b"m:owner", b"carol") is False
    assert table.check_and_put(b"r", b"m:owner", b"alic", b"m:owner", b"carol") is False
    assert table.check_and_put(b"r", b"m:owner", b"alice", b"m:owner", b"carol") is True
    # Checks one cell, puts one (possibly other) cell, and touches nothing else.
    assert table.check_and_put(b"r", b"m:owner", b"carol", b"f:note", b"hi") is True
    assert table.row(b"r") == {b"m:owner": b"carol", b"f:note": b"hi"}
    # An empty expected value means "absent", as in HBase.
    assert table.check_and_put(b"r", b"m:slot", b"", b"m:slot", b"x") is True
    assert table.check_and_put(b"r", b"m:slot", b"", b"m:slot", b"y") is False
    assert table.check_and_put(b"other", b"m:owner", b"carol", b"m:owner", b"z") is False
    assert table.row(b"other") == {}


def run_threads(count, work):
    errors = []

    def guarded():
        try:
            work()
        except BaseException as exc:    # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded) for _ in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_check_and_put_is_atomic_under_contention(table):
    threads, rounds = 8, 15

    def work():
        done = 0
        while done < rounds:
            current = table.row(b"ctr", [b"m:n"]).get(b"m:n")
            new = encode_counter(decode_counter(current) + 1)
            if table.check_and_put(b"ctr", b"m:n", current, b"m:n", new):
                done += 1

    run_threads(threads, work)
    assert decode_counter(table.row(b"ctr")[b"m:n"]) == threads * rounds


def test_increments_are_atomic_under_contention(table):
    run_threads(6, lambda: [table.increment(b"ctr", b"m:n") for _ in range(20)])
    assert table.increment(b"ctr", b"m:n", 0) == 120


# -- groups (Backend.grouped): a hint a backend may take, never something to rely on ---------

def test_concurrently_returns_each_calls_result_in_argument_order(backend, table):
    """Backend.concurrently: independent calls, results in the order given."""
    assert backend.concurrently() == []
    assert backend.concurrently(lambda: 7) == [7]
    results = backend.concurrently(lambda: table.put(b"a", {b"m:x": b"1"}),
                                   lambda: table.increment(b"n", b"m:c", 5),
                                   lambda: table.row(b"absent"))
    assert results == [None, 5, {}]
    assert table.row(b"a") == {b"m:x": b"1"}


def test_concurrently_raises_the_first_failure_after_the_calls_have_ended(backend, table):
    """A call before the failing one in argument order has run to its end when the failure
    is raised; the failure raised is the first in argument order, whichever ended first."""
    def slow_put():
        time.sleep(0.05)
        table.put(b"s", {b"m:x": b"1"})

    def fail(exc):
        def call():
            raise exc
        return call
    with pytest.raises(ValueError, match="first"):
        backend.concurrently(slow_put, fail(ValueError("first")), fail(KeyError("second")))
    assert table.row(b"s") == {b"m:x": b"1"}


def test_a_group_sees_its_own_writes_and_leaves_them_all_visible(backend, table):
    with backend.grouped():
        table.put(b"g1", {b"m:a": b"1"})
        assert table.increment_many(b"g1", {b"f:n": 2, b"f:m": 5}, returning=[b"f:n"]) \
            == {b"f:n": 2}
        assert table.put_then_check_and_put(b"g2", {b"m:x": b"x"}, b"m:s", b"C")
        assert not table.check_and_put(b"g2", b"m:s", None, b"m:s", b"D")
        with backend.grouped():  # joins the outer group
            table.mutate_rows([Mutation(b"g1", puts={b"m:b": b"2"}, deletes=[b"m:a"])])
        backend.flush_group()
        assert table.check_and_put(b"g2", b"m:s", b"C", b"m:s", b"E")
        assert table.row(b"g1") == {b"m:b": b"2", b"f:n": encode_counter(2),
                                    b"f:m": encode_counter(5)}
    # Another thread (its own connection on the embedded store) sees everything afterwards.
    seen = []
    reader = threading.Thread(target=lambda: seen.append(
        (table.row(b"g1"), table.row(b"g2"))))
    reader.start()
    reader.join()
    assert seen == [({b"m:b": b"2", b"f:n": encode_counter(2), b"f:m": encode_counter(5)},
                     {b"m:x": b"x", b"m:s": b"E"})]


def test_a_failing_call_inside_a_group_undoes_only_itself(backend, table):
    table.put(b"r", {b"m:text": b"not a counter"})
    with backend.grouped():
        table.put(b"kept", {b"m:a": b"1"})
        with pytest.raises((ValueError, BackendUnavailable)):  # as each backend reports it
            table.increment(b"r", b"m:text", 1)
        table.put(b"kept", {b"m:b": b"2"})
    assert table.row(b"kept") == {b"m:a": b"1", b"m:b": b"2"}
    assert table.row(b"r") == {b"m:text": b"not a counter"}


def test_embedded_group_is_all_or_nothing(tmp_path):
    backend = EmbeddedBackend(str(tmp_path / "e"))
    backend.create_table("CONTRACT", FAMILIES)
    table = backend.table("CONTRACT")
    with pytest.raises(RuntimeError):
        with backend.grouped():
            table.put(b"a", {b"m:a": b"1"})
            table.increment(b"n", b"m:n", 1)
            raise RuntimeError("the caller failed half way")
    assert table.row(b"a") == {} and table.row(b"n") == {}
    # A group SQLite ended on its own (as on a full disk) must not report success, nor let
    # later calls of the group apply without the lost ones.
    with pytest.raises(BackendUnavailable):
        with backend.grouped():
            table.put(b"b", {b"m:b": b"1"})
            backend._db().execute("ROLLBACK")
    for late_call in (lambda: table.put(b"c", {b"m:c": b"1"}),
                      lambda: table.mutate_rows([Mutation(b"c", deletes=[b"m:c"])]),
                      lambda: table.row(b"c")):
        with pytest.raises(BackendUnavailable, match="rolled back"):
            with backend.grouped():
                table.put(b"b", {b"m:b": b"1"})
                backend._db().execute("ROLLBACK")
                late_call()
    assert table.row(b"b") == {} and table.row(b"c") == {}
    backend.close()


def test_embedded_failed_commit_leaves_no_transaction_open(tmp_path):
    """A COMMIT that fails without SQLite rolling back (busy, I/O error; here refused by an
    authorizer) must not leave the connection in its transaction: it would keep the write
    lock and quietly swallow every later write of that thread."""
    import sqlite3
    backend = EmbeddedBackend(str(tmp_path / "e"), busy_timeout=2)
    backend.create_table("CONTRACT", FAMILIES)
    table = backend.table("CONTRACT")
    db = backend._db()
    refuse = []

    def authorizer(action, arg1, *_):
        if action == sqlite3.SQLITE_TRANSACTION and arg1 == "COMMIT" and refuse:
            refuse.pop()
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    db.set_authorizer(authorizer)
    for failing in (lambda: _grouped_put(backend, table, b"g"),   # a group's commit
                    lambda: table.mutate_rows([Mutation(b"m", puts={b"m:a": b"1"},
                                                        deletes=[b"f:x"])]),  # one call's
                    lambda: table.increment(b"n", b"m:n", 1)):     # a counter's
        refuse.append(True)
        with pytest.raises(BackendUnavailable):
            failing()
        assert not db.in_transaction
    assert table.row(b"g") == {} and table.row(b"m") == {} and table.row(b"n") == {}
    _grouped_put(backend, table, b"g")
    done = []
    writer = threading.Thread(target=lambda: done.append(table.put(b"t", {b"m:a": b"2"})))
    writer.start()
    writer.join(10)
    assert done and table.row(b"t") == {b"m:a": b"2"} and table.row(b"g") == {b"m:a": b"1"}
    backend.close()


def _grouped_put(backend, table, key):
    with backend.grouped():
        table.put(key, {b"m:a": b"1"})


def test_embedded_flush_group_lets_a_waiting_writer_in(tmp_path):
    """A caller inside a group that waits for another writer flushes first (Messages.advance);
    the waiting writer must then get through while the group goes on."""
    backend = EmbeddedBackend(str(tmp_path / "e"), busy_timeout=20)
    backend.create_table("CONTRACT", FAMILIES)
    table = backend.table("CONTRACT")
    done = threading.Event()
    with backend.grouped():
        table.put(b"mine", {b"m:a": b"1"})
        writer = threading.Thread(target=lambda: (table.put(b"theirs", {b"m:a": b"2"}),
                                                  done.set()))
        writer.start()
        assert not done.wait(0.3)  # held up by the open group
        backend.flush_group()
        assert done.wait(10)       # in at once; the rest of the group runs call by call
        table.put(b"mine", {b"m:b": b"3"})
    writer.join()
    assert table.row(b"mine") == {b"m:a": b"1", b"m:b": b"3"}
    assert table.row(b"theirs") == {b"m:a": b"2"}
    backend.close()


# -- the HBase backend only -----------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


APIS = ["thrift1", "thrift2"]
"""HBase's two Thrift APIs: the HBase backend's own tests run over both."""


@pytest.mark.parametrize("api", APIS)
def test_hbase_backend_reports_an_unreachable_server_at_start_up(api):
    from mailstore.backends import open_hbase

    port = free_port()
    with pytest.raises(BackendUnavailable, match=f"127.0.0.1:{port}"):
        open_hbase(api, host="127.0.0.1", port=port)


@pytest.fixture(params=APIS)
def gateway(tmp_path, request):
    from mailstore.testing.thrift_gateway import ThriftGateway

    with ThriftGateway(str(tmp_path / "gw"), api=request.param) as gw:
        yield gw


@pytest.fixture
def hbase(gateway):
    from mailstore.backends import open_hbase

    backend = open_hbase(gateway.api, host="127.0.0.1", port=gateway.port, table_prefix="x",
                         pool_size=3)
    yield backend
    backend.close()


@EXTERNAL_SKIP
def test_hbase_backend_fails_cleanly_while_the_server_is_down_and_recovers(gateway, hbase):
    hbase.create_table("T", FAMILIES)
    t = hbase.table("T")
    t.put(b"r", {b"m:a": b"1"})
    gateway.stop()
    calls = [lambda: t.row(b"r"), lambda: t.put(b"r", {b"m:a": b"2"}), hbase.tables,
             lambda: list(t.scan(prefix=b"r")), lambda: t.increment(b"r", b"m:n"),
             lambda: t.check_and_put(b"r", b"m:a", None, b"m:a", b"3"), lambda: t.delete(b"r")]
    for call in calls:
        with pytest.raises(BackendUnavailable, match="unreachable"):
            call()
    gateway.start()     # same port: the pooled connections must be replaced, not reused broken
    run_threads(3, lambda: [t.row(b"r") for _ in range(5)])
    assert t.row(b"r") == {b"m:a": b"1"}


@EXTERNAL_SKIP
def test_hbase_backend_reconnects_when_the_server_dropped_idle_connections(gateway, hbase):
    hbase.create_table("T", FAMILIES)
    t = hbase.table("T")
    run_threads(3, lambda: t.put(b"r", {b"m:a": b"1"}))
    gateway.stop()
    gateway.start()     # every pooled connection is now closed by the server
    run_threads(3, lambda: t.put(b"r", {b"m:a": b"2"}))
    assert t.row(b"r") == {b"m:a": b"2"}


@pytest.mark.parametrize("api", APIS)
def test_hbase_concurrently_runs_the_calls_at_the_same_time(hbase_store, api):
    """Over HBase the calls overlap, each on a pooled connection of its own: three calls
    that each wait for the other two before their put all get through."""
    backend = hbase_store.backend(api)
    try:
        backend.create_table("CONTRACT", FAMILIES)
        t = backend.table("CONTRACT")
        meet = threading.Barrier(3, timeout=10)

        def put(key):
            return lambda: (meet.wait(), t.put(key, {b"m:x": key}))[1]
        backend.concurrently(put(b"a"), put(b"b"), put(b"c"))
        assert [k for k, _ in t.rows([b"a", b"b", b"c"])] == [b"a", b"b", b"c"]
    finally:
        backend.close()


@pytest.mark.parametrize("api", APIS)
def test_hbase_concurrently_inside_concurrently_does_not_wait_for_ever(hbase_store, api):
    """A call that overlaps calls of its own (an increment_many) from a worker thread runs
    them one by one there: with a single worker, waiting for another would never end."""
    backend = hbase_store.backend(api, pool_size=2)
    try:
        backend.create_table("CONTRACT", FAMILIES)
        t = backend.table("CONTRACT")

        def nested():
            return t.increment_many(b"n", {b"m:a": 1, b"m:b": 2, b"m:c": 3},
                                    returning=[b"m:a"])
        done = []
        runner = threading.Thread(target=lambda: done.append(
            backend.concurrently(nested, nested, lambda: t.row(b"n"))))
        runner.start()
        runner.join(timeout=30)
        assert done, "concurrently() inside concurrently() never returned"
        assert {decode_counter(v) for k, v in t.row(b"n").items()} == {2, 4, 6}
    finally:
        backend.close()


@pytest.mark.parametrize("api", APIS)
def test_hbase_concurrently_with_one_pooled_connection_runs_in_the_callers_thread(
        hbase_store, api):
    """With ``pool_size = 1`` there is no connection to overlap on: the calls run one by
    one in the caller's thread instead of queueing for the only connection (where, with a
    short ``timeout_ms``, they would fail as unavailable)."""
    backend = hbase_store.backend(api, pool_size=1)
    try:
        me = threading.get_ident()
        assert backend.concurrently(threading.get_ident, threading.get_ident) == [me, me]
    finally:
        backend.close()


def test_hbase_table_prefixes_keep_stores_apart(hbase_store):
    one, two = hbase_store, hbase_store.another()
    hbase, other = one.backend(pool_size=1), two.backend(pool_size=1)
    try:
        hbase.create_table("T", FAMILIES)
        assert "T" not in other.tables()
        assert other.create_table("T", FAMILIES) is True
        other.table("T").put(b"r", {b"m:a": b"y"})
        assert hbase.table("T").row(b"r") == {}
        assert other.table("T").row(b"r") == {b"m:a": b"y"}
        conn = hbase_store.target.connection()
        try:
            names = conn.tables()
        finally:
            conn.close()
        assert f"{one.prefix}_T".encode() in names and f"{two.prefix}_T".encode() in names
    finally:
        hbase.close()
        other.close()


@pytest.mark.parametrize("api", APIS)
def test_hbase_backend_over_framed_transport_and_compact_protocol(tmp_path, api):
    from mailstore.backends import open_hbase
    from mailstore.testing.thrift_gateway import ThriftGateway

    with ThriftGateway(str(tmp_path / "gw"), transport="framed", protocol="compact",
                       api=api) as gw:
        hb = open_hbase(api, host="127.0.0.1", port=gw.port, transport="framed",
                        protocol="compact", table_prefix="fc")
        try:
            assert hb.create_table("T", FAMILIES) is True
            t = hb.table("T")
            for key in KEYS:
                t.put(key, {b"m:k": key, b"f:x": b""})
            assert keys(t.scan(start=b"a", stop=b"b", reverse=True, batch_size=2)) == \
                in_range(b"a", b"b", True)
            assert t.rows([b"b", b"a"], [b"f"]) == [(b"b", {b"f:x": b""}), (b"a", {b"f:x": b""})]
            t.mutate_rows([Mutation(b"a", delete_row=True, puts={b"f:y": b"1"})])
            assert t.row(b"a") == {b"f:y": b"1"}
            assert t.increment(b"n", b"m:c", -3) == -3
            t.increment_many(b"n", {b"m:c": 5, b"m:d": 1})
            assert t.check_and_put(b"n", b"m:c", encode_counter(2), b"m:e", b"ok") is True
            assert t.row(b"n", [b"m:e"]) == {b"m:e": b"ok"}
            hb.delete_table("T")
            assert hb.tables() == []
        finally:
            hb.close()


# -- the gateway is as awkward as HBase (so the HBase runs above prove something) ------------

def test_gateway_reads_hbase_columns_and_mutations_as_hbase_does(hbase_store):
    """What the in-process gateway claims HBase does, asked of the session's Thrift server: the
    in-process one, or a real HBase's with ``HBASE_THRIFT_HOST`` (where this checks the
    claims themselves)."""
    conn = hbase_store.target.connection()
    name = f"{hbase_store.prefix}_G".encode()
    try:
        conn.create_table(name, {"m": {}, "f": {}})
        t = conn.table(name)
        t.put(b"r", {b"m:a": b"1", b"m:": b"empty qualifier"})
        assert t.row(b"r", [b"m:"]) == {b"m:": b"empty qualifier"}     # not the family
        assert t.row(b"r", [b"m", b"m:a"]) == {b"m:a": b"1"}          # addColumn narrows
        # mutateRows: every put first, every delete after; the put is lost.
        with t.batch() as b:
            b.delete(b"r", [b"m"])
            b.put(b"r", {b"m:a": b"2"})
        assert t.row(b"r") == {}
        # mutateRow: the delete's marker hides the put of the same millisecond.
        from Hbase_thrift import Mutation as TMutation

        conn.client.mutateRow(name, b"r", [TMutation(isDelete=True, column=b"m"),
                                           TMutation(isDelete=False, column=b"m:a", value=b"3")],
                              {})
        assert t.row(b"r") == {}
        # Reversed scans start at startRow, inclusive.
        for key in (b"a", b"b", b"c"):
            t.put(key, {b"f:x": key})
        assert [k for k, _ in t.scan(row_start=b"b", row_stop=b"a", reverse=True)] == [b"b"]
    finally:
        conn.close()


def test_gateway_serves_a_store_filled_directly(tmp_path):
    from mailstore.testing.thrift_gateway import ThriftGateway

    store = EmbeddedBackend(str(tmp_path / "s"))
    store.create_table("PRE", {"m": {"max_versions": 1}})
    store.table("PRE").put(b"r", {b"m:a": b"1"})
    try:
        with ThriftGateway(store) as gw:
            from mailstore.backends.hbase import HBaseBackend

            hb = HBaseBackend(host="127.0.0.1", port=gw.port)
            try:
                assert hb.tables() == ["PRE"]
                assert hb.table("PRE").row(b"r") == {b"m:a": b"1"}
            finally:
                hb.close()
    finally:
        store.close()


def test_retire_deletes_rows_and_cells_as_mutate_rows_does(backend, table, monkeypatch):
    """``retire`` (deletes of cells never written again) removes what it names, refuses
    puts, and over HBase returns without waiting out ``delete_settle``: the wait that
    ``delete`` makes so a put in the same millisecond is not hidden (2 ms of every STORE,
    COPY, MOVE and EXPUNGE before, issue 16).  The waits are counted, not timed."""
    table.put(b"r1", {b"m:a": b"1", b"m:b": b"2"})
    table.put(b"r2", {b"m:a": b"1"})
    with pytest.raises(ValueError):
        table.retire([Mutation(b"r1", puts={b"m:c": b"3"})])
    settles: list[int] = []
    if backend.name == "hbase":
        monkeypatch.setattr(backend, "_settle", lambda: settles.append(1))
    table.retire([Mutation(b"r1", deletes=[b"m:a"]), Mutation(b"r2", delete_row=True)])
    assert settles == []
    assert table.row(b"r1") == {b"m:b": b"2"} and table.row(b"r2") == {}
    if backend.name == "hbase":
        table.delete(b"r1", [b"m:b"])   # the ordinary delete still settles
        assert settles == [1]
