"""A Thrift1 HBase gateway over the embedded store, for tests and benchmarks.

It serves happybase's own ``Hbase.thrift`` on a local port, so that happybase, and the HBase
backend on top of it, talk to it exactly as they talk to ``hbase thrift start``.  The data lives
in an :class:`~mailstore.backends.embedded.EmbeddedBackend`; this module only reproduces what the
real gateway (``ThriftHBaseServiceHandler``, HBase 2.x) does with each call, including the habits
that a client must cope with:

* Column names are parsed like ``CellUtil.parseColumn``: ``b"f"`` is the whole family, ``b"f:"``
  is the cell with the empty qualifier (HBASE-9549), ``b"f:q"`` a cell.  Selections are built like
  HBase's ``Get``/``Scan`` family map, so ``[b"f", b"f:q"]`` selects only ``f:q``.
* ``mutateRow`` applies its delete and then its put; ``mutateRows`` applies every put of the batch
  and then every delete.  Delete markers hide puts made in the same millisecond (HBase stamps both
  with the server's clock): the gateway remembers the current millisecond's markers and drops the
  cells they cover, and within one ``mutateRow`` call the put is always taken to share the
  delete's millisecond, the worst case, so that a client relying on luck fails every time.
* ``checkAndPut`` puts the one cell it is given; an expected value that is absent or empty
  matches a missing cell or an empty one.  ``incrementRows`` applies its increments one by one.
* Reversed scans start at ``startRow`` inclusive and stop above ``stopRow`` exclusive.  Filter
  strings are refused rather than ignored.  Scanners are server state, closed by
  ``scannerClose``; unknown ids raise ``IllegalArgument`` as in HBase.
* Tables must be disabled before ``deleteTable``; a disabled table refuses reads and writes.
  Names must be SQL-safe (``[A-Za-z0-9_]``), narrower than HBase's, because the embedded store
  makes each table an SQL table.  Cells carry timestamp 0: the embedded store keeps none.

Store errors come back as the IDL's ``IOError``.  The gateway must be the only writer of its store
while it runs (check-and-put is made atomic by a lock held for every write).
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from itertools import islice

import happybase
import thriftpy2
from thriftpy2.protocol import TBinaryProtocolFactory, TCompactProtocolFactory
from thriftpy2.thrift import TApplicationException, TException, TProcessor
from thriftpy2.transport import TBufferedTransportFactory, TFramedTransportFactory, TSocket

from ..backends.base import Mutation, prefix_stop
from ..backends.embedded import EmbeddedBackend, EmbeddedTable

H = thriftpy2.load(os.path.join(os.path.dirname(happybase.__file__), "Hbase.thrift"),
                   module_name="Hbase_thrift")

log = logging.getLogger(__name__)

_TRANSPORTS = {"buffered": TBufferedTransportFactory, "framed": TFramedTransportFactory}
_PROTOCOLS = {"binary": TBinaryProtocolFactory, "compact": TCompactProtocolFactory}
_TABLE_NAME = re.compile(rb"[A-Za-z0-9_]+\Z")
# What HBase's ThriftUtilities.colDescFromThrift accepts: Compression.Algorithm names (looked up
# lower-cased) and BloomType.valueOf names (exact).  The values are stored, not acted on.
_COMPRESSIONS = frozenset({"none", "gz", "snappy", "lzo", "lz4", "zstd", "bzip2", "lzma"})
_BLOOM_TYPES = frozenset({"NONE", "ROW", "ROWCOL", "ROWPREFIX_FIXED_LENGTH",
                          "ROWPREFIX_DELIMITED"})
_CALLS = itertools.count()


@functools.cache
def _increment_trace() -> Callable[[str], None] | None:
    """A writer of lines to the file named by ``THRIFT_GATEWAY_TRACE_INCREMENTS``, if set: each
    cell of an ``incrementRows`` before it is applied (``cell``), after (``done``), and the
    call's end (``end``).  A call with no ``end`` was cut by the gateway's death, and its
    ``done`` lines say which of its cells stood (bench/gateway_fault_loop.py ``--trace``)."""
    path = os.environ.get("THRIFT_GATEWAY_TRACE_INCREMENTS")
    if not path:
        return None
    out = open(path, "a", buffering=1)  # noqa: SIM115 - open for the process's life
    lock = threading.Lock()

    def write(line: str) -> None:
        with lock:
            out.write(line + "\n")
    return write


_PASS_THROUGH = (H.IOError, H.IllegalArgument, H.AlreadyExists, TApplicationException)


def _io_error(text: str) -> H.IOError:
    return H.IOError(message=text)


def _text(value: object) -> object:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _parse(column: bytes) -> tuple[bytes, bytes | None]:
    """``CellUtil.parseColumn``: ``(family, None)`` for a family, else ``(family, qualifier)``."""
    family, sep, qualifier = (column or b"").partition(b":")
    return family, (qualifier if sep else None)


def _cell_order(item: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    family, _, qualifier = item[0].partition(b":")
    return family, qualifier


class _Selection:
    """The family map of an HBase ``Get``/``Scan``, built in call order."""

    def __init__(self, columns: Sequence[bytes] | None):
        self.families: dict[bytes, set[bytes] | None] | None = None
        if columns:     # None or an empty list both mean every column
            families: dict[bytes, set[bytes] | None] = {}
            for column in columns:
                family, qualifier = _parse(column)
                if qualifier is None:
                    families[family] = None         # addFamily replaces any column set
                else:
                    found = families.get(family)
                    if found is None:               # addColumn after addFamily starts afresh
                        found = families[family] = set()
                    found.add(qualifier)
            self.families = families

    def embedded(self) -> list[bytes] | None:
        """A selection for the embedded store that covers this one (then :meth:`keep` trims)."""
        if self.families is None:
            return None
        out = []
        for family, qualifiers in self.families.items():
            if qualifiers is None or b"" in qualifiers:     # the store reads b"f:" as the family
                out.append(family + b":")
            else:
                out += [family + b":" + q for q in qualifiers]
        return out

    def keep(self, cells: dict[bytes, bytes]) -> dict[bytes, bytes]:
        if self.families is None:
            return cells
        out = {}
        for column, value in cells.items():
            family, _, qualifier = column.partition(b":")
            if family in self.families:
                qualifiers = self.families[family]
                if qualifiers is None or qualifier in qualifiers:
                    out[column] = value
        return out


def _api(method: Callable) -> Callable:
    """Answer every failure with the IDL's exceptions, as the Java gateway does."""

    @functools.wraps(method)
    def call(self: _Handler, *args: object) -> object:
        try:
            return method(self, *args)
        except _PASS_THROUGH:
            raise
        except Exception as exc:    # the store failed: HBase reports IOExceptions as IOError
            log.debug("thrift gateway: %s failed", method.__name__, exc_info=True)
            raise _io_error(f"{type(exc).__name__}: {exc}") from None

    return call


class _Scanner:
    def __init__(self, results: Iterator[H.TRowResult]):
        self.lock = threading.Lock()
        self.results = results

    def take(self, count: int) -> list[H.TRowResult]:
        with self.lock:
            return list(islice(self.results, max(count, 0)))

    def close(self) -> None:
        with self.lock:
            self.results.close()


class _Handler:
    """The ``Hbase`` service: one method per Thrift call, arguments in IDL order."""

    def __init__(self, store: EmbeddedBackend):
        self.store = store
        self._write = threading.RLock()     # every write; makes checkAndPut atomic
        self._meta = threading.Lock()
        self._enabled: dict[bytes, bool] = {}
        self._families: dict[bytes, set[bytes]] = {}
        self._scanners: dict[int, _Scanner] = {}
        self._next_scanner = 0
        self._markers: set[tuple] = set()   # delete markers of the current millisecond
        self._marker_ms = -1

    def __getattr__(self, api: str) -> Callable:
        if api in H.Hbase.thrift_services:
            def unknown(*_args: object) -> None:
                raise TApplicationException(TApplicationException.UNKNOWN_METHOD,
                                            f"the test gateway does not implement {api}")
            return unknown
        raise AttributeError(api)

    def close(self) -> None:
        with self._meta:
            scanners, self._scanners = list(self._scanners.values()), {}
        for scanner in scanners:
            scanner.close()

    # -- tables -----------------------------------------------------------------------------

    def _state(self, name: bytes) -> bool | None:
        """True/False for an enabled/disabled table, None for a missing one."""
        with self._meta:
            if name not in self._enabled:   # created on the store directly: enabled
                for known in self.store.tables():
                    self._enabled.setdefault(known.encode(), True)
            return self._enabled.get(name)

    def _table(self, name: bytes, *, enabled: bool = True) -> EmbeddedTable:
        state = self._state(name)
        if state is None:
            raise _io_error(f"org.apache.hadoop.hbase.TableNotFoundException: {_text(name)}")
        if enabled and not state:
            raise _io_error(f"org.apache.hadoop.hbase.TableNotEnabledException: {_text(name)}")
        return self.store.table(name.decode())

    def _check_family(self, name: bytes, family: bytes) -> None:
        families = self._families.get(name)
        if families is None:
            families = {f.encode() for f in self.store.families(name.decode())}
            self._families[name] = families
        if family not in families:
            raise _io_error("org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException: "
                            f"column family {_text(family)} does not exist in {_text(name)}")

    def _check_selection(self, name: bytes, selection: _Selection) -> None:
        for family in selection.families or ():
            self._check_family(name, family)

    @_api
    def getTableNames(self) -> list[bytes]:
        return sorted(name.encode() for name in self.store.tables())

    @_api
    def createTable(self, tableName: bytes, columnFamilies: list) -> None:
        if not _TABLE_NAME.match(tableName or b""):
            raise H.IllegalArgument(message=f"the test gateway needs table names of "
                                            f"[A-Za-z0-9_], not {tableName!r}")
        if not columnFamilies:
            raise H.IllegalArgument(message="Table should have at least one column family")
        families = {}
        for cd in columnFamilies:
            if not cd.name:
                raise H.IllegalArgument(message="column name is empty")
            if str(_text(cd.compression)).lower() not in _COMPRESSIONS:
                raise H.IllegalArgument(message=f"unknown compression {cd.compression!r}")
            if _text(cd.bloomFilterType) not in _BLOOM_TYPES:
                raise H.IllegalArgument(message="No enum constant org.apache.hadoop.hbase."
                                                f"regionserver.BloomType.{cd.bloomFilterType}")
            families[cd.name.partition(b":")[0].decode()] = {
                "max_versions": cd.maxVersions, "compression": _text(cd.compression),
                "in_memory": bool(cd.inMemory), "bloom_filter_type": _text(cd.bloomFilterType),
                "block_cache_enabled": bool(cd.blockCacheEnabled),
                "time_to_live": cd.timeToLive}
        with self._write:
            if self._state(tableName) is not None:
                raise H.AlreadyExists(message="table name already in use")
            self.store.create_table(tableName.decode(), families)
            with self._meta:
                self._enabled[tableName] = True
                self._families.pop(tableName, None)

    @_api
    def deleteTable(self, tableName: bytes) -> None:
        with self._write:
            if self.isTableEnabled(tableName):
                raise _io_error("org.apache.hadoop.hbase.TableNotDisabledException: "
                                f"{_text(tableName)}")
            self.store.delete_table(tableName.decode())
            with self._meta:
                self._enabled.pop(tableName, None)
                self._families.pop(tableName, None)

    def _set_enabled(self, name: bytes, enabled: bool) -> None:
        if self.isTableEnabled(name) == enabled:
            kind = "TableNotDisabledException" if enabled else "TableNotEnabledException"
            raise _io_error(f"org.apache.hadoop.hbase.{kind}: {_text(name)}")
        with self._meta:
            self._enabled[name] = enabled

    @_api
    def enableTable(self, tableName: bytes) -> None:
        self._set_enabled(tableName, True)

    @_api
    def disableTable(self, tableName: bytes) -> None:
        self._set_enabled(tableName, False)

    @_api
    def isTableEnabled(self, tableName: bytes) -> bool:
        self._table(tableName, enabled=False)   # raises for a missing table
        return bool(self._state(tableName))

    @_api
    def getColumnDescriptors(self, tableName: bytes) -> dict:
        self._table(tableName, enabled=False)
        out = {}
        for family, opts in self.store.families(tableName.decode()).items():
            name = family.encode() + b":"
            out[name] = H.ColumnDescriptor(
                name=name, maxVersions=opts.get("max_versions", 1),
                compression=opts.get("compression") or "NONE",
                inMemory=bool(opts.get("in_memory", False)),
                bloomFilterType=opts.get("bloom_filter_type") or "NONE",
                blockCacheEnabled=bool(opts.get("block_cache_enabled", True)),
                timeToLive=opts.get("time_to_live", -1))
        return out

    # -- reads ------------------------------------------------------------------------------

    @staticmethod
    def _result(key: bytes, cells: dict[bytes, bytes], sort: bool = False) -> H.TRowResult:
        ordered = sorted(cells.items(), key=_cell_order)
        if sort:
            return H.TRowResult(row=key, sortedColumns=[
                H.TColumn(columnName=c, cell=H.TCell(value=v, timestamp=0)) for c, v in ordered])
        return H.TRowResult(row=key, columns={c: H.TCell(value=v, timestamp=0)
                                              for c, v in ordered})

    def _get(self, name: bytes, rows: Sequence[bytes], columns: Sequence[bytes] | None) -> list:
        table = self._table(name)
        selection = _Selection(columns)
        self._check_selection(name, selection)
        out = []
        for key, cells in table.rows(list(rows), selection.embedded()):
            cells = selection.keep(cells)
            if cells:
                out.append(self._result(key, cells))
        return out

    @_api
    def getRowsWithColumns(self, tableName, rows, columns, attributes):
        return self._get(tableName, rows or [], columns)

    @_api
    def getRowWithColumns(self, tableName, row, columns, attributes):
        return self._get(tableName, [row], columns)

    @_api
    def getVer(self, tableName, row, column, numVersions, attributes):
        found = self._get(tableName, [row], [column])
        return list(found[0].columns.values())[:max(numVersions, 0)] if found else []

    # -- scanners ---------------------------------------------------------------------------

    def _open(self, name: bytes, start: bytes | None, stop: bytes | None,
              columns: Sequence[bytes] | None, *, reverse: bool = False, sort: bool = False,
              batch: int | None = None, caching: int | None = None) -> int:
        table = self._table(name)
        selection = _Selection(columns)
        self._check_selection(name, selection)
        if reverse:     # HBase: start is the upper bound, inclusive; stop the lower, exclusive
            low = stop + b"\x00" if stop else b""
            high = start + b"\x00" if start else None
        else:
            low, high = start or b"", stop or None
        rows = table.scan(start=low, stop=high, columns=selection.embedded(), reverse=reverse,
                          batch_size=max(caching or 100, 1))

        def results() -> Iterator[H.TRowResult]:
            try:
                for key, cells in rows:
                    cells = selection.keep(cells)
                    if not cells:
                        continue
                    if not batch or batch <= 0:
                        yield self._result(key, cells, sort)
                        continue
                    ordered = sorted(cells.items(), key=_cell_order)    # Scan.setBatch
                    for i in range(0, len(ordered), batch):
                        yield self._result(key, dict(ordered[i:i + batch]), sort)
            finally:
                rows.close()

        with self._meta:
            scanner_id = self._next_scanner
            self._next_scanner += 1
            self._scanners[scanner_id] = _Scanner(results())
        return scanner_id

    @_api
    def scannerOpenWithScan(self, tableName, scan, attributes):
        if scan.filterString:
            raise _io_error("the test gateway does not evaluate filter strings")
        return self._open(tableName, scan.startRow, scan.stopRow, scan.columns,
                          reverse=bool(scan.reversed), sort=bool(scan.sortColumns),
                          batch=scan.batchSize, caching=scan.caching)

    @_api
    def scannerOpenWithStop(self, tableName, startRow, stopRow, columns, attributes):
        return self._open(tableName, startRow, stopRow, columns)

    @_api
    def scannerOpenWithPrefix(self, tableName, startAndPrefix, columns, attributes):
        # HBase uses a WhileMatchFilter(PrefixFilter): the same rows as [prefix, next prefix).
        return self._open(tableName, startAndPrefix, prefix_stop(startAndPrefix or b""), columns)

    def _scanner(self, scanner_id: int, *, remove: bool = False) -> _Scanner:
        with self._meta:
            scanner = (self._scanners.pop if remove else self._scanners.get)(scanner_id, None)
        if scanner is None:
            raise H.IllegalArgument(message="scanner ID is invalid")
        return scanner

    @_api
    def scannerGetList(self, id, nbRows):
        return self._scanner(id).take(nbRows)

    @_api
    def scannerClose(self, id):
        self._scanner(id, remove=True).close()

    # -- writes -----------------------------------------------------------------------------

    def _tick(self) -> None:
        """Start a write: markers of an earlier millisecond can no longer hide anything."""
        now = time.time_ns() // 1_000_000
        if now != self._marker_ms:
            self._markers, self._marker_ms = set(), now

    def _hidden(self, name: bytes, row: bytes, family: bytes, qualifier: bytes) -> bool:
        return any(k in self._markers for k in ((name, row, None, None), (name, row, family, None),
                                                 (name, row, family, qualifier)))

    def _plan(self, name: bytes, mutations: Sequence, strict: bool) -> tuple[list, list]:
        """Split Thrift ``Mutation`` structs into deletes and puts, checking every family first."""
        deletes, puts = [], []
        for m in mutations or ():
            family, qualifier = _parse(m.column)
            self._check_family(name, family)
            if m.isDelete:
                deletes.append((family, qualifier))
            elif qualifier is None:
                if strict:
                    raise H.IllegalArgument(message="Invalid famAndQf provided.")
                log.warning("No column qualifier specified. Delete is the only mutation "
                            "supported over the whole column family.")
            else:
                puts.append((family, qualifier, m.value or b""))
        return deletes, puts

    def _puts(self, name: bytes, row: bytes, puts: list) -> Mutation | None:
        data = {family + b":" + qualifier: value for family, qualifier, value in puts
                if not self._hidden(name, row, family, qualifier)}
        return Mutation(row, puts=data) if data else None

    def _deletes(self, table: EmbeddedTable, name: bytes, row: bytes,
                 targets: list | None) -> Mutation:
        """Record the markers and build the store mutation; ``None`` targets the whole row."""
        if targets is None:
            self._markers.add((name, row, None, None))
            return Mutation(row, delete_row=True)
        families, columns, empty = set(), set(), set()
        for family, qualifier in targets:
            self._markers.add((name, row, family, qualifier))
            if qualifier is None:
                families.add(family)
            elif qualifier == b"":
                empty.add(family)
            else:
                columns.add(family + b":" + qualifier)
        keep = {}
        if empty - families:
            # The store names a family b"f:", so the empty-qualifier cell goes with its family
            # and the rest of that family is put back, in the same store transaction.
            current = table.row(row, [f + b":" for f in empty - families])
            keep = {c: v for c, v in current.items()
                    if c not in columns and c.partition(b":")[2] != b""}
        deletes = [f + b":" for f in families | empty] + sorted(columns)
        return Mutation(row, puts=keep, deletes=deletes)

    @_api
    def mutateRow(self, tableName, row, mutations, attributes):
        with self._write:
            table = self._table(tableName)
            deletes, puts = self._plan(tableName, mutations, strict=False)
            self._tick()
            if deletes:
                table.mutate_rows([self._deletes(table, tableName, row, deletes)])
            put = self._puts(tableName, row, puts)  # same millisecond: covered cells are hidden
            if put:
                table.mutate_rows([put])

    @_api
    def mutateRows(self, tableName, rowBatches, attributes):
        with self._write:
            table = self._table(tableName)
            plans = [(b.row, *self._plan(tableName, b.mutations, strict=True))
                     for b in rowBatches or ()]
            self._tick()
            # HBase's handler: table.put(all puts), then table.delete(all deletes).
            puts = [p for p in (self._puts(tableName, row, ps) for row, _, ps in plans) if p]
            if puts:
                table.mutate_rows(puts)
            deletes = [self._deletes(table, tableName, row, ds) for row, ds, _ in plans if ds]
            if deletes:
                table.mutate_rows(deletes)

    @_api
    def deleteAll(self, tableName, row, column, attributes):
        family, qualifier = _parse(column)
        with self._write:
            table = self._table(tableName)
            self._check_family(tableName, family)
            self._tick()
            table.mutate_rows([self._deletes(table, tableName, row, [(family, qualifier)])])

    @_api
    def deleteAllRow(self, tableName, row, attributes):
        with self._write:
            table = self._table(tableName)
            self._tick()
            table.mutate_rows([self._deletes(table, tableName, row, None)])

    def _increment(self, name: bytes, row: bytes, column: bytes, amount: int) -> int:
        family, qualifier = _parse(column)
        with self._write:
            table = self._table(name)
            self._check_family(name, family)
            try:
                return table.increment(row, family + b":" + (qualifier or b""), amount)
            except ValueError as exc:
                raise _io_error("org.apache.hadoop.hbase.DoNotRetryIOException: Field is not a "
                                f"long ({exc})") from None

    @_api
    def atomicIncrement(self, tableName, row, column, value):
        return self._increment(tableName, row, column, value)

    def _increment_struct(self, inc: H.TIncrement) -> None:
        if not inc.table or not inc.row:
            raise TApplicationException(TApplicationException.INTERNAL_ERROR,
                                        "Must supply a table and a row key; can't increment")
        if _parse(inc.column)[1] is None:   # incrementFromThrift returns null: an NPE in HBase
            raise TApplicationException(TApplicationException.INTERNAL_ERROR,
                                        "java.lang.NullPointerException")
        self._increment(inc.table, inc.row, inc.column, inc.ammount or 0)

    @_api
    def incrementRows(self, increments):
        trace = _increment_trace()
        call = f"{os.getpid()}.{next(_CALLS)}"
        for inc in increments or ():    # one by one, as HBase does: no atomicity between them
            if trace:
                trace(f"cell {call} {inc.table.decode()} {inc.row.hex()} "
                      f"{inc.column.decode(errors='replace')} {inc.ammount}")
            self._increment_struct(inc)
            if trace:
                trace(f"done {call}")
        if trace:
            trace(f"end {call}")

    @_api
    def checkAndPut(self, tableName, row, column, value, mput, attributes):
        put_family, put_qualifier = _parse(mput.column if mput else b"")
        family, qualifier = _parse(column)
        if put_qualifier is None or qualifier is None:
            raise H.IllegalArgument(message="checkAndPut needs family:qualifier columns")
        with self._write:
            table = self._table(tableName)
            self._check_family(tableName, family)
            self._check_family(tableName, put_family)
            name = family + b":" + qualifier
            current = table.row(row, [name] if qualifier else [family + b":"]).get(name)
            # HBase compares an absent or empty expected value as "no value": missing or empty.
            if not (current == value if value else not current):
                return False
            self._tick()
            put = self._puts(tableName, row, [(put_family, put_qualifier, mput.value or b"")])
            if put:     # a put hidden by a delete marker still reports success, as in HBase
                table.mutate_rows([put])
            return True


# The remaining calls are other spellings of the ones above.  Every cell is stamped 0, so the
# ``...Ts`` forms ("no newer than timestamp") see and delete the same cells as the plain ones.
_ALIASES: dict[str, Callable[..., object]] = {
    "get": lambda h, t, row, col, attrs: h.getVer(t, row, col, 1, attrs),
    "getVerTs": lambda h, t, row, col, ts, n, attrs: h.getVer(t, row, col, n, attrs),
    "getRow": lambda h, t, row, attrs: h.getRowWithColumns(t, row, None, attrs),
    "getRowTs": lambda h, t, row, ts, attrs: h.getRowWithColumns(t, row, None, attrs),
    "getRowWithColumnsTs": lambda h, t, row, cols, ts, attrs: h.getRowWithColumns(
        t, row, cols, attrs),
    "getRows": lambda h, t, rows, attrs: h.getRowsWithColumns(t, rows, None, attrs),
    "getRowsTs": lambda h, t, rows, ts, attrs: h.getRowsWithColumns(t, rows, None, attrs),
    "getRowsWithColumnsTs": lambda h, t, rows, cols, ts, attrs: h.getRowsWithColumns(
        t, rows, cols, attrs),
    "scannerOpen": lambda h, t, start, cols, attrs: h.scannerOpenWithStop(
        t, start, None, cols, attrs),
    "scannerOpenTs": lambda h, t, start, cols, ts, attrs: h.scannerOpenWithStop(
        t, start, None, cols, attrs),
    "scannerOpenWithStopTs": lambda h, t, start, stop, cols, ts, attrs: h.scannerOpenWithStop(
        t, start, stop, cols, attrs),
    "scannerGet": lambda h, scanner: h.scannerGetList(scanner, 1),
    "mutateRowTs": lambda h, t, row, muts, ts, attrs: h.mutateRow(t, row, muts, attrs),
    "mutateRowsTs": lambda h, t, batches, ts, attrs: h.mutateRows(t, batches, attrs),
    "deleteAllTs": lambda h, t, row, col, ts, attrs: h.deleteAll(t, row, col, attrs),
    "deleteAllRowTs": lambda h, t, row, ts, attrs: h.deleteAllRow(t, row, attrs),
    "increment": lambda h, inc: h.incrementRows([inc]),
    "compact": lambda h, name: None,
    "majorCompact": lambda h, name: None,
}
for _name, _call in _ALIASES.items():
    setattr(_Handler, _name, _call)


class _Late:
    """A service handler whose every call answers ``delay`` seconds late."""

    def __init__(self, handler: object, delay: float):
        self._handler, self._delay = handler, delay

    def __getattr__(self, name: str) -> object:
        method = getattr(self._handler, name)
        if not callable(method):
            return method

        def late(*args: object) -> object:
            time.sleep(self._delay)
            return method(*args)
        return late


class ThriftGateway:
    """Serve HBase's Thrift1 API for ``store`` on ``host:port`` (port 0: any free port), or
    its Thrift2 API with ``api="thrift2"`` (:mod:`.thrift2_gateway`).

    ``delay`` (seconds) makes every call answer that late, sleeping without the GIL, as a
    real gateway's network and WAL sync do (benchmarks: bench/store_bench.py --latency-ms).
    ``store`` is an :class:`EmbeddedBackend` (left open at :meth:`stop`), a directory for a
    new one (closed at :meth:`stop`), or another gateway, whose store and handler this one
    shares (a Thrift2 port beside a Thrift1 one).  ``transport`` and ``protocol`` select what
    the server speaks, as ``hbase thrift start`` does with ``-f`` (framed) and ``-c``
    (compact).  After
    :meth:`start`, :attr:`port` is the bound port; a gateway stopped and started again binds the
    same port, which lets tests take the server away from a live client and bring it back.
    """

    def __init__(self, store: EmbeddedBackend | str | os.PathLike | ThriftGateway,
                 host: str = "127.0.0.1", port: int = 0, transport: str = "buffered",
                 protocol: str = "binary", api: str = "thrift1", delay: float = 0.0):
        if transport not in _TRANSPORTS or protocol not in _PROTOCOLS:
            raise ValueError(f"unknown transport {transport!r} or protocol {protocol!r}")
        if api not in ("thrift1", "thrift2"):
            raise ValueError(f"unknown api {api!r} (thrift1 or thrift2)")
        # Another gateway as the store: serve its store through its handler (one write lock,
        # one set of delete markers), as HBase's thrift and thrift2 servers share one cluster.
        shared = store if isinstance(store, ThriftGateway) else None
        self._owns_store = shared is None and not isinstance(store, EmbeddedBackend)
        if shared is not None:
            self.store = shared.store
        else:
            self.store = EmbeddedBackend(os.fspath(store)) if self._owns_store else store
        self.host = host
        self.port = port
        self.transport, self.protocol, self.api = transport, protocol, api
        self.delay = delay
        self._transports = _TRANSPORTS[transport]()
        self._protocols = _PROTOCOLS[protocol]()     # Text fields are binary: bytes anyway
        self._handler = shared._handler if shared is not None else _Handler(self.store)
        self._owns_handler = shared is None
        self._lock = threading.Lock()
        self._clients: dict[threading.Thread, socket.socket] = {}
        self._listener: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._stopping = threading.Event()

    def __enter__(self) -> ThriftGateway:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> ThriftGateway:
        if self._listener is not None:
            return self
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((self.host, self.port))
            listener.listen(64)
            listener.settimeout(0.05)   # accept() wakes up to notice stop()
        except OSError:
            listener.close()
            raise
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._stopping.clear()
        self._acceptor = threading.Thread(target=self._accept, daemon=True,
                                          name=f"thrift-gateway:{self.port}")
        self._acceptor.start()
        return self

    def stop(self) -> None:
        """Close the port and every client connection, and wait for their threads."""
        if self._listener is None:
            return
        self._stopping.set()
        if self._acceptor is not None:
            self._acceptor.join()
        self._listener.close()
        self._listener = None
        with self._lock:
            clients = dict(self._clients)
        for sock in clients.values():
            try:
                sock.shutdown(socket.SHUT_RDWR)     # wakes the thread blocked reading it
            except OSError:
                pass
        for thread in clients:
            thread.join(timeout=10)
        if self._owns_handler:
            self._handler.close()
        if self._owns_store:
            self.store.close()

    def _accept(self) -> None:
        listener = self._listener
        while not self._stopping.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stopping.is_set():
                    break
                time.sleep(0.05)    # out of descriptors, say: try again shortly
                continue
            sock.settimeout(None)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            thread = threading.Thread(target=self._serve, args=(sock,), daemon=True,
                                      name=f"thrift-gateway:{self.port}:client")
            with self._lock:
                self._clients[thread] = sock
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        trans = self._transports.get_transport(TSocket(sock=sock))
        proto = self._protocols.get_protocol(trans)
        if self.api == "thrift2":
            from .thrift2_gateway import T2, Thrift2Handler
            service, handler = T2.THBaseService, Thrift2Handler(self._handler)
        else:
            service, handler = H.Hbase, self._handler
        processor = TProcessor(service, _Late(handler, self.delay) if self.delay else handler)
        try:
            while not self._stopping.is_set():
                processor.process(proto, proto)
        except (TException, OSError, EOFError):
            pass    # the client went away
        except Exception as exc:    # a client speaking another transport or protocol
            log.warning("thrift gateway: dropped a connection: %s: %s", type(exc).__name__, exc)
        finally:
            trans.close()       # closes the socket; TSocket.close swallows its own errors
            # This thread's SQLite connection ends with it: a long test session opens
            # thousands of client connections, and their descriptors ran out (select()'s
            # FD_SETSIZE first: "filedescriptor out of range").
            self.store.release_thread()
            with self._lock:
                self._clients.pop(threading.current_thread(), None)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mailstore.testing.thrift_gateway DATA_DIR PORT``: serve until SIGTERM/SIGINT.

    A gateway in its own process, so that tests can kill it (even with SIGKILL) and start it
    again on the same port and data directory, as an HBase outage looks to the servers.  Prints
    ``thrift gateway listening on HOST:PORT`` once the port accepts connections (PORT 0: any).
    """
    import argparse
    import signal
    import sys

    parser = argparse.ArgumentParser(prog="python -m mailstore.testing.thrift_gateway")
    parser.add_argument("data_dir")
    parser.add_argument("port", type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--api", choices=("thrift1", "thrift2"), default="thrift1",
                        help="serve HBase's Thrift1 (hbase thrift) or Thrift2 (hbase thrift2) API")
    args = parser.parse_args(argv)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    gateway = ThriftGateway(args.data_dir, host=args.host, port=args.port, api=args.api).start()
    print(f"thrift gateway listening on {gateway.host}:{gateway.port}", flush=True)
    try:
        while not done.wait(0.5):   # a timed wait, so that the signal handler gets to run
            pass
    finally:
        gateway.stop()
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
