/*
 * Licensed to the Apache Software Foundation (ASF) under one
 * or more contributor license agreements.  See the NOTICE file
 * distributed with this work for additional information
 * regarding copyright ownership.  The ASF licenses this file
 * to you under the Apache License, Version 2.0 (the
 * "License"); you may not use this file except in compliance
 * with the License.  You may obtain a copy of the License at
 *
 *     http://www.apache.org/licenses/LICENSE-2.0
 *
 * Unless required by applicable law or agreed to in writing, software
 * distributed under the License is distributed on an "AS IS" BASIS,
 * WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
 * See the License for the specific language governing permissions and
 * limitations under the License.
 */

// HBase's Thrift2 API (THBaseService, served by `hbase thrift2`), reduced to what the mail
// store's Thrift2 backend and its test gateway use.  Derived from Apache HBase's
// hbase-thrift/src/main/resources/org/apache/hadoop/hbase/thrift2/hbase.thrift (HBase 2.x,
// commit 000e4d12ba609def9ce6e65f5ba497d583305003).  Every struct, field id, type and method
// signature kept here is the upstream one, so the bytes on the wire are the same; fields and
// methods left out are ones we never send or call (a Thrift peer skips unknown fields).
// Comments are ours.

namespace py hbase2

// A cell or, without qualifier, a whole family.
struct TColumn {
  1: required binary family,
  2: optional binary qualifier,
  3: optional i64 timestamp
}

struct TColumnValue {
  1: required binary family,
  2: required binary qualifier,
  3: required binary value,
  4: optional i64 timestamp,
  5: optional binary tags,
  6: optional byte type
}

struct TColumnIncrement {
  1: required binary family,
  2: required binary qualifier,
  3: optional i64 amount = 1
}

// An absent row comes back with no row and an empty columnValues.
struct TResult {
  1: optional binary row,
  2: required list<TColumnValue> columnValues,
  3: optional bool stale = false
  4: optional bool partial = false
}

enum TDeleteType {
  DELETE_COLUMN = 0,
  DELETE_COLUMNS = 1,
  DELETE_FAMILY = 2,
  DELETE_FAMILY_VERSION = 3
}

enum TDurability {
  USE_DEFAULT = 0,
  SKIP_WAL = 1,
  ASYNC_WAL = 2,
  SYNC_WAL = 3,
  FSYNC_WAL = 4
}

struct TGet {
  1: required binary row,
  2: optional list<TColumn> columns,
  3: optional i64 timestamp,
  5: optional i32 maxVersions,
  6: optional binary filterString,
  7: optional map<binary, binary> attributes
}

struct TPut {
  1: required binary row,
  2: required list<TColumnValue> columnValues
  3: optional i64 timestamp,
  5: optional map<binary, binary> attributes,
  6: optional TDurability durability
}

// No columns: the whole row.  A column without qualifier: its whole family.
struct TDelete {
  1: required binary row,
  2: optional list<TColumn> columns,
  3: optional i64 timestamp,
  4: optional TDeleteType deleteType = 1,
  6: optional map<binary, binary> attributes,
  7: optional TDurability durability
}

// Several columns of one row, applied atomically under the row lock.
struct TIncrement {
  1: required binary row,
  2: required list<TColumnIncrement> columns,
  4: optional map<binary, binary> attributes,
  5: optional TDurability durability
  7: optional bool returnResults
}

struct TScan {
  1: optional binary startRow,
  2: optional binary stopRow,
  3: optional list<TColumn> columns
  4: optional i32 caching,
  5: optional i32 maxVersions=1,
  7: optional binary filterString,
  8: optional i32 batchSize,
  9: optional map<binary, binary> attributes
  11: optional bool reversed
  12: optional bool cacheBlocks
  15: optional i32 limit
}

union TMutation {
  1: TPut put
  2: TDelete deleteSingle
}

struct TRowMutations {
  1: required binary row
  2: required list<TMutation> mutations
}

enum TCompareOperator {
  LESS = 0,
  LESS_OR_EQUAL = 1,
  EQUAL = 2,
  NOT_EQUAL = 3,
  GREATER_OR_EQUAL = 4,
  GREATER = 5,
  NO_OP = 6
}

enum TBloomFilterType {
  NONE = 0,
  ROW = 1,
  ROWCOL = 2,
  ROWPREFIX_FIXED_LENGTH = 3,
}

enum TCompressionAlgorithm {
  LZO = 0,
  GZ = 1,
  NONE = 2,
  SNAPPY = 3,
  LZ4 = 4,
  BZIP2 = 5,
  ZSTD = 6
}

struct TTableName {
  1: optional binary ns
  2: required binary qualifier
}

struct TColumnFamilyDescriptor {
  1: required binary name
  2: optional map<binary, binary> attributes
  3: optional map<string, string> configuration
  4: optional i32 blockSize
  5: optional TBloomFilterType bloomnFilterType
  6: optional TCompressionAlgorithm compressionType
  10: optional i32 maxVersions
  11: optional i32 minVersions
  13: optional i32 timeToLive
  14: optional bool blockCacheEnabled
  20: optional bool inMemory
}

struct TTableDescriptor {
 1: required TTableName tableName
 2: optional list<TColumnFamilyDescriptor> columns
 3: optional map<binary, binary> attributes
 4: optional TDurability durability
}

exception TIOError {
  1: optional string message
}

exception TIllegalArgument {
  1: optional string message
}

enum TThriftServerType {
  ONE = 1,
  TWO = 2
}

service THBaseService {
  bool exists(1: required binary table, 2: required TGet tget) throws (1: TIOError io)

  TResult get(1: required binary table, 2: required TGet tget) throws (1: TIOError io)

  // Results in the order of the gets; an absent row is an empty TResult.
  list<TResult> getMultiple(1: required binary table, 2: required list<TGet> tgets)
    throws (1: TIOError io)

  void put(1: required binary table, 2: required TPut tput) throws (1: TIOError io)

  bool checkAndPut(1: required binary table, 2: required binary row, 3: required binary family,
                   4: required binary qualifier, 5: binary value, 6: required TPut tput)
    throws (1: TIOError io)

  // Each put atomic for its row; no atomicity across rows.
  void putMultiple(1: required binary table, 2: required list<TPut> tputs)
    throws (1: TIOError io)

  void deleteSingle(1: required binary table, 2: required TDelete tdelete)
    throws (1: TIOError io)

  list<TDelete> deleteMultiple(1: required binary table, 2: required list<TDelete> tdeletes)
    throws (1: TIOError io)

  TResult increment(1: required binary table, 2: required TIncrement tincrement)
    throws (1: TIOError io)

  i32 openScanner(1: required binary table, 2: required TScan tscan) throws (1: TIOError io)

  list<TResult> getScannerRows(1: required i32 scannerId, 2: i32 numRows = 1)
    throws (1: TIOError io, 2: TIllegalArgument ia)

  void closeScanner(1: required i32 scannerId) throws (1: TIOError io, 2: TIllegalArgument ia)

  // Puts and deletes of one row, applied atomically.
  void mutateRow(1: required binary table, 2: required TRowMutations trowMutations)
    throws (1: TIOError io)

  // Opens a scanner, takes up to numRows rows and closes it: one round trip.
  list<TResult> getScannerResults(1: required binary table, 2: required TScan tscan,
                                  3: i32 numRows = 1) throws (1: TIOError io)

  // The row's mutations if the cell compares as asked; no value: if the cell is absent.
  bool checkAndMutate(1: required binary table, 2: required binary row,
                      3: required binary family, 4: required binary qualifier,
                      5: required TCompareOperator compareOperator, 6: binary value,
                      7: required TRowMutations rowMutations) throws (1: TIOError io)

  TTableDescriptor getTableDescriptor(1: required TTableName table) throws (1: TIOError io)

  bool tableExists(1: TTableName tableName) throws (1: TIOError io)

  list<TTableName> getTableNamesByPattern(1: optional string regex,
                                          2: required bool includeSysTables)
    throws (1: TIOError io)

  void createTable(1: required TTableDescriptor desc, 2: optional list<binary> splitKeys)
    throws (1: TIOError io)

  void deleteTable(1: required TTableName tableName) throws (1: TIOError io)

  void enableTable(1: required TTableName tableName) throws (1: TIOError io)

  void disableTable(1: required TTableName tableName) throws (1: TIOError io)

  bool isTableEnabled(1: required TTableName tableName) throws (1: TIOError io)

  TThriftServerType getThriftServerType()
}
