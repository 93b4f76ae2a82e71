"""Shared fixtures.

``backend`` runs a test once per storage backend: ``embedded`` (SQLite in ``tmp_path``) and
``hbase`` (the HBase backend over Thrift).  The ``hbase`` run talks to
:class:`mailstore.testing.thrift_gateway.ThriftGateway` over a fresh embedded store, unless
``HBASE_THRIFT_HOST`` (and optionally ``HBASE_THRIFT_PORT``) name a real HBase Thrift server; then
every test gets its own table prefix and drops its tables at teardown.
"""

from __future__ import annotations

import os
import uuid

import pytest

from mailstore.backends.embedded import EmbeddedBackend


@pytest.fixture(params=["embedded", "hbase"])
def backend(request, tmp_path):
    if request.param == "embedded":
        store = EmbeddedBackend(str(tmp_path / "embedded"))
        yield store
        store.close()
        return

    from mailstore.backends.hbase import HBaseBackend

    prefix = "t" + uuid.uuid4().hex[:12]
    host = os.environ.get("HBASE_THRIFT_HOST")
    if host:
        hbase = HBaseBackend(host=host, port=int(os.environ.get("HBASE_THRIFT_PORT", "9090")),
                             table_prefix=prefix)
        try:
            yield hbase
        finally:
            try:
                for name in hbase.tables():
                    hbase.delete_table(name)
            finally:
                hbase.close()
        return

    from mailstore.testing.thrift_gateway import ThriftGateway

    store = EmbeddedBackend(str(tmp_path / "gateway"))
    try:
        with ThriftGateway(store) as gateway:
            hbase = HBaseBackend(host="127.0.0.1", port=gateway.port, table_prefix=prefix)
            try:
                yield hbase
            finally:
                hbase.close()
    finally:
        store.close()
