"""Shared fixtures.

``backend`` runs a test once per storage backend: ``embedded`` (SQLite in ``tmp_path``) and
``hbase`` (the HBase backend over Thrift).  Every HBase-path test reaches HBase through
``hbase_store`` (tests/hbasetarget.py): one Thrift1 server for the session -- a real HBase's when
``HBASE_THRIFT_HOST`` (and optionally ``HBASE_THRIFT_PORT``) name one, else the in-process
:class:`mailstore.testing.thrift_gateway.ThriftGateway` -- and, per test, a table prefix of its
own from a pool, emptied between tests instead of created and dropped (docs/deploy.md, "The test
suite against a real HBase").
"""

from __future__ import annotations

import pytest

from mailstore.backends.embedded import EmbeddedBackend
from tests.hbasetarget import HBaseTarget, Lease


@pytest.fixture(scope="session")
def hbase_target(tmp_path_factory):
    """The session's Thrift server and prefix pool (created on first use)."""
    target = HBaseTarget.from_environment(str(tmp_path_factory.mktemp("hbase-target")))
    try:
        yield target
    finally:
        target.close()


@pytest.fixture
def hbase_store(hbase_target):
    """A leased table prefix with every schema table, empty: ``.args()`` for imapserver and
    mailadmin, ``.backend()`` for an HBaseBackend, ``.another()`` for a second store."""
    leases: list[str] = []

    def lease() -> Lease:
        leases.append(hbase_target.lease())
        return Lease(hbase_target, leases[-1])

    first = lease()
    first.another = lease
    try:
        yield first
    finally:
        for prefix in leases:
            hbase_target.give_back(prefix)


def open_store(request, tmp_path, kind: str):
    """A store of ``kind``: ``embedded``, ``hbase`` (Thrift1) or ``hbase-thrift2``; the caller
    closes it."""
    if kind == "embedded":
        return EmbeddedBackend(str(tmp_path / "embedded"))
    api = "thrift2" if kind == "hbase-thrift2" else "thrift1"
    return request.getfixturevalue("hbase_store").backend(api)


@pytest.fixture(params=["embedded", "hbase"])
def backend(request, tmp_path):
    """One store per backend.  The contract suite (tests/test_backend_contract.py) overrides
    it to add the HBase backend over Thrift2; other tests keep to these two, for time."""
    store = open_store(request, tmp_path, request.param)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(params=["embedded", "hbase"])
def connect(request, tmp_path):
    """A function giving a new connection to one store per call, as another process would
    open: its own SQLite connection, or its own happybase pool on the test's HBase prefix."""
    opened = []
    if request.param == "embedded":
        path = str(tmp_path / "store")

        def connect():
            opened.append(EmbeddedBackend(path))
            return opened[-1]
    else:
        lease = request.getfixturevalue("hbase_store")

        def connect():
            opened.append(lease.backend())
            return opened[-1]
    try:
        yield connect
    finally:
        for backend in opened:
            backend.close()


def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.slow_on_hbase``: the case is slow (``make check-long`` only) when it
    runs on the ``hbase`` backend; its embedded run stays in ``make test``.  For crash tests
    that cut an operation at every write: over the wire each cut costs a gateway round of
    its own, and the same recovery code runs on both backends."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        if (item.get_closest_marker("slow_on_hbase") and callspec is not None
                and callspec.params.get("backend") == "hbase"):
            item.add_marker(pytest.mark.slow)

