"""HBase's Thrift2 API (``THBaseService``, ``hbase thrift2``) over the embedded store, for tests
and benchmarks: the service :class:`~.thrift_gateway.ThriftGateway` runs with ``api="thrift2"``.

Each call is translated onto the Thrift1 handler of :mod:`.thrift_gateway` (its store, its write
lock, its delete markers, its table states and scanners), so a Thrift1 and a Thrift2 gateway
sharing one handler serve one store as one HBase would, and the habits that handler reproduces
hold here too: delete markers hide puts of the same millisecond (within one ``mutateRow`` or
``checkAndMutate`` the puts are taken to share the deletes' millisecond, HBase's single
timestamp for a ``RowMutations``), an empty or absent expected value matches a missing or empty
cell, unknown families fail.  What Thrift2 does differently, as ``ThriftHBaseServiceHandler``
(thrift2 package, HBase 2.x) does it:

* Columns are ``TColumn`` (family, optional qualifier): no ``parseColumn``; a family alone
  selects or deletes the whole family.  A ``TDelete`` without columns deletes the row.
* ``increment`` applies all of its columns under the row lock (atomically) and returns their new
  values, unless ``returnResults`` is false (then an empty result).
* ``checkAndMutate`` applies its ``TRowMutations`` atomically if the check passes; only the
  ``EQUAL`` comparison is implemented (others are refused, not guessed at).
* ``getMultiple`` answers in the order asked, an empty ``TResult`` for an absent row.
* ``getScannerResults`` opens a scanner, reads and closes it in one call; ``limit`` caps a scan.
* Errors come back as ``TIOError`` (the message of the Java exception: for a table that exists
  already, only its name), ``TIllegalArgument`` for an unknown scanner id.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable

from thriftpy2.thrift import TApplicationException

from ..backends.base import Mutation
from ..backends.hbase_thrift2 import T2
from .thrift_gateway import H, _Handler

log = logging.getLogger(__name__)

_NAMES = T2.TCompressionAlgorithm._VALUES_TO_NAMES
_BLOOMS = T2.TBloomFilterType._VALUES_TO_NAMES
_SCANNER_CALLS = frozenset({"getScannerRows", "closeScanner"})


def _api(method: Callable) -> Callable:
    """Answer every failure with Thrift2's exceptions, as the Java gateway does."""

    @functools.wraps(method)
    def call(self: Thrift2Handler, *args: object) -> object:
        try:
            return method(self, *args)
        except (T2.TIOError, T2.TIllegalArgument, TApplicationException):
            raise
        except H.IllegalArgument as exc:
            if method.__name__ in _SCANNER_CALLS:
                raise T2.TIllegalArgument(message=exc.message) from None
            raise T2.TIOError(message=exc.message) from None
        except (H.IOError, H.AlreadyExists) as exc:
            raise T2.TIOError(message=exc.message) from None
        except Exception as exc:    # the store failed: HBase reports IOExceptions as TIOError
            log.debug("thrift2 gateway: %s failed", method.__name__, exc_info=True)
            raise T2.TIOError(message=f"{type(exc).__name__}: {exc}") from None

    return call


def _names(columns) -> list[bytes] | None:
    """TColumns as the Thrift1 handler's column names (``f`` a family, ``f:q`` a cell)."""
    if not columns:
        return None
    return [c.family if c.qualifier is None else c.family + b":" + c.qualifier
            for c in columns]


def _result(found: H.TRowResult | None) -> T2.TResult:
    if found is None:
        return T2.TResult(columnValues=[])
    values = []
    for name, cell in found.columns.items():
        family, _, qualifier = name.partition(b":")
        values.append(T2.TColumnValue(family=family, qualifier=qualifier, value=cell.value,
                                      timestamp=cell.timestamp))
    return T2.TResult(row=found.row, columnValues=values)


def _table_name(tname: T2.TTableName) -> bytes:
    if tname.ns not in (None, b"", b"default"):
        raise T2.TIOError(message=f"the test gateway has only the default namespace, not "
                                  f"{tname.ns!r}")
    return tname.qualifier


class Thrift2Handler:
    """The ``THBaseService`` service: one method per Thrift2 call, arguments in IDL order."""

    def __init__(self, handler: _Handler):
        self.h = handler

    def __getattr__(self, api: str) -> Callable:
        if api in T2.THBaseService.thrift_services:
            def unknown(*_args: object) -> None:
                raise TApplicationException(TApplicationException.UNKNOWN_METHOD,
                                            f"the test gateway does not implement {api}")
            return unknown
        raise AttributeError(api)

    # -- reads ------------------------------------------------------------------------------

    @staticmethod
    def _plain(spec) -> None:
        if getattr(spec, "filterString", None):
            raise T2.TIOError(message="the test gateway does not evaluate filter strings")

    @_api
    def get(self, table, tget):
        self._plain(tget)
        found = self.h._get(table, [tget.row], _names(tget.columns))
        return _result(found[0] if found else None)

    @_api
    def exists(self, table, tget):
        return bool(self.get(table, tget).columnValues)

    @_api
    def getMultiple(self, table, tgets):
        out = []
        for tget in tgets or ():
            self._plain(tget)
            found = self.h._get(table, [tget.row], _names(tget.columns))
            out.append(_result(found[0] if found else None))
        return out

    def _scanner(self, table, tscan) -> int:
        self._plain(tscan)
        return self.h._open(table, tscan.startRow, tscan.stopRow, _names(tscan.columns),
                            reverse=bool(tscan.reversed), batch=tscan.batchSize,
                            caching=tscan.caching)

    @_api
    def openScanner(self, table, tscan):
        # ``limit`` is not carried by an open scanner here: the mail store never sends it.
        if tscan.limit:
            raise T2.TIOError(message="the test gateway takes limit only in getScannerResults")
        return self._scanner(table, tscan)

    @_api
    def getScannerRows(self, scannerId, numRows):
        return [_result(r) for r in self.h._scanner(scannerId).take(numRows)]

    @_api
    def closeScanner(self, scannerId):
        self.h._scanner(scannerId, remove=True).close()

    @_api
    def getScannerResults(self, table, tscan, numRows):
        scanner_id = self._scanner(table, tscan)
        try:
            count = min(numRows, tscan.limit) if tscan.limit else numRows
            return [_result(r) for r in self.h._scanner(scanner_id).take(count)]
        finally:
            self.h._scanner(scanner_id, remove=True).close()

    # -- writes -----------------------------------------------------------------------------

    def _puts(self, table: bytes, tput: T2.TPut) -> list[tuple[bytes, bytes, bytes]]:
        out = []
        for cv in tput.columnValues or ():
            self.h._check_family(table, cv.family)
            out.append((cv.family, cv.qualifier, cv.value or b""))
        return out

    def _targets(self, table: bytes, tdelete: T2.TDelete) -> list | None:
        if not tdelete.columns:
            return None     # the whole row
        out = []
        for column in tdelete.columns:
            self.h._check_family(table, column.family)
            out.append((column.family, column.qualifier))
        return out

    def _apply(self, table: bytes, changes: list[tuple[bytes, list | None | bool, list]]
               ) -> None:
        """For each ``(row, deletes, puts)``: the deletes, then the puts that markers of this
        millisecond do not hide; all in one store transaction (one commit however many rows
        a putMultiple carries).  ``deletes`` False: none; None: the whole row.  The caller
        holds the write lock."""
        store = self.h._table(table)
        self.h._tick()
        mutations: list[Mutation] = []
        for row, deletes, puts in changes:
            if deletes is not False:
                mutations.append(self.h._deletes(store, table, row, deletes))
            put = self.h._puts(table, row, puts)
            if put:
                mutations.append(put)
        if mutations:
            store.mutate_rows(mutations)

    @_api
    def put(self, table, tput):
        self.putMultiple(table, [tput])

    @_api
    def putMultiple(self, table, tputs):
        with self.h._write:
            self.h._table(table)
            self._apply(table, [(t.row, False, self._puts(table, t)) for t in tputs or ()])

    @_api
    def deleteSingle(self, table, tdelete):
        self.deleteMultiple(table, [tdelete])

    @_api
    def deleteMultiple(self, table, tdeletes):
        with self.h._write:
            self.h._table(table)
            self._apply(table, [(t.row, self._targets(table, t), [])
                                for t in tdeletes or ()])
        return []

    def _row_mutations(self, table: bytes, rm: T2.TRowMutations) -> tuple[list | None | bool,
                                                                           list]:
        deletes: list | None | bool = False
        puts: list = []
        for m in rm.mutations or ():
            if m.put is not None:
                puts += self._puts(table, m.put)
            elif m.deleteSingle is not None:
                targets = self._targets(table, m.deleteSingle)
                if targets is None or deletes is None:
                    deletes = None
                else:
                    deletes = (deletes or []) + targets
        return deletes, puts

    @_api
    def mutateRow(self, table, trowMutations):
        with self.h._write:
            self.h._table(table)
            deletes, puts = self._row_mutations(table, trowMutations)
            self._apply(table, [(trowMutations.row, deletes, puts)])

    def _matches(self, table: bytes, row: bytes, family: bytes, qualifier: bytes,
                 value: bytes | None) -> bool:
        self.h._check_family(table, family)
        name = family + b":" + qualifier
        store = self.h._table(table)
        current = store.row(row, [name] if qualifier else [family + b":"]).get(name)
        # HBase compares an absent or empty expected value as "no value": missing or empty.
        return current == value if value else not current

    @_api
    def checkAndPut(self, table, row, family, qualifier, value, tput):
        with self.h._write:
            puts = self._puts(table, tput)
            if not self._matches(table, row, family, qualifier, value):
                return False
            self._apply(table, [(row, False, puts)])
            return True

    @_api
    def checkAndMutate(self, table, row, family, qualifier, compareOperator, value,
                       rowMutations):
        if compareOperator != T2.TCompareOperator.EQUAL:
            raise T2.TIOError(message="the test gateway implements only the EQUAL comparison")
        with self.h._write:
            deletes, puts = self._row_mutations(table, rowMutations)
            if not self._matches(table, row, family, qualifier, value):
                return False
            self._apply(table, [(row, deletes, puts)])
            return True

    @_api
    def increment(self, table, tincrement):
        deltas = {}
        for c in tincrement.columns or ():
            self.h._check_family(table, c.family)
            column = c.family + b":" + c.qualifier
            deltas[column] = deltas.get(column, 0) + (1 if c.amount is None else c.amount)
        with self.h._write:
            store = self.h._table(table)
            try:
                values = store.increment_many(tincrement.row, deltas, returning=tuple(deltas))
            except ValueError as exc:
                raise T2.TIOError(message="org.apache.hadoop.hbase.DoNotRetryIOException: "
                                          f"Field is not a long ({exc})") from None
        if tincrement.returnResults is False:
            return T2.TResult(columnValues=[])
        return T2.TResult(row=tincrement.row, columnValues=[
            T2.TColumnValue(family=c.partition(b":")[0], qualifier=c.partition(b":")[2],
                            value=v.to_bytes(8, "big", signed=True), timestamp=0)
            for c, v in sorted(values.items())])

    # -- tables -----------------------------------------------------------------------------

    @_api
    def createTable(self, desc, splitKeys):
        # Split keys are accepted and dropped: the embedded store has no regions.
        name = _table_name(desc.tableName)
        families = [H.ColumnDescriptor(
            name=cf.name + b":", maxVersions=cf.maxVersions or 1,
            compression=_NAMES.get(cf.compressionType, "NONE"),
            inMemory=bool(cf.inMemory),
            bloomFilterType=_BLOOMS.get(cf.bloomnFilterType, "NONE"),
            blockCacheEnabled=True if cf.blockCacheEnabled is None else cf.blockCacheEnabled,
            timeToLive=cf.timeToLive if cf.timeToLive is not None else -1)
            for cf in desc.columns or ()]
        try:
            self.h.createTable(name, families)
        except H.AlreadyExists:
            # HBase's TableExistsException carries only the table's name as its message.
            raise T2.TIOError(message=name.decode("utf-8", "replace")) from None

    @_api
    def deleteTable(self, tableName):
        self.h.deleteTable(_table_name(tableName))

    @_api
    def enableTable(self, tableName):
        self.h.enableTable(_table_name(tableName))

    @_api
    def disableTable(self, tableName):
        self.h.disableTable(_table_name(tableName))

    @_api
    def isTableEnabled(self, tableName):
        return self.h.isTableEnabled(_table_name(tableName))

    @_api
    def tableExists(self, tableName):
        return self.h._state(_table_name(tableName)) is not None

    @_api
    def getTableDescriptor(self, table):
        name = _table_name(table)
        columns = []
        for cd in self.h.getColumnDescriptors(name).values():
            columns.append(T2.TColumnFamilyDescriptor(
                name=cd.name.rstrip(b":"), maxVersions=cd.maxVersions,
                inMemory=cd.inMemory, blockCacheEnabled=cd.blockCacheEnabled,
                timeToLive=cd.timeToLive))
        return T2.TTableDescriptor(tableName=T2.TTableName(ns=b"default", qualifier=name),
                                   columns=columns)

    @_api
    def getTableNamesByPattern(self, regex, includeSysTables):
        pattern = re.compile(regex or ".*")
        return [T2.TTableName(ns=b"default", qualifier=name)
                for name in self.h.getTableNames()
                if pattern.fullmatch(name.decode("utf-8", "replace"))]

    def getThriftServerType(self):
        return T2.TThriftServerType.TWO
