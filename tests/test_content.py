"""Chunked content streams: every byte value, every size, partial reads touching only their chunks.

Apache James's reader returned byte 0xFF as end-of-stream and fetched one 1 KiB chunk per round
trip; these properties pin down that neither can happen here.
"""

from __future__ import annotations

import io
import os
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mailstore.content import ChunkReader, ChunkWriter, ContentStore, chunk_column
from mailstore.schema import CONTENT, create_schema

CHUNK = 7  # tiny chunks make every boundary case reachable with small data


class CountingTable:
    """Wraps a table to count round trips and the chunk columns each get asked for."""

    def __init__(self, table):
        self.table = table
        self.gets: list[list[bytes]] = []

    def row(self, row, columns=None):
        self.gets.append(list(columns or []))
        return self.table.row(row, columns)

    def large_cells(self, row, columns):  # how a reader gets its chunks: one round trip
        self.gets.append(list(columns))
        return self.table.large_cells(row, columns)

    def __getattr__(self, name):
        return getattr(self.table, name)


@pytest.fixture
def table(backend):
    create_schema(backend)
    return backend.table(CONTENT.name)


def write(table, data: bytes, pieces: list[int] | None = None, chunk: int = CHUNK) -> bytes:
    writer = ChunkWriter(table, chunk, refs=1, clock=lambda: 0.0)
    pos = 0
    for size in pieces or []:
        writer.write(data[pos:pos + size])
        pos += size
    writer.write(data[pos:])
    return writer.commit()


settings.register_profile("store", deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.function_scoped_fixture])


@settings(settings.get_profile("store"))
@given(data=st.binary(max_size=200), pieces=st.lists(st.integers(0, 20), max_size=8))
def test_round_trip_any_bytes_any_split(table, data, pieces):
    content_id = write(table, data, pieces)
    reader = ChunkReader(table, content_id, len(data), CHUNK)
    assert reader.read() == data
    assert reader.read() == b""


@settings(settings.get_profile("store"))
@given(data=st.binary(min_size=1, max_size=120), offset=st.integers(0, 130),
       length=st.integers(0, 60))
def test_partial_reads_fetch_only_overlapping_chunks(table, data, offset, length):
    content_id = write(table, data)
    counting = CountingTable(table)
    reader = ChunkReader(counting, content_id, len(data), CHUNK, read_ahead=1)
    reader.seek(offset)
    assert reader.read(length) == data[offset:offset + length]
    asked = [c for get in counting.gets for c in get]
    if offset < len(data) and length:
        last = min(len(data), offset + length) - 1
        assert asked == [chunk_column(i) for i in range(offset // CHUNK + 1, last // CHUNK + 2)]
        assert len(counting.gets) == 1  # one round trip, however many chunks
    else:
        assert asked == []


def test_every_byte_value_including_ff_survives(table):
    data = bytes(range(256)) * 3 + b"\xff" * 20
    content_id = write(table, data)
    assert ChunkReader(table, content_id, len(data), CHUNK).read() == data


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK, 5 * CHUNK])
def test_sizes_around_chunk_boundaries(table, size):
    data = os.urandom(size)
    content_id = write(table, data)
    cells = table.row(content_id, [b"c"])
    assert len(cells) == (size + CHUNK - 1) // CHUNK
    assert all(len(v) <= CHUNK for v in cells.values())
    reader = ChunkReader(table, content_id, size, CHUNK)
    assert reader.read() == data
    reader.seek(0)
    assert b"".join(iter(lambda: reader.read(3), b"")) == data


def test_writer_puts_chunks_as_the_buffer_fills(table):
    writer = ChunkWriter(table, CHUNK, refs=1, clock=lambda: 0.0)
    writer.write(b"a" * (CHUNK * 3 + 2))
    # Three full chunks are out before commit; the last full one waits only if nothing follows.
    assert len(table.row(writer.content_id, [b"c"])) == 3
    writer.commit()
    assert len(table.row(writer.content_id, [b"c"])) == 4


def test_reader_is_a_seekable_file(table):
    data = b"0123456789" * 10
    content_id = write(table, data)
    reader = io.BufferedReader(ChunkReader(table, content_id, len(data), CHUNK))
    reader.seek(-5, io.SEEK_END)
    assert reader.read() == data[-5:]
    reader.seek(42)
    assert reader.read(10) == data[42:52]


def test_sequential_reads_fetch_ahead_in_one_round_trip(table):
    data = os.urandom(CHUNK * 8)
    content_id = write(table, data)
    counting = CountingTable(table)
    reader = ChunkReader(counting, content_id, len(data), CHUNK, read_ahead=4)
    out = b"".join(iter(lambda: reader.read(CHUNK), b""))
    assert out == data
    assert len(counting.gets) <= 3  # first chunk, then 4 at a time (read_ahead=4 here)


def test_abort_removes_everything_written(table):
    writer = ChunkWriter(table, CHUNK, refs=1, clock=lambda: 0.0)
    writer.write(b"x" * (CHUNK * 4))
    writer.abort()
    assert table.row(writer.content_id) == {}


def test_reference_counting_frees_at_zero_and_refuses_resurrection(backend):
    create_schema(backend)
    store = ContentStore(backend.table(CONTENT.name), chunk_size=64 * 1024)
    writer = store.writer(refs=2)
    writer.write(b"hello")
    content_id = writer.commit()
    assert store.refs(content_id) == 2
    assert store.incref(content_id) and store.refs(content_id) == 3
    assert store.decref(content_id, 3) == 0
    assert store.table.row(content_id) == {}
    # A copy racing with the last expunge must not bring freed content back.
    assert store.incref(content_id) is False
    assert store.table.row(content_id) == {}


def test_chunk_size_is_bounded():
    with pytest.raises(ValueError):
        ContentStore(None, chunk_size=1024)
    with pytest.raises(ValueError):
        ContentStore(None, chunk_size=2 * 1024 * 1024)


@pytest.mark.parametrize("size", [0, 1, CHUNK - 1, CHUNK])
def test_storing_a_chunk_at_once_leaves_the_row_a_writer_leaves(table, size):
    """ContentStore.store (a message that fits in one chunk, in one put) and ChunkWriter
    write the same cells, so readers, reference counts and fsck see no difference."""
    data = bytes(range(256)) * (size // 256) + bytes(range(size % 256))
    store = ContentStore(table, clock=lambda: 0.0)
    store.chunk_size = CHUNK  # below the configurable minimum, to keep the test small
    stored = store.store(data, refs=3)
    written = ChunkWriter(table, CHUNK, refs=3, clock=lambda: 0.0)
    written.write(data)
    assert table.row(stored) == table.row(written.commit())
    assert ChunkReader(table, stored, size, CHUNK).read() == data
    assert store.refs(stored) == 3 and store.info(stored)["size"] == size
    with pytest.raises(ValueError):
        store.store(data + b"x" * (CHUNK + 1 - size))


def test_content_ids_stay_unique_whoever_seeds_the_random_module():
    """UUIDv7 ids draw on a generator of their own: code elsewhere seeding the random module
    to a constant (in several processes, or after a fork) must not make them repeat."""
    import random

    from mailstore import keys
    random.seed(7)
    first = keys.new_ordered_id()
    random.seed(7)
    assert keys.new_ordered_id()[6:] != first[6:]
    # A forked child starts from the parent's generator state unless it is reseeded.
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.write(write, keys.new_ordered_id())
        os._exit(0)
    os.waitpid(child, 0)
    assert os.read(read, 16)[6:] != keys.new_ordered_id()[6:]


def test_ordered_ids_strictly_increase_within_a_millisecond(monkeypatch):
    """RFC 9562 6.2: ids made one after the other sort in that order even when the clock
    has not moved (or stepped back) -- the outbox lists entries by them, and two enqueues in
    one millisecond once came back in random order.  Version and variant bits stay valid."""
    import uuid

    from mailstore import keys
    frozen = time.time_ns()
    monkeypatch.setattr(keys, "_LAST", [0, 0])
    monkeypatch.setattr(keys.time, "time_ns", lambda: frozen)
    ids = [keys.new_ordered_id() for _ in range(2000)]
    monkeypatch.setattr(keys.time, "time_ns", lambda: frozen - 5_000_000_000)   # clock steps back
    ids += [keys.new_ordered_id() for _ in range(10)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    for raw in ids:
        u = uuid.UUID(bytes=raw)
        assert u.version == 7 and u.variant == uuid.RFC_4122
        assert int.from_bytes(raw[:6], "big") == frozen // 1_000_000


def test_content_ids_ascend_where_the_backend_prefers_it(backend, monkeypatch):
    """The embedded store's B-tree takes ascending keys at its right edge, cheaply; over HBase
    ids stay random (UUID4), which spreads writes over regions."""
    import uuid

    from mailstore import keys
    create_schema(backend)
    table = backend.table(CONTENT.name)
    clock = iter(range(10**15, 10**15 + 10 * 10**6, 10**6))   # one millisecond apart
    monkeypatch.setattr(keys.time, "time_ns", lambda: next(clock))
    monkeypatch.setattr(keys, "_LAST", [0, 0])      # forget this process's later ids
    ids = [write(table, b"x%d" % i) for i in range(8)]
    versions = {uuid.UUID(bytes=content_id).version for content_id in ids}
    assert len(set(ids)) == 8
    if backend.name == "embedded":
        assert table.ordered_keys and versions == {7} and ids == sorted(ids)
        assert {uuid.UUID(bytes=content_id).variant for content_id in ids} == {uuid.RFC_4122}
        assert all(content_id[:6] == (10**9 + i).to_bytes(6, "big")
                   for i, content_id in enumerate(ids))
    else:
        assert not table.ordered_keys and versions == {4}
    assert [ChunkReader(table, content_id, 2, CHUNK).read() for content_id in ids] == \
        [b"x%d" % i for i in range(8)]
