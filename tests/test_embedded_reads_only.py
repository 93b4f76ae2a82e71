"""EmbeddedBackend.reads_only(): reads go on, every write is refused and noticed.

The IMAP server runs short store calls in its reactor thread inside reads_only() and redoes in
a worker thread any call that tried to write, so that, e.g., a SELECT that must claim \\Recent
(RFC 3501 2.3.2) still claims it -- the reactor just never waits for the write lock.
"""

from __future__ import annotations

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.errors import WriteRefused


def test_writes_are_refused_and_noticed_reads_are_not(tmp_path):
    """Inside reads_only(): row/rows/scan answer; put, check_and_put, increment,
    mutate_rows, grouped writes and sync raise WriteRefused and set the probe, even when
    the caller swallows the error (RFC 3501 2.3.2's claim is then made by the rerun)."""
    backend = EmbeddedBackend(str(tmp_path), synchronous="FULL")
    backend.create_table("t", {"f": {}})
    table = backend.table("t")
    table.put(b"r", {b"f:a": b"1"})
    with backend.reads_only() as probe:
        assert table.row(b"r") == {b"f:a": b"1"}
        assert table.rows([b"r"]) == [(b"r", {b"f:a": b"1"})]
        assert list(table.scan(prefix=b"r")) == [(b"r", {b"f:a": b"1"})]
        assert not probe.refused
        for write in (lambda: table.put(b"r", {b"f:a": b"2"}),
                      lambda: table.check_and_put(b"r", b"f:a", b"1", b"f:a", b"2"),
                      lambda: table.increment(b"r", b"f:n"),
                      lambda: table.delete(b"r"),
                      backend.sync):
            probe.refused = False
            with pytest.raises(WriteRefused):
                write()
            assert probe.refused
        probe.refused = False
        try:
            with backend.grouped():
                table.put(b"r", {b"f:a": b"3"})
        except WriteRefused:
            pass  # swallowed: the probe still says so
        assert probe.refused
    assert table.row(b"r") == {b"f:a": b"1"}  # nothing was written
    table.put(b"r", {b"f:a": b"4"})  # and outside, writes work again
    assert table.row(b"r") == {b"f:a": b"4"}
    backend.close()
