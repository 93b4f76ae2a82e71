"""The HBase backend over HBase's Thrift2 gateway (``hbase thrift2``): the same contract and
the same data as :mod:`.hbase` (Thrift1), in fewer round trips (docs/decisions/0029).

Selected by ``[hbase] api = thrift2``.  The IDL is ``hbase2.thrift`` beside this module, a
wire-compatible subset of HBase's own.  What Thrift2 changes for the contract:

* ``increment_many``: one ``increment`` carries every counter of the row, applied atomically
  under HBase's row lock, and returns their new values -- Thrift1 needed one
  ``atomicIncrement`` per value wanted.  The counters whose values are wanted go in one call
  and the others in a second, so that a call that raised left nothing of the second applied
  (the contract's rule for a UID that could not be taken).
* ``put_then_check_and_put``: one ``checkAndMutate`` (the row's cells and its commit cell, if
  the commit cell is absent): atomic, and nothing is put when the check fails.
* Scans: each page is one ``getScannerResults`` (open, read, close on the server) instead of
  Thrift1's three calls.
* ``mutate_rows``: Thrift2 has no multi-row mutate.  Rows are sent in order, consecutive rows
  that only put in one ``putMultiple``, consecutive rows that only delete in one
  ``deleteMultiple``, a row that does both in its own ``mutateRow`` (atomic for the row).
* ``increment_rows``: Thrift2's ``increment`` names one row, so each row is one call, in the
  order given.  A client killed in between has applied a prefix of the rows -- the cut that
  a Thrift1 gateway dying inside ``incrementRows`` can make, which callers already order for
  (decision 0004: counts that add before their marker).  Appends therefore count with their
  UID instead (``counts_at_allocation``): the same exposure in two calls fewer.

Columns travel as (family, qualifier) pairs, so Thrift1's ``parseColumn`` quirks are gone; the
delete-marker habits remain (HBase stamps a delete with the server's millisecond clock and it
hides puts of the same millisecond), so mutations are folded and rewritten as in Thrift1
(:class:`~.hbase._RowChange`) and calls that write delete markers settle ``delete_settle``.

Errors: the IDL's ``TIOError``/``TIllegalArgument`` (the server answered: the connection stays
pooled), transport and socket errors (the connection is closed and reopened on next use) all
become :class:`~mailstore.errors.BackendUnavailable`.
"""

from __future__ import annotations

import os
import queue
import re
import select
import socket
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, TypeVar

import thriftpy2
from thriftpy2.protocol import TBinaryProtocolFactory, TCompactProtocolFactory
from thriftpy2.thrift import TApplicationException, TClient, TException
from thriftpy2.transport import (
    TBufferedTransportFactory,
    TFramedTransportFactory,
    TSocket,
    TTransportException,
)

from ..errors import BackendUnavailable
from .base import Columns, Mutation, Row, Table, decode_counter
from .hbase import HBaseBackend, HBaseTable, _CountingClient, _message, _RowChange, _split

T2 = thriftpy2.load(os.path.join(os.path.dirname(__file__), "hbase2.thrift"),
                    module_name="hbase2_thrift")

T = TypeVar("T")

_TRANSPORTS = {"buffered": TBufferedTransportFactory, "framed": TFramedTransportFactory}
_PROTOCOLS = {"binary": TBinaryProtocolFactory, "compact": TCompactProtocolFactory}
_SERVER_ERRORS = (T2.TIOError, T2.TIllegalArgument, TApplicationException)
_COMPRESSION = {"none": T2.TCompressionAlgorithm.NONE, "gz": T2.TCompressionAlgorithm.GZ,
                "snappy": T2.TCompressionAlgorithm.SNAPPY, "lzo": T2.TCompressionAlgorithm.LZO,
                "lz4": T2.TCompressionAlgorithm.LZ4, "zstd": T2.TCompressionAlgorithm.ZSTD,
                "bzip2": T2.TCompressionAlgorithm.BZIP2}
_BLOOM = {"NONE": T2.TBloomFilterType.NONE, "ROW": T2.TBloomFilterType.ROW,
          "ROWCOL": T2.TBloomFilterType.ROWCOL}
_FAMILY_OPTIONS = frozenset({
    "max_versions", "compression", "in_memory", "bloom_filter_type", "bloom_filter_vector_size",
    "bloom_filter_nb_hashes", "block_cache_enabled", "time_to_live"})


class _ServerError(Exception):
    """The server answered with an error: the connection is healthy and stays pooled."""


def _tcolumns(columns: Columns) -> list | None:
    """A contract column selection as Thrift2 ``TColumn``s, narrowed as HBase's ``Get`` would
    read it (a family selected whole makes its single cells redundant)."""
    if columns is None:
        return None
    families: dict[bytes, None] = {}
    cells: dict[tuple[bytes, bytes], None] = {}
    for column in columns:
        family, qualifier = _split(column)
        if qualifier is None:
            families[family] = None
        else:
            cells[(family, qualifier)] = None
    return ([T2.TColumn(family=f) for f in families]
            + [T2.TColumn(family=f, qualifier=q) for f, q in cells if f not in families])


def _cells(result) -> Row:
    return {cv.family + b":" + cv.qualifier: cv.value for cv in result.columnValues or ()}


def _cell(column: bytes) -> tuple[bytes, bytes]:
    family, qualifier = _split(column)
    if qualifier is None:
        raise ValueError(f"need a full column name (family:qualifier), not {column!r}")
    return family, qualifier


def _tput(row: bytes, data: Mapping[bytes, bytes]):
    return T2.TPut(row=row, columnValues=[
        T2.TColumnValue(family=f, qualifier=q, value=bytes(v))
        for (f, q), v in ((_cell(c), v) for c, v in data.items())])


class HBase2Table(HBaseTable):
    """A table over Thrift2; the paging of scans and the folding of mutations are Thrift1's."""

    # -- reads ------------------------------------------------------------------------------

    def row(self, row: bytes, columns: Columns = None) -> Row:
        if columns is not None and not columns:
            return {}   # HBase reads an empty selection as "every column"
        get = T2.TGet(row=row, columns=_tcolumns(columns))
        return _cells(self.backend._run("get", lambda c: c.get(self._tname, get)))

    def rows(self, rows: Sequence[bytes], columns: Columns = None) -> list[tuple[bytes, Row]]:
        if not rows or (columns is not None and not columns):
            return []
        cols = _tcolumns(columns)
        keys = list(rows)
        gets = [T2.TGet(row=key, columns=cols) for key in keys]
        found = self.backend._run("multi-get", lambda c: c.getMultiple(self._tname, gets))
        # getMultiple answers in the order asked; an absent row is an empty result.
        return [(key, _cells(r)) for key, r in zip(keys, found, strict=True)
                if r is not None and r.columnValues]

    def _fetch(self, start: bytes | None, stop: bytes | None, cols: list[bytes] | None,
               count: int, reverse: bool) -> list[tuple[bytes, Row]]:
        # ``cols`` comes as Thrift1 names (family, or family:qualifier); one call per page.
        tcols = None if cols is None else [
            T2.TColumn(family=f, qualifier=q) for f, q in map(_split, cols)]
        spec = T2.TScan(startRow=start, stopRow=stop, columns=tcols, caching=count,
                        reversed=True if reverse else None)
        page = self.backend._run(
            "scan", lambda c: c.getScannerResults(self._tname, spec, count))
        return [(r.row, _cells(r)) for r in page]

    # -- writes -----------------------------------------------------------------------------

    def delete(self, row: bytes, columns: Columns = None) -> None:
        if columns is None:
            self.backend._run("delete row", lambda c: c.deleteSingle(
                self._tname, T2.TDelete(row=row)))
            self.backend._settle()
        elif columns:
            self.mutate_rows([Mutation(row, deletes=columns)])

    # mutate_rows and retire are HBaseTable's: they call this with settle True and False.
    def _mutate(self, mutations: Sequence[Mutation], settle: bool) -> None:
        changes: dict[bytes, _RowChange] = {}
        for m in mutations:
            changes.setdefault(m.row, _RowChange(m.row)).add(m)
        if not changes:
            return
        # A row wiped whole needs the family list only if it also gets puts (see _ops).
        families = (self.backend._families(self.name)
                    if any(ch.delete_row and ch.puts for ch in changes.values()) else [])
        current = self._current_cells(changes, families)
        runs: list[tuple[str, list]] = []       # consecutive rows of one kind, in order
        deletes = False
        for ch in changes.values():
            put, delete = self._ops(ch, families, current.get(ch.row, {}))
            deletes = deletes or delete is not None
            if put is not None and delete is not None:
                kind, op = "mutate", T2.TRowMutations(row=ch.row, mutations=[
                    T2.TMutation(deleteSingle=delete), T2.TMutation(put=put)])
            elif put is not None:
                kind, op = "put", put
            elif delete is not None:
                kind, op = "delete", delete
            else:
                continue
            if runs and runs[-1][0] == kind and kind != "mutate":
                runs[-1][1].append(op)
            else:
                runs.append((kind, [op]))
        for kind, ops in runs:
            self._send(kind, ops)
        if deletes and settle:
            self.backend._settle()

    def _send(self, kind: str, ops: list) -> None:
        name = self._tname
        if kind == "mutate":
            self.backend._run("mutate", lambda c: c.mutateRow(name, ops[0]))
        elif kind == "put" and len(ops) == 1:
            self.backend._run("put", lambda c: c.put(name, ops[0]))
        elif kind == "put":
            self.backend._run("put", lambda c: c.putMultiple(name, ops))
        elif len(ops) == 1:
            self.backend._run("delete", lambda c: c.deleteSingle(name, ops[0]))
        else:
            self.backend._run("delete", lambda c: c.deleteMultiple(name, ops))

    @staticmethod
    def _ops(ch: _RowChange, families: Sequence[bytes], current: Row):
        """One row's change as (TPut or None, TDelete or None); no delete covers a put."""
        put = _tput(ch.row, ch.puts) if ch.puts else None
        if ch.delete_row and not ch.puts:
            return None, T2.TDelete(row=ch.row)    # no columns: the whole row
        wiped = ch.wiped_families(families)
        put_families = {_split(c)[0] for c in ch.puts}
        targets = [T2.TColumn(family=f) for f in sorted(wiped - put_families)]
        doomed = {c for c in current if c not in ch.puts}
        doomed |= {c for c in ch.columns if c not in ch.puts and _split(c)[0] not in wiped}
        targets += [T2.TColumn(family=f, qualifier=q) for f, q in map(_cell, sorted(doomed))]
        return put, (T2.TDelete(row=ch.row, columns=targets) if targets else None)

    def increment(self, row: bytes, column: bytes, delta: int = 1) -> int:
        return self.increment_many(row, {column: delta}, returning=(column,))[column]

    def increment_many(self, row: bytes, deltas: Mapping[bytes, int],
                       returning: Collection[bytes] = ()) -> dict[bytes, int]:
        wanted = set(returning)
        if not wanted <= deltas.keys():
            raise ValueError(
                f"returning names counters not incremented: {sorted(wanted - deltas.keys())}")
        for column in deltas:
            _cell(column)
        found: dict[bytes, int] = {}
        if wanted:
            # The wanted counters together, atomically (a mailbox's UID and MODSEQ change at
            # once, which keeps the contract's order), and only then the others: a call that
            # raised has left none of those applied.
            result = self._increment(row, {c: d for c, d in deltas.items() if c in wanted},
                                     True)
            cells = _cells(result)
            found = {c: decode_counter(cells[c]) for c in deltas if c in wanted}
        rest = {c: d for c, d in deltas.items() if c not in wanted}
        if rest:
            self._increment(row, rest, False)
        return found

    def _increment(self, row: bytes, deltas: Mapping[bytes, int], values: bool):
        inc = T2.TIncrement(row=row, columns=[
            T2.TColumnIncrement(family=f, qualifier=q, amount=int(d))
            for (f, q), d in ((_cell(c), d) for c, d in deltas.items())],
            returnResults=values)
        return self.backend._run("increment", lambda c: c.increment(self._tname, inc))

    def check_and_put(self, row: bytes, column: bytes, expected: bytes | None,
                      put_column: bytes, value: bytes) -> bool:
        family, qualifier = _cell(column)
        put = _tput(row, {put_column: value})
        # No value means "absent" to HBase; it also reads an empty value as absent.
        return self.backend._run("check-and-put", lambda c: c.checkAndPut(
            self._tname, row, family, qualifier, expected or None, put))

    def put_then_check_and_put(self, row: bytes, data: Mapping[bytes, bytes], column: bytes,
                               value: bytes) -> bool:
        if column in data:
            raise ValueError("the checked column cannot also be one of the data cells")
        family, qualifier = _cell(column)
        mutations = T2.TRowMutations(row=row, mutations=[
            T2.TMutation(put=_tput(row, {**data, column: value}))])
        # One atomic call: the row's cells and its commit cell, or nothing if the commit cell
        # is there already (the contract allows either; the embedded store does the same).
        return self.backend._run("check-and-mutate", lambda c: c.checkAndMutate(
            self._tname, row, family, qualifier, T2.TCompareOperator.EQUAL, None, mutations))


class _Connection:
    """One Thrift2 client and its socket; opened on first use, reopened after a failure."""

    def __init__(self, host: str, port: int, timeout_ms: int | None, transport: str,
                 protocol: str):
        self.host, self.port, self.timeout_ms = host, port, timeout_ms
        self._transport, self._protocol = _TRANSPORTS[transport](), _PROTOCOLS[protocol]()
        self.sock: TSocket | None = None
        self.trans = None
        self.client = None

    def open(self) -> None:
        # socket_timeout None waits for ever (timeout_ms 0), as happybase's pool does.
        self.sock = TSocket(self.host, self.port, socket_timeout=self.timeout_ms,
                            connect_timeout=self.timeout_ms)
        self.trans = self._transport.get_transport(self.sock)
        self.trans.open()
        self.sock.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client = TClient(T2.THBaseService, self._protocol.get_protocol(self.trans))

    def close(self) -> None:
        trans, self.trans, self.client, self.sock = self.trans, None, None, None
        if trans is not None:
            try:
                trans.close()
            except Exception:   # a broken socket may fail to close; it is dropped anyway
                pass

    def ready(self) -> None:
        """Open it, or reopen it if the server closed it while it sat idle (HBase's Thrift
        server drops idle clients): a non-blocking peek tells EOF or stray bytes from a
        healthy, silent socket."""
        if self.client is None:
            self.open()
            return
        raw = getattr(self.sock, "sock", None)
        try:
            poller = select.poll()
            poller.register(raw, select.POLLIN)
            if not poller.poll(0):
                return
        except (OSError, ValueError, TypeError):
            pass
        self.close()
        self.open()


class HBase2Backend(HBaseBackend):
    """Tables in HBase through its Thrift2 gateway (``hbase thrift2``).

    The options are :class:`~.hbase.HBaseBackend`'s (``host``, ``port``, ``transport``,
    ``protocol`` -- as ``hbase thrift2`` is started, ``-f``/``-c`` --, ``table_prefix``,
    ``pool_size``, ``timeout_ms``).  Overlapping calls (``concurrently``) and round-trip
    counting (``round_trips``, by Thrift2 method name) work as there.
    """

    counts_at_allocation = True     # see Backend; increment_rows is a call per row here

    def __init__(self, host: str = "localhost", port: int = 9090, transport: str = "buffered",
                 protocol: str = "binary", table_prefix: str | None = "", pool_size: int = 10,
                 timeout_ms: int | None = 10000, **_ignored: object):
        self._setup(host, port, transport, protocol, table_prefix, pool_size, timeout_ms)
        self._idle: queue.LifoQueue[_Connection] = queue.LifoQueue()
        for _ in range(int(pool_size)):
            self._idle.put(_Connection(host, int(port), int(timeout_ms) if timeout_ms else None,
                                       transport, protocol))
        # Connect one now, so that a wrong address is reported at start-up, not at first mail.
        first = self._idle.get()
        try:
            first.open()
        except (TException, OSError) as exc:
            raise BackendUnavailable(
                f"cannot reach the HBase Thrift2 server at {self.address}: {_message(exc)}"
            ) from exc
        finally:
            self._idle.put(first)

    # -- plumbing ---------------------------------------------------------------------------

    def _run(self, what: str, call: Callable[[Any], T]) -> T:
        """Run ``call`` with a pooled connection's client, translating every failure."""
        if self._closed:
            raise BackendUnavailable("the HBase backend has been closed")
        try:
            conn = self._idle.get(timeout=self._wait)
        except queue.Empty as exc:
            raise BackendUnavailable(
                f"no HBase connection to {self.address} free within {self._wait} s for the "
                f"{what} (pool_size connections all busy)", unsent=True) from exc
        sent = False    # whether the request may have reached the server
        try:
            try:
                conn.ready()
                sent = True
                return call(_CountingClient(conn.client, self))
            except _SERVER_ERRORS as exc:
                raise _ServerError(_message(exc)) from exc
            except BaseException:
                # Transport failure or interruption mid-call: what is left on the socket is
                # unknown, so the socket goes; the next user of this slot reconnects.
                conn.close()
                raise
        except _ServerError as exc:
            raise BackendUnavailable(
                f"HBase at {self.address} failed the {what}: {exc}") from exc.__cause__
        except (TException, OSError) as exc:
            reason = _message(exc)
            if getattr(exc, "type", None) == TTransportException.END_OF_FILE:
                reason = ("the server closed the connection (stopped, or speaking another "
                          "transport or protocol)")
            raise BackendUnavailable(
                f"HBase Thrift2 server at {self.address} unreachable during {what}: {reason}",
                unsent=not sent) from exc
        finally:
            if self._closed:
                conn.close()
            self._idle.put(conn)

    def _tname(self, name: str):
        return T2.TTableName(qualifier=self._table_bytes(name))

    def _families(self, name: str) -> list[bytes]:
        found = self._family_cache.get(name)
        if found is None:
            tname = self._tname(name)
            desc = self._run("column listing", lambda c: c.getTableDescriptor(tname))
            found = sorted(cf.name for cf in desc.columns or ())
            self._family_cache[name] = found
        return found

    def increment_rows(self, increments: Sequence[tuple[str, bytes, Mapping[bytes, int]]]
                       ) -> None:
        # One increment per row, in the caller's order (see the module docstring).
        for name, row, deltas in increments:
            if deltas:
                self.table(name).increment_many(row, deltas)

    # -- Backend ----------------------------------------------------------------------------

    def table(self, name: str) -> Table:
        return HBase2Table(self, name)

    def create_table(self, name: str, families: Mapping[str, Mapping[str, object]], *,
                     new_keys_descend: bool = False,
                     mob: tuple[str, int] | None = None) -> bool:
        # mob: as over Thrift1, a MOB family is declared by the shell DDL (decision 0028).
        columns = []
        for family, options in families.items():
            options = dict(options or {})
            unknown = set(options) - _FAMILY_OPTIONS
            if unknown:
                raise ValueError(f"unknown column family options {sorted(unknown)}")
            compression = str(options.get("compression") or "none").lower()
            bloom = str(options.get("bloom_filter_type") or "NONE")
            if compression not in _COMPRESSION or bloom not in _BLOOM:
                raise ValueError(f"unsupported compression {compression!r} or bloom filter "
                                 f"{bloom!r}")
            ttl = options.get("time_to_live")
            columns.append(T2.TColumnFamilyDescriptor(
                name=str(family).rstrip(":").encode(),
                maxVersions=int(options.get("max_versions", 1)),
                compressionType=_COMPRESSION[compression], bloomnFilterType=_BLOOM[bloom],
                inMemory=bool(options.get("in_memory", False)),
                blockCacheEnabled=bool(options.get("block_cache_enabled", True)),
                timeToLive=int(ttl) if ttl not in (None, -1) else None))
        desc = T2.TTableDescriptor(tableName=self._tname(name), columns=columns)
        self._family_cache.pop(name, None)
        try:
            self._run("table creation", lambda c: c.createTable(desc, None))
        except BackendUnavailable:
            # HBase's TableExistsException reaches us as a TIOError whose message is only the
            # table's name: ask instead (the table existed, or another creator won a race).
            if self._run("table lookup", lambda c: c.tableExists(desc.tableName)):
                return False
            raise
        return True

    def tables(self) -> list[str]:
        head = f"{self._prefix}_".encode() if self._prefix else b""
        pattern = re.escape(head.decode()) + ".*"
        names = self._run("table listing",
                          lambda c: c.getTableNamesByPattern(pattern, False))
        out = []
        for t in names:
            if t.ns not in (None, b"", b"default"):
                continue
            if t.qualifier.startswith(head):
                out.append(t.qualifier[len(head):].decode("utf-8"))
        return sorted(out)

    def delete_table(self, name: str) -> None:
        self._family_cache.pop(name, None)
        tname = self._tname(name)
        if not self._run("table lookup", lambda c: c.tableExists(tname)):
            return
        if self._run("table lookup", lambda c: c.isTableEnabled(tname)):
            self._run("table disabling", lambda c: c.disableTable(tname))
        self._run("table deletion", lambda c: c.deleteTable(tname))

    def close(self) -> None:
        """Close the idle connections; one in use closes when its call returns it."""
        self._closed = True
        if self._executor is not None:
            self._executor.shutdown(wait=False)
        while True:
            try:
                conn = self._idle.get_nowait()
            except queue.Empty:
                break
            conn.close()
