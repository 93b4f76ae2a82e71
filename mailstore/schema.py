"""The schema, defined once: every table with its purpose, row key, families and access pattern.

``hbase-schema/schema.hbase`` is generated from this module (``make schema``) and a test checks
that the two agree.  ``mailadmin init-schema`` creates these tables through the configured
backend, idempotently.  All families keep one version: the store never reads history, and
keeping more would only cost disk.

The region layout (pre-splits, compression, bloom filters, in-memory families, MOB) is
docs/decisions/0015-hbase-region-layout.md.  HBase's Thrift1 ``createTable`` carries the
column family options but neither split keys nor MOB, so only the shell DDL (:func:`ddl`) has
the whole layout; :data:`THRIFT_CANNOT` says what an operator adds after a Thrift creation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .backends.base import Backend
from .content import DEFAULT_CHUNK
from .keys import MAX_USER_BUCKETS, PREFIX_KEYED, ROW_KEYED, UserKeys

COMPRESSIONS = ("snappy", "zstd", "gz", "none")

# HBase's own default MOB threshold (100 KiB): values above it go to MOB files.
_HBASE_MOB_THRESHOLD = 100 * 1024


@dataclass(frozen=True)
class Layout:
    """How the tables are laid out on an HBase cluster (``[hbase]`` settings)."""

    regions: int = 16
    """Regions each UUID-keyed table is pre-split into (1: no pre-split)."""
    compression: str = "snappy"
    mob: bool = False
    chunk_size: int = DEFAULT_CHUNK
    user_buckets: int = 16
    """Salt buckets of the user-name-keyed tables in a *new* store, each pre-split into that
    many regions (docs/decisions/0027-salted-user-keys.md).  A store keeps the count it was
    created with (recorded in it); this only proposes one."""

    def __post_init__(self):
        if self.compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {', '.join(COMPRESSIONS)}")
        if not 1 <= self.regions <= 4096:
            raise ValueError("regions per table must be 1 to 4096")
        if not 1 <= self.user_buckets <= MAX_USER_BUCKETS:
            raise ValueError(f"user buckets must be 1 to {MAX_USER_BUCKETS}")

    @classmethod
    def from_config(cls, cfg) -> Layout:
        hbase = cfg["hbase"]
        return cls(regions=hbase["regions_per_table"], compression=hbase["compression"],
                   mob=hbase["mob"], chunk_size=cfg["store"]["chunk_size"],
                   user_buckets=hbase["user_buckets"])

    @property
    def user_keys(self) -> UserKeys:
        """The key format a new store gets."""
        return UserKeys(self.user_buckets)

    @property
    def mob_threshold(self) -> int:
        """Content chunks larger than this go to MOB files.  Tied to the chunk size
        (docs/decisions/0002): half a chunk, so every full chunk of a multi-chunk message is
        a MOB, and at most HBase's 100 KiB default, so a single-chunk message of 100 KiB-256
        KiB is one too; the many small messages stay ordinary cells (one read, block cache)."""
        return min(_HBASE_MOB_THRESHOLD, self.chunk_size // 2)


@dataclass(frozen=True)
class TableDef:
    name: str
    purpose: str
    row_key: str
    families: dict[str, str]
    access: str
    options: dict[str, dict[str, object]] = field(default_factory=dict)
    new_keys_descend: bool = False
    """New rows mostly sort before the existing ones (a B-tree store lays the table out for
    that; see Backend.create_table)."""
    split: str | None = None
    """How HBase pre-splits the table: "uniform" (UniformSplit: keys start with random bytes,
    a UUID4), "hex" (HexStringSplit: keys start with hex digits), "salt" (``SPLITS`` at the
    salt buckets of the user-name-keyed tables, decision 0027) or None (one region)."""
    regions: int | None = None
    """Pre-split into this many regions instead of the configured ``regions_per_table``."""
    mob_family: str | None = None
    """The family whose big cells HBase keeps as MOBs when ``[hbase] mob = yes``."""
    user_keyed: str | None = None
    """keys.ROW_KEYED or keys.PREFIX_KEYED for a table keyed by user name (its keys come from
    keys.UserKeys, in the store's format; ``mailadmin migrate-keys`` converts them)."""

    def family_options(self, layout: Layout | None = None) -> dict[str, dict[str, object]]:
        """Column family options by their happybase (Thrift1 ColumnDescriptor) names.

        Every one is spelled out because Thrift1's defaults are not the shell's: a family
        created through Thrift gets ``blockCacheEnabled = false`` and ``bloomFilterType =
        "NONE"`` unless the client says otherwise (Hbase.thrift ColumnDescriptor)."""
        layout = layout or Layout()
        return {fam: {"max_versions": 1, "compression": layout.compression.upper(),
                      "bloom_filter_type": "ROW", "block_cache_enabled": True,
                      **self.options.get(fam, {})}
                for fam in self.families}

    def region_count(self, layout: Layout | None = None) -> int:
        if self.split is None:
            return 1
        if self.split == "salt":
            return (layout or Layout()).user_buckets
        return self.regions or (layout or Layout()).regions


MAILBOXES = TableDef(
    name="JAMES_MAILBOXES",
    purpose="One row per mailbox: who owns it, its name, UIDVALIDITY and its counters.",
    row_key="16-byte mailbox UUID (random, so mailboxes spread over regions)",
    families={
        "m": "meta: owner, name, uidvalidity, special_use, state (b'live' / b'deleting'); "
             "a.<identifier>: the ACL, one cell per identifier (RFC 4314: a user name, "
             "'anyone', '-' before either for negative rights) holding its rights letters "
             "(docs/decisions/0018-acl.md)",
        "c": "counters, 8-byte big-endian, changed only by increments (visible by check-and-put): "
             "uid (last allocated UID), visible (UID watermark readers may show), modseq, "
             "count, unseen, size; logseq (last change-log entry allocated) and logmark (the "
             "change-log watermark, by check-and-put); recent (the \\Recent watermark: the "
             "highest UID some session has claimed as recent, by check-and-put; "
             "docs/decisions/0010-recent.md); ~<intent key hex>.<step>: marker of an intent's "
             "counting step, incremented with the counters it changes, deleted after the intent "
             "(docs/decisions/0004)",
    },
    access="get by UUID (from the name index); increments on append/flag change/expunge; "
           "one check-and-put of c:recent per read-write SELECT, and per refresh that finds "
           "new messages",
    # The counters are read on every refresh (NOOP, IDLE poll) of every session.
    options={"c": {"in_memory": True}},
    split="uniform",
)

MAILBOX_INDEX = TableDef(
    name="JAMES_MAILBOX_INDEX",
    purpose="(user, mailbox name) -> mailbox UUID, so no lookup or listing scans all mailboxes.",
    row_key="salt byte, user name UTF-8, NUL, mailbox name UTF-8 (salt: decision 0027; "
            "stores made before it have none)",
    families={"i": "i:id = mailbox UUID (created by check-and-put: one owner per name)"},
    access="get by (user, name); prefix scan by salt+user for LIST; by salt+user+name+'/' for "
           "children",
    split="salt",
    user_keyed=PREFIX_KEYED,
)

MESSAGES = TableDef(
    name="JAMES_MESSAGES",
    purpose="One row per message in a mailbox, sorted newest first within the mailbox.",
    row_key="16-byte mailbox UUID + 8-byte big-endian (2**63 - 1 - uid)",
    families={
        "m": "metadata, written once: s (commit record: state byte + packed uid, size, date, "
             "MODSEQ, content id, save date; written last by check-and-put; b'X' marks an "
             "abandoned UID, b'D' a message being expunged; an M or D record is followed by the "
             "16-byte id of the intent that claimed it), "
             "env (ENVELOPE), bs (BODYSTRUCTURE), hdr (raw header block), "
             "pv (RFC 8970 preview; added later to rows stored before it existed), "
             "sk (SORT/THREAD keys, mailstore/sortkeys.py; absent in rows older than it)",
        "f": "flags, changed by check-and-put on one cell: v = 8-byte MODSEQ + flag names",
    },
    access="newest page = one reverse-ordered bounded scan of 25 rows; UID list = bounded scan "
           "of m:s; flag change touches only f:v",
    new_keys_descend=True,
    # Flags are small and read by every FETCH FLAGS, SEARCH on keywords and refresh delta.
    options={"f": {"in_memory": True}},
    split="uniform",
)

CONTENT = TableDef(
    name="JAMES_CONTENT",
    purpose="Message content, stored once and shared by copies, moves and recipients.",
    row_key="16-byte content UUID: random (v4) over HBase, time-ordered (v7) in the embedded store",
    families={
        "c": "chunks, qualifiers 1, 2, 3, ... (decimal), each at most chunk_size bytes",
        "m": "meta: size, chunks, chunk_size (JSON in m:info), written with the last chunk",
        "r": "r:refs, the number of message rows that point here (increments only); "
             "r:~<intent key hex>.<step>: marker of an intent's reference step (decision 0004)",
    },
    access="get of the few chunk columns a read needs; refs incremented on copy, decremented "
           "on expunge; when refs reaches 0 the row is released and deleted a grace period "
           "later (docs/decisions/0011-expunge-vs-readers.md)",
    split="uniform",
    mob_family="c",
)

SUBSCRIPTIONS = TableDef(
    name="JAMES_SUBSCRIPTIONS",
    purpose="The mailbox names a user is subscribed to (LSUB); names need not exist.",
    row_key="salt byte, user name UTF-8",
    families={"s": "one column per subscribed mailbox name (qualifier = name UTF-8)"},
    access="get of the whole row",
    split="salt",
    user_keyed=ROW_KEYED,
)

USERS = TableDef(
    name="JAMES_USERS",
    purpose="Accounts: password hash (scrypt, never plain text) and quota limits.",
    row_key="salt byte, user name UTF-8 (lower case)",
    families={
        "a": "account: pw (scrypt hash string), created; gen.names, gen.subs, gen.meta: "
             "change generations of the user's mailbox list, subscriptions and metadata "
             "(8-byte counters, increments only; read by NOTIFY, docs/decisions/0021); the "
             "row of the reserved name 'anyone' has no pw, only the generations every user's "
             "include (grants to anyone, server /shared metadata)",
        "l": "limits: storage, messages (8-byte counters; absent = unlimited); usage is the "
             "sum of the user's mailbox counters",
    },
    access="get by name at login and delivery; one bounded scan per salt bucket, merged by "
           "name, for `user list`; increment of a gen.* counter per "
           "CREATE/RENAME/DELETE/(UN)SUBSCRIBE; one multi-get of the gen.* columns per NOTIFY "
           "poll tick",
    split="salt",
    user_keyed=ROW_KEYED,
)

INTENTS = TableDef(
    name="JAMES_INTENTS",
    purpose="Intent records of multi-row operations (move, copy, expunge, flag changes that flip "
            "\\Seen), rolled forward on recovery; "
            "release records of content whose last reference went, deleted after a grace period.",
    row_key="16-byte mailbox UUID (the source; the target for a copy) + 16-byte intent id; "
            "release records: 15 NUL bytes and 0x01 (no UUID4) + 8-byte big-endian release "
            "time (s) + 16-byte content id; intents are only read by a mailbox prefix scan "
            "with i:op, release records only in their key range",
    families={"i": "i:op (JSON: kind, target, uids and allocated target UIDs), i:at (time; "
                   "moved to now by check-and-put when a roll forward leases it); "
                   "i:released (the content id) in release records"},
    access="put before the operation, deleted after it; prefix scan by mailbox on open and fsck; "
           "release records: batched puts on expunge, a bounded scan of those past the grace "
           "period on each release, periodic sweep and fsck",
    split="uniform",
)

IMPORTS = TableDef(
    name="JAMES_IMPORTS",
    purpose="Messages brought in by `mailadmin import`, so that a re-run skips what is there "
            "(docs/decisions/0006-idempotent-import.md).",
    row_key="16-byte mailbox UUID + 32-byte SHA-256 of the message bytes as stored",
    families={"i": "i:uid = the UID the message got (8-byte big-endian)"},
    access="one get per message imported, one put per message stored; prefix scan by mailbox "
           "in fsck (records of deleted mailboxes)",
    split="uniform",
)

CHANGES = TableDef(
    name="JAMES_CHANGES",
    purpose="Per mailbox: a log of flag changes and expunges, and a compact checkpoint of its "
            "UID list, so sessions learn of changes and SELECT opens a mailbox without reading "
            "every message row (docs/decisions/0009-change-log-and-checkpoints.md).",
    row_key="16-byte mailbox UUID (checkpoint row); 16-byte mailbox UUID + 8-byte big-endian "
            "change number (log entries, numbered by the mailbox's c:logseq)",
    families={
        "l": "l:e = log entry: state byte (P pending, C closed, S settled by a reader, X void) "
             "+ 8-byte time in ms + the UIDs touched (zlib of delta-encoded 8-byte integers)",
        "k": "checkpoint: k:meta (JSON: the marks it is valid at, counts, keywords), k:uids, "
             "k:unseen, k:deleted, k:flagged, k:answered, k:draft (zlib of delta-encoded UIDs), "
             "k:tagged (JSON: keyword -> base64 of the same), k:modseqs (zlib of one 8-byte "
             "MODSEQ per UID, in k:uids' order); written as one row put",
    },
    access="entries put by check-and-put before and after each flag change or expunge; a "
           "bounded scan of the entries since a session's mark on each refresh; one get of "
           "the checkpoint on a process's first SELECT; old entries deleted when a newer "
           "checkpoint is written",
    # No TTL on l: entries are trimmed by number behind the checkpoint, never by age, and an
    # old entry above the checkpoint is still needed (decision 0015).
    split="uniform",
)

OUTBOX = TableDef(
    name="JAMES_OUTBOX",
    purpose="The outgoing queue: mail the server sends itself (Sieve redirect and vacation, "
            "reject notices, bounces) until an SMTP relay accepts it "
            "(docs/decisions/0024-outgoing-queue.md).",
    row_key="16-byte entry id, time-ordered (UUIDv7), so a listing is oldest first",
    families={
        "q": "q:e (envelope JSON: from, to, reason, created, size, chunks; written once, with "
             "the last chunk), q:s (state JSON: pending/sent/refused recipients, attempts, next "
             "attempt, last error, lease; the entry exists once it is there, and changes only "
             "by check-and-put), q:t (8-byte start time, for removing a cut-off enqueue)",
        "c": "the message bytes in chunks, qualifiers 1, 2, 3, ... (decimal), each at most "
             "chunk_size bytes",
    },
    access="one put per chunk, the last with q:e and q:s; a bounded scan of q:e and q:s of "
           "every entry per drain (the queue is short); check-and-put of q:s per claim and "
           "per attempt's result; one get of the chunks per attempt; the row deleted when done",
    # One region: a short queue written at the rate of vacation replies and redirects, read
    # whole by each drain (decision 0024).  No MOB: an entry lives minutes, mostly dying in
    # the memstore before a flush, and a MOB file would keep its chunks until MOB compaction.
)

SIEVE_TRACKING = TableDef(
    name="JAMES_SIEVE_TRACKING",
    purpose="What Sieve at delivery remembers between messages: vacation responses sent "
            "(RFC 5230 4.2, one per sender and :handle per period) and duplicate ids seen "
            "(RFC 7352), each with its expiry, taken as check-and-put claims; and each user's "
            "last runtime errors (RFC 5228 2.10.6) "
            "(docs/decisions/0025-sieve-execution.md).",
    row_key="salt byte, user name UTF-8 (lower case), 0x00, kind (v: vacation, d: "
            "duplicate), 0x00, 16 bytes of SHA-256 of the tracked key (user, sender and "
            "handle; or handle and id); kind e (runtime error): 8-byte microseconds, 2-byte "
            "counter, 2 random bytes",
    families={
        "t": "t:x = expiry, 8-byte big-endian seconds since the epoch; a row past it counts "
             "as absent and is overwritten by the next claim or removed by a sweep; error "
             "rows also t:w (ms), t:s (script), t:l (line), t:m (message)",
    },
    access="delivery: one get per vacation or duplicate test; one get and check-and-put "
           "per claim; a put and a prefix scan per runtime error (the last 20 kept); a "
           "prefix scan per user to sweep expired rows, a full scan by fsck",
    split="salt",
    user_keyed=PREFIX_KEYED,
)

METADATA = TableDef(
    name="JAMES_METADATA",
    purpose="Annotations (RFC 5464 METADATA, METADATA-SERVER): a mailbox's shared entries, "
            "each user's private entries on it, the server's shared and per-user private "
            "entries (docs/decisions/0019-metadata.md).",
    row_key="16-byte mailbox UUID + 's' (shared entries) or + 'p' + user name UTF-8 (that "
            "user's private entries); server entries: 15 NUL bytes and 0x02 (no UUID4) "
            "instead of the mailbox UUID",
    families={
        "e": "one cell per entry: qualifier = entry name (lower case UTF-8, e.g. "
             "/private/comment), value = the entry's octets",
        "c": "c:seq, incremented with every change to the row's entries (what NOTIFY's "
             "MailboxMetadataChange polls)",
    },
    access="GETMETADATA/SETMETADATA: one multi-get of the two rows a user sees on a mailbox, "
           "one row mutation per row changed; DELETE: one prefix scan of the mailbox UUID; "
           "the per-user size limit: one multi-get of the user's rows on their mailboxes",
    split="uniform",
)

URLAUTH_KEYS = TableDef(
    name="JAMES_URLAUTH_KEYS",
    purpose="URLAUTH mailbox access keys (RFC 4467 3.2, 3.4.1), one per user and mailbox; a URL is "
            "honoured only while the key it was made with is here "
            "(docs/decisions/0020-urlauth-keys.md).",
    row_key="salt byte, user name UTF-8, NUL, 16-byte mailbox UUID",
    families={"k": "k:internal = the INTERNAL mechanism's secret (32 random bytes; made by "
                   "check-and-put on first GENURLAUTH, replaced by RESETKEY mailbox)"},
    access="one get per GENURLAUTH, URLFETCH and URLAUTH URL in CATENATE; prefix scan by user "
           "and row deletes for RESETKEY without a mailbox and for user deletion",
    split="salt",
    user_keyed=PREFIX_KEYED,
)

SIEVE_SCRIPTS = TableDef(
    name="JAMES_SIEVE_SCRIPTS",
    purpose="Each user's Sieve scripts (RFC 5228), uploaded over ManageSieve (RFC 5804) or "
            "`mailadmin sieve put`, and which one is active "
            "(docs/decisions/0023-sieve-scripts-storage.md).",
    row_key="salt byte, user name UTF-8 (lower case)",
    families={
        "d": "d:dir = the directory (JSON: script name -> [text cell id, size in octets]; the "
             "active name or null); changed only by check-and-put, one per change of the "
             "scripts or of the active one, so at most one script is active and it exists",
        "s": "script texts (UTF-8), qualifier = a cell id (12 hex digits of ms, 16 random): "
             "written before the directory names it, deleted after the directory stops naming "
             "it (a replaced or deleted script)",
    },
    access="delivery: a get of d:dir and a get of the active script's text cell; ManageSieve "
           "and mailadmin: the same, plus a put of a new text and a check-and-put of d:dir per "
           "change",
    split="salt",
    user_keyed=ROW_KEYED,
)

ACL_INDEX = TableDef(
    name="JAMES_ACL_INDEX",
    purpose="Who was granted rights on which mailbox (RFC 4314), so that 'the mailboxes of "
            "others USER may see' is one prefix scan (docs/decisions/0018-acl.md).  The "
            "mailbox row's ACL cells are the truth; a row here is a candidate only.",
    row_key="salt byte (of the grantee), grantee UTF-8 (a user name or 'anyone', '-' "
            "before either for negative rights), NUL, 16-byte mailbox UUID",
    families={"g": "g:r = b'1' (the rights themselves are read from the mailbox row)"},
    access="put before a grant's mailbox cell, deleted after a revocation's; prefix scan by "
           "grantee (and 'anyone') for LIST and NAMESPACE listings of shared mailboxes",
    split="salt",
    user_keyed=PREFIX_KEYED,
)

TEXT_INDEX = TableDef(
    name="JAMES_TEXT_INDEX",
    purpose="Trigram postings of each message's searchable text, so SEARCH BODY/TEXT/SUBJECT/"
            "FROM/TO/CC/BCC/HEADER look only at the messages that may match "
            "(mailstore/backends/postings.py; docs/decisions/0026-text-index.md).  Derived "
            "data: `mailadmin index rebuild` rewrites it.  Unused by the embedded store, "
            "which keeps the same index in SQLite FTS5.",
    row_key="16-byte mailbox UUID + NUL (the markers row); 16-byte mailbox UUID + 1 byte "
            "document (1 subject, 2 from, 3 to, 4 cc, 5 bcc, 6 head, 7 body) + a trigram of "
            "its case-folded text, UTF-8 (posting rows)",
    families={"p": "p:<4-byte UID>: in a posting row, b'\\x01' (the message's document holds "
                   "the trigram); p:B<4-byte first UID><4-byte CRC-32>: in a posting row, "
                   "the 4-byte UIDs of a background indexer's batch that hold it; in the "
                   "markers row, b'1' indexed or b'0' not indexable"},
    access="one batch of row puts per message or batch of messages indexed (one cell per "
           "distinct trigram), the markers last; one multi-get of a needle's trigram rows "
           "and one get of the markers row per text key searched; a prefix delete per "
           "mailbox deleted or rebuilt",
    split="uniform",
)

TEXT_QUEUE = TableDef(
    name="JAMES_TEXT_QUEUE",
    purpose="Messages waiting for the background text indexer (`[store] text_index = "
            "background`, mailstore/indexer.py; docs/decisions/0026-text-index.md).  Written "
            "in the append's own counting call, so it costs no round trip; a message not yet "
            "indexed is scanned by SEARCH meanwhile.",
    row_key="16-byte mailbox UUID",
    families={"q": "q:<4-byte UID>: a counter (1), one per message to index; deleted once "
                   "the message is indexed or gone.  A row without cells is no row: the "
                   "indexer's scan of the table finds only mailboxes with work"},
    access="one increment per append or delivery (in its counting increment_rows); the "
           "indexer scans the table (few rows: only mailboxes with work), reads a row, and "
           "deletes the cells it indexed",
    split="uniform",
)

TABLES: tuple[TableDef, ...] = (MAILBOXES, MAILBOX_INDEX, MESSAGES, CONTENT, SUBSCRIPTIONS,
                                USERS, INTENTS, IMPORTS, CHANGES, OUTBOX, METADATA,
                                URLAUTH_KEYS, SIEVE_SCRIPTS, ACL_INDEX, SIEVE_TRACKING,
                                TEXT_INDEX, TEXT_QUEUE)


SPLIT_ALGORITHMS = {"uniform": "UniformSplit", "hex": "HexStringSplit"}

THRIFT_CANNOT = ("Thrift1 createTable carries no split keys and no MOB settings: the tables "
                 "were created with one region each (and the content chunks as ordinary "
                 "cells).  For the full layout create them with the HBase shell instead "
                 "(`mailadmin init-schema --print > schema.hbase; hbase shell -n schema.hbase`) "
                 "or, while they are still empty, apply docs/decisions/0015's `split`/`alter` "
                 "commands.")


def create_schema(backend: Backend, layout: Layout | None = None) -> list[str]:
    """Create every missing table; return the names created (empty when all existed).

    Over HBase this is Thrift1's ``createTable``: the family options of ``layout`` apply, its
    pre-splits and MOB do not (see THRIFT_CANNOT)."""
    layout = layout or Layout()
    return [t.name for t in TABLES
            if backend.create_table(t.name, t.family_options(layout),
                                    new_keys_descend=t.new_keys_descend,
                                    mob=(t.mob_family, layout.mob_threshold)
                                    if t.mob_family else None)]


_SHELL_NAMES = {"max_versions": "VERSIONS", "compression": "COMPRESSION",
                "bloom_filter_type": "BLOOMFILTER", "block_cache_enabled": "BLOCKCACHE",
                "in_memory": "IN_MEMORY", "time_to_live": "TTL"}


def _shell_value(value: object) -> str:
    if isinstance(value, bool):
        return f"'{str(value).lower()}'"
    if isinstance(value, int):
        return str(value)
    return f"'{value}'"


def _shell_create(name: str, table: TableDef, layout: Layout) -> str:
    specs = []
    for fam, opts in table.family_options(layout).items():
        attrs = [f"NAME => '{fam}'"] + [f"{_SHELL_NAMES[k]} => {_shell_value(v)}"
                                        for k, v in opts.items()]
        if layout.mob and fam == table.mob_family:
            attrs += ["IS_MOB => true", f"MOB_THRESHOLD => {layout.mob_threshold}"]
        specs.append("{" + ", ".join(attrs) + "}")
    regions = table.region_count(layout)
    if table.split == "salt" and regions > 1:
        # One region per salt bucket; the split keys are binary, hence double-quoted (the
        # shell is JRuby: "\x01" is the byte 0x01, '\x01' would be four characters).
        points = ", ".join('"' + "".join(f"\\x{b:02x}" for b in key) + '"'
                           for key in layout.user_keys.split_keys())
        specs.append(f"{{SPLITS => [{points}]}}")
    elif regions > 1:     # the shell refuses NUMREGIONS below 2
        specs.append(f"{{NUMREGIONS => {regions}, "
                     f"SPLITALGO => '{SPLIT_ALGORITHMS[table.split]}'}}")
    return f"create '{name}', " + ", ".join(specs)


def ddl(prefix: str = "", layout: Layout | None = None) -> str:
    """The HBase shell commands that create the schema (as ``hbase-schema/schema.hbase``)."""
    layout = layout or Layout()
    out = ["# Generated from mailstore/schema.py by `make schema`; a test checks they agree.",
           "# Run with: hbase shell -n hbase-schema/schema.hbase",
           f"# Layout ([hbase] settings; docs/decisions/0015-hbase-region-layout.md): "
           f"regions_per_table = {layout.regions}, compression = {layout.compression}, "
           f"mob = {'yes' if layout.mob else 'no'}"
           + (f" (threshold {layout.mob_threshold} bytes, chunk_size {layout.chunk_size})"
              if layout.mob else "") + f", user_buckets = {layout.user_buckets}",
           "# Then run `mailadmin init-schema` once: it records the user key format (salted,",
           f"# {layout.user_buckets} buckets) in the new store (docs/decisions/0027).", ""]
    for t in TABLES:
        name = f"{prefix}_{t.name}" if prefix else t.name
        out.append(f"# {name}: {t.purpose}")
        out.append(f"#   row key: {t.row_key}")
        for fam, doc in t.families.items():
            out.append(f"#   {fam}: {doc}")
        out.append(f"#   access: {t.access}")
        out.append(_shell_create(name, t, layout))
        out.append("")
    return "\n".join(out)
