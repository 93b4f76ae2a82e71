"""The HBase region layout (docs/decisions/0015-hbase-region-layout.md): the shell DDL generated
from mailstore/schema.py, the [hbase] settings that size it, and what Thrift1's createTable
carries of it.  HBase shell syntax is checked as far as it can be without an HBase: the shell is
JRuby, so braces and quotes balance, and every option is spelled as the HBase reference guide's
``create`` examples spell it."""

from __future__ import annotations

import json
import os
import re

import happybase
import Hbase_thrift  # loaded by happybase from its Hbase.thrift
import pytest

from mailstore import config
from mailstore.schema import (
    ACL_INDEX,
    CONTENT,
    MAILBOX_INDEX,
    OUTBOX,
    SIEVE_SCRIPTS,
    SIEVE_TRACKING,
    SUBSCRIPTIONS,
    TABLES,
    URLAUTH_KEYS,
    USERS,
    Layout,
    ddl,
)
from mailstore.testing.thrift_gateway import ThriftGateway
from tests.admincli import run

# Column family attributes as the HBase reference guide writes them (`help 'create'`, the MOB
# chapter: `create 't1', {NAME => 'f1', IS_MOB => true, MOB_THRESHOLD => 102400}`), and the
# table attributes of a pre-split (`{NUMREGIONS => 15, SPLITALGO => 'HexStringSplit'}`).
FAMILY_ATTRS = {
    "NAME": r"'[a-z]'",
    "VERSIONS": r"1",
    "COMPRESSION": r"'(SNAPPY|ZSTD|GZ|NONE)'",
    "BLOOMFILTER": r"'ROW'",
    "BLOCKCACHE": r"'true'",
    "IN_MEMORY": r"'true'",
    "IS_MOB": r"true",
    "MOB_THRESHOLD": r"[1-9][0-9]*",
    "TTL": r"[1-9][0-9]*",
}
TABLE_ATTRS = {"NUMREGIONS": r"([2-9]|[1-9][0-9]+)",
               "SPLITALGO": r"'(UniformSplit|HexStringSplit)'"}
# Explicit split points (`create 't1', 'f1', SPLITS => ['10', '20', '30', '40']`), binary ones
# double-quoted with \xNN escapes: JRuby makes "\x01" the one byte 0x01.
SPLIT_POINT = r'"(\\x[0-9a-f]{2})+"'


def split_points(value: str) -> list[bytes]:
    """The keys of a ``SPLITS => [...]`` value, as the shell would read them."""
    assert value.startswith("[") and value.endswith("]"), value
    points = value[1:-1].split(", ")
    for point in points:
        assert re.fullmatch(SPLIT_POINT, point), point
    return [bytes.fromhex(p[1:-1].replace("\\x", "")) for p in points]


def parse_create(line: str) -> tuple[str, list[dict[str, str]]]:
    """Split one ``create 'T', {...}, ...`` command into its table name and attribute hashes,
    refusing anything the shell would not take."""
    head = re.match(r"create '([A-Za-z0-9_]+)', ", line)
    assert head, line
    rest, hashes = line[head.end():], []
    while rest:
        m = re.match(r"\{([^{}]*)\}(, )?", rest)
        assert m, f"not a hash: {rest!r}"
        attrs = {}
        splits = re.fullmatch(r"SPLITS => (\[[^\[\]]*\])", m.group(1))
        for pair in [m.group(1)] if splits else m.group(1).split(", "):
            key, _, value = pair.partition(" => ")
            assert key not in attrs, f"{key} twice in {line}"
            attrs[key] = value
        hashes.append(attrs)
        rest = rest[m.end():]
        assert bool(m.group(2)) == bool(rest), line   # commas between hashes, none after
    return head.group(1), hashes


def check_shell_script(text: str) -> dict[str, list[dict[str, str]]]:
    commands = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    for symbol, closing in (("{", "}"), ("[", "]"), ("(", ")")):
        assert text.count(symbol) == text.count(closing), symbol
    created = {}
    for line in commands:
        assert line.count("'") % 2 == 0, line
        name, hashes = parse_create(line)
        assert name not in created, f"{name} created twice"
        families = [h for h in hashes if "NAME" in h]
        options = [h for h in hashes if "NAME" not in h]
        assert families and hashes[:len(families)] == families, line   # table options last
        assert len(options) <= 1, line
        for fam in families:
            for key, value in fam.items():
                assert key in FAMILY_ATTRS and re.fullmatch(FAMILY_ATTRS[key], value), \
                    (line, key, value)
            assert ("IS_MOB" in fam) == ("MOB_THRESHOLD" in fam), line
        for opts in options:
            if "SPLITS" in opts:
                assert set(opts) == {"SPLITS"}, line
                points = split_points(opts["SPLITS"])
                assert points == sorted(set(points)) and b"" not in points, line
                continue
            assert set(opts) == set(TABLE_ATTRS), line
            for key, value in opts.items():
                assert re.fullmatch(TABLE_ATTRS[key], value), (line, key, value)
        created[name] = hashes
    return created


def test_the_checked_in_script_is_shell_syntax_and_creates_each_table_once():
    """Every table once, families before the pre-split hash, options spelled as HBase does."""
    with open(os.path.join(os.path.dirname(__file__), "..", "hbase-schema", "schema.hbase")) as f:
        created = check_shell_script(f.read())
    assert sorted(created) == sorted(t.name for t in TABLES)
    for layout in (Layout(), Layout(regions=1, compression="none", mob=True),
                   Layout(regions=64, compression="zstd", mob=True, chunk_size=65536)):
        assert sorted(check_shell_script(ddl("site", layout))) == \
            sorted(f"site_{t.name}" for t in TABLES)


USER_TABLES = (MAILBOX_INDEX, USERS, SUBSCRIPTIONS, URLAUTH_KEYS, SIEVE_SCRIPTS, ACL_INDEX,
               SIEVE_TRACKING)


def test_uuid_tables_are_pre_split_and_user_tables_on_their_salt_buckets():
    """UniformSplit for keys that start with a random UUID; the user-name-keyed tables split
    at their salt buckets, one region each (decision 0027: a salt byte 0..N-1 leads every key),
    and the outgoing queue stays one region (time-ordered keys of a short queue: 0024)."""
    created = check_shell_script(ddl(layout=Layout(regions=48, user_buckets=12)))
    assert {t.name for t in TABLES if t.user_keyed} == {t.name for t in USER_TABLES}
    assert [t.name for t in TABLES if t.split is None] == [OUTBOX.name]
    for table in TABLES:
        split = [h for h in created[table.name] if "NAME" not in h]
        if table in USER_TABLES:
            assert len(split) == 1 and set(split[0]) == {"SPLITS"}, table.name
            points = split_points(split[0]["SPLITS"])
            assert points == [bytes([b]) for b in range(1, 12)], table.name
            assert points == Layout(user_buckets=12).user_keys.split_keys()
            assert table.region_count(Layout(user_buckets=12)) == 12
        elif table is OUTBOX:
            assert split == [], table.name
        else:
            assert split == [{"NUMREGIONS": "48", "SPLITALGO": "'UniformSplit'"}], table.name
        for fam in created[table.name]:
            if "NAME" in fam:
                assert fam["BLOOMFILTER"] == "'ROW'" and fam["COMPRESSION"] == "'SNAPPY'"
                assert "TTL" not in fam   # nothing the store keeps may expire (0015)
    flags = {h["NAME"]: h for h in created["JAMES_MESSAGES"] if "NAME" in h}
    assert flags["'f'"].get("IN_MEMORY") == "'true'" and "IN_MEMORY" not in flags["'m'"]
    assert all("NUMREGIONS" not in h for h in check_shell_script(ddl(layout=Layout(regions=1)))
               ["JAMES_MESSAGES"])
    one = check_shell_script(ddl(layout=Layout(user_buckets=1)))   # no SPLITS => []
    assert all("SPLITS" not in h for h in one[USERS.name])
    # The checked-in script: the default 16 buckets.
    with open(os.path.join(os.path.dirname(__file__), "..", "hbase-schema", "schema.hbase")) as f:
        checked_in = check_shell_script(f.read())
    assert split_points(checked_in[USERS.name][-1]["SPLITS"]) == [bytes([b])
                                                                 for b in range(1, 16)]


@pytest.mark.parametrize("chunk_size, threshold", [(65536, 32768), (262144, 102400),
                                                    (1048576, 102400)])
def test_mob_only_on_content_chunks_with_the_threshold_tied_to_the_chunk_size(chunk_size,
                                                                             threshold):
    """MOB (HBase >= 2.0) on JAMES_CONTENT's chunk family alone; every full chunk is above the
    threshold (docs/decisions/0002), so a multi-chunk message is all MOB."""
    created = check_shell_script(ddl(layout=Layout(mob=True, chunk_size=chunk_size)))
    mob = [(t, h["NAME"]) for t, hs in created.items() for h in hs if "IS_MOB" in h]
    assert mob == [(CONTENT.name, "'c'")]
    content_c = next(h for h in created[CONTENT.name] if h.get("NAME") == "'c'")
    assert content_c["MOB_THRESHOLD"] == str(threshold)
    assert threshold < chunk_size
    assert not any("IS_MOB" in h for hs in check_shell_script(ddl()).values() for h in hs)


def test_layout_settings_are_validated_by_name(tmp_path):
    """A bad [hbase] layout setting stops start-up naming it; the defaults make the checked-in
    script; the layout keys never reach the Thrift connection."""
    conf = tmp_path / "c.conf"
    for text, named in (("[hbase]\ncompression = lzo\n", "hbase.compression"),
                        ("[hbase]\ncompression = SNAPPY\n", "hbase.compression"),
                        ("[hbase]\nregions_per_table = 0\n", "hbase.regions_per_table"),
                        ("[hbase]\nregions_per_table = 5000\n", "hbase.regions_per_table"),
                        ("[hbase]\nmob = maybe\n", "hbase.mob"),
                        ("[hbase]\nuser_buckets = 0\n", "hbase.user_buckets"),
                        ("[hbase]\nuser_buckets = 33\n", "hbase.user_buckets")):
        conf.write_text(text)
        with pytest.raises(config.ConfigError, match=named):
            config.load(str(conf))
    conf.write_text("[store]\nbackend = hbase\nchunk_size = 65536\n"
                    "[hbase]\nregions_per_table = 8\ncompression = zstd\nmob = yes\n"
                    "user_buckets = 4\n")
    cfg = config.load(str(conf))
    assert Layout.from_config(cfg) == Layout(regions=8, compression="zstd", mob=True,
                                             chunk_size=65536, user_buckets=4)
    assert not set(config.LAYOUT_KEYS) & set(cfg.backend_options()[1])
    out = run("init-schema", "--print", "--config", str(conf), data_dir=None)
    assert out.returncode == 0, out.stderr
    assert "NUMREGIONS => 8" in out.stdout and "COMPRESSION => 'ZSTD'" in out.stdout
    assert "MOB_THRESHOLD => 32768" in out.stdout
    assert 'SPLITS => ["\\x01", "\\x02", "\\x03"]' in out.stdout


def test_init_schema_over_thrift_sends_the_family_options_and_says_what_it_cannot(
        tmp_path, hbase_store):
    """Through Thrift1 (what happybase sends: ColumnDescriptor compression, bloomFilterType,
    inMemory, blockCacheEnabled) the families get the layout; splits and MOB cannot go over
    Thrift1, and init-schema says so instead of pretending.  On the session's Thrift server
    (a real HBase's with ``HBASE_THRIFT_HOST``), in a leased table prefix emptied of its
    tables first; GZ, the codec every HBase has (SNAPPY and ZSTD need native libraries)."""
    conf = tmp_path / "c.conf"
    conf.write_text("[hbase]\ncompression = gz\nmob = yes\n")
    prefix = hbase_store.prefix
    conn = hbase_store.target.connection()
    try:
        for table in TABLES:
            conn.delete_table(f"{prefix}_{table.name}", disable=True)
    finally:
        conn.close()
    hbase = ("--config", str(conf), *hbase_store.args())
    out = run("init-schema", "--json", *hbase, data_dir=None)
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert sorted(answer["created"]) == sorted(t.name for t in TABLES)
    assert len(answer["notes"]) == 1 and "split" in answer["notes"][0]
    again = json.loads(run("init-schema", "--json", *hbase, data_dir=None).stdout)
    assert again["created"] == [] and again["notes"] == []
    conn = hbase_store.target.connection()
    try:
        flags = conn.table(f"{prefix}_JAMES_MESSAGES").families()
        content = conn.table(f"{prefix}_JAMES_CONTENT").families()
    finally:
        conn.close()
    assert flags[b"f"]["in_memory"] is True and flags[b"m"]["in_memory"] is False
    for fam in (*flags.values(), *content.values()):
        assert fam["compression"] in (b"GZ", "GZ")
        assert fam["bloom_filter_type"] in (b"ROW", "ROW")
        assert fam["block_cache_enabled"] is True
        assert fam["max_versions"] == 1


def test_the_test_gateway_refuses_family_options_hbase_would(tmp_path):
    """Like HBase's colDescFromThrift, the in-process gateway takes compression names in any
    case and bloom filter types spelled exactly, and refuses others as IllegalArgument."""
    with ThriftGateway(str(tmp_path / "hbase")) as gateway:
        conn = happybase.Connection("127.0.0.1", gateway.port, autoconnect=True)
        try:
            conn.create_table("OK", {"f": {"compression": "snappy", "bloom_filter_type": "ROW",
                                           "in_memory": True, "time_to_live": 86400}})
            assert conn.table("OK").families()[b"f"]["in_memory"] is True
            for bad, says in (({"compression": "brotli9"}, "unknown compression"),
                              ({"bloom_filter_type": "row"}, "BloomType.row")):
                with pytest.raises(Hbase_thrift.IllegalArgument, match=says):
                    conn.create_table("BAD", {"f": bad})
            assert b"BAD" not in conn.tables()
        finally:
            conn.close()
