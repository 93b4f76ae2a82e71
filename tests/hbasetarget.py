"""The HBase every HBase-path test talks to, and the table prefixes that keep tests apart.

One Thrift1 server per test session: a real HBase's gateway when ``HBASE_THRIFT_HOST`` (and
optionally ``HBASE_THRIFT_PORT``, default 9090) name one, else the in-process
:class:`~mailstore.testing.thrift_gateway.ThriftGateway` over an embedded store.

Tests are isolated by table prefix, without creating and dropping tables per test: on a real
HBase each create+drop of the schema tables (ten) costs 20-30 s (disable, delete, region
assignment), which would put the suite far past any reasonable time.  Instead the session keeps
a pool of prefixes (``<base>0``, ``<base>1``, ... with ``base`` from ``HBASE_TEST_TABLE_PREFIX``,
default ``hbt``).  A prefix is created once, with every schema table, the first time more
prefixes are in use at once than before; each test leases one and gets it back *truncated*:
every row of every table deleted, tables the test created besides the schema (and the contract
tests' ``CONTRACT`` table) dropped.  Row deletes are a few scans and batched deletes, cheap on
any HBase because tests write little.  At the end of the session every table of the pool is
dropped (unless ``HBASE_TEST_KEEP_TABLES=1``, so that a rerun skips the creation; leftovers of
an earlier run are truncated like any returned prefix, so the namespace must be the tests' own).
"""

from __future__ import annotations

import os
import re
import time

import happybase

from mailstore.schema import TABLES

KEPT = frozenset({t.name for t in TABLES} | {"CONTRACT"})
"""Tables a returned prefix keeps (emptied); any other table a test made is dropped."""


class HBaseTarget:
    """The session's Thrift server and its pool of table prefixes."""

    def __init__(self, host: str, port: int, base: str, gateway=None,
                 thrift2_port: int | None = None, thrift2_gateway=None):
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", base):
            raise ValueError(f"HBASE_TEST_TABLE_PREFIX must be letters and digits: {base!r}")
        self.host, self.port, self.base, self.gateway = host, port, base, gateway
        # The Thrift2 server (`hbase thrift2`) over the same tables, for the tests that run
        # over both APIs; None when HBASE_THRIFT_HOST names a server and HBASE_THRIFT2_PORT
        # does not.
        self.thrift2_port, self.thrift2_gateway = thrift2_port, thrift2_gateway
        self._free: list[str] = []
        self._made = 0

    @classmethod
    def from_environment(cls, scratch_dir: str) -> HBaseTarget:
        base = os.environ.get("HBASE_TEST_TABLE_PREFIX", "hbt")
        host = os.environ.get("HBASE_THRIFT_HOST")
        if host:
            thrift2 = os.environ.get("HBASE_THRIFT2_PORT")
            return cls(host, int(os.environ.get("HBASE_THRIFT_PORT", "9090")), base,
                       thrift2_port=int(thrift2) if thrift2 else None)
        from mailstore.testing.thrift_gateway import ThriftGateway

        gateway = ThriftGateway(os.path.join(scratch_dir, "hbase"))
        gateway.start()
        # Thrift2 on its own port, over the same store and handler (one write lock).
        thrift2 = ThriftGateway(gateway, api="thrift2").start()
        return cls("127.0.0.1", gateway.port, base, gateway, thrift2.port, thrift2)

    def connection(self) -> happybase.Connection:
        return happybase.Connection(self.host, self.port, autoconnect=True)

    # -- the pool ----------------------------------------------------------------------------

    def lease(self) -> str:
        """An empty prefix holding every schema table, for one test."""
        if self._free:
            return self._free.pop()
        prefix = f"{self.base}{self._made}"
        self._made += 1
        self._prepare(prefix)
        return prefix

    def give_back(self, prefix: str) -> None:
        self._prepare(prefix)
        self._free.append(prefix)

    def _prepare(self, prefix: str) -> None:
        """Leave exactly the schema tables (and ``CONTRACT`` if present) under ``prefix``, with
        no rows; the schema tables are created when missing (a new prefix, or a test dropped
        one)."""
        from mailstore.backends.hbase import HBaseBackend
        from mailstore.schema import create_schema

        conn = self.connection()
        deleted = False
        found = set()
        try:
            head = f"{prefix}_".encode()
            for full in conn.tables():
                if not full.startswith(head):
                    continue
                name = full[len(head):].decode()
                if name not in KEPT:
                    conn.delete_table(full, disable=True)
                    continue
                found.add(name)
                table = conn.table(full)
                # Small scan batches: content rows carry chunks of up to 256 KiB.
                with table.batch(batch_size=500) as batch:
                    for key, _ in table.scan(batch_size=50):
                        batch.delete(key)
                        deleted = True
        finally:
            conn.close()
        if not {t.name for t in TABLES} <= found:     # a new prefix, or a test dropped one
            backend = HBaseBackend(host=self.host, port=self.port, table_prefix=prefix,
                                   pool_size=1)
            try:
                create_schema(backend)
            finally:
                backend.close()
        if deleted:
            # A put stamped in the same millisecond as a delete marker is hidden by it (HBase
            # stamps both with the region server's clock): let the clock move on.
            time.sleep(HBaseBackend.delete_settle)

    def close(self) -> None:
        try:
            if os.environ.get("HBASE_TEST_KEEP_TABLES") != "1":
                conn = self.connection()
                try:
                    ours = re.compile(re.escape(self.base).encode() + rb"[0-9]+_")
                    for full in conn.tables():
                        if ours.match(full):
                            conn.delete_table(full, disable=True)
                finally:
                    conn.close()
        finally:
            if self.thrift2_gateway is not None:
                self.thrift2_gateway.stop()
            if self.gateway is not None:
                self.gateway.stop()     # closes the embedded store it opened


class Lease:
    """One test's prefix on the session's server, and how to reach it."""

    def __init__(self, target: HBaseTarget, prefix: str):
        self.target, self.prefix = target, prefix
        self.host, self.port = target.host, target.port

    def _port(self, api: str) -> int:
        if api == "thrift1":
            return self.port
        if self.target.thrift2_port is None:
            import pytest

            pytest.skip("HBASE_THRIFT_HOST names a server but HBASE_THRIFT2_PORT no Thrift2 "
                        "one (`hbase thrift2 start`; docs/deploy.md)")
        return self.target.thrift2_port

    def args(self, api: str = "thrift1") -> list[str]:
        """The ``imapserver``/``mailadmin`` options that open this store over ``api``."""
        return ["--backend", "hbase", "--hbase-host", self.host, "--hbase-port",
                str(self._port(api)), "--hbase-api", api, "--hbase-table-prefix", self.prefix]

    def backend(self, api: str = "thrift1", **options):
        """A new HBase backend on this prefix over ``api`` (the caller closes it)."""
        from mailstore.backends import open_hbase

        return open_hbase(api, host=self.host, port=self._port(api), table_prefix=self.prefix,
                          **options)
