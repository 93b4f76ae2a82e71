"""mailadmin init-schema, migrate-keys, fsck, stats and hbase scan: the store as a whole."""

from __future__ import annotations

import json
import sys
from collections import Counter

from .. import keyformat
from ..keys import MAX_USER_BUCKETS, UserKeys
from ..schema import TABLES, THRIFT_CANNOT, Layout, create_schema, ddl
from .output import EXIT_OK, EXIT_PROBLEMS, UsageError, emit, fields, size
from .progress import Progress


def register(sub, common) -> None:
    init = sub.add_parser("init-schema", parents=[common],
                          help="create the tables (idempotent)")
    init.add_argument("--print", action="store_true",
                      help="print the HBase shell DDL instead of running it")
    init.set_defaults(func=init_schema)

    migrate = sub.add_parser(
        "migrate-keys", parents=[common],
        help="convert the user-name-keyed rows to salted keys (servers stopped)",
        description="Copies every row of the tables keyed by user name to its salted key, "
        "records the new format in the store (the commit point), then removes the old rows "
        "(docs/decisions/0027-salted-user-keys.md).  Stop every imapserver first: a server "
        "still running keeps the old keys.  Safe to run again after an interruption.")
    migrate.add_argument("--buckets", type=int,
                         help=f"salt buckets, 1 to {MAX_USER_BUCKETS} "
                              "(default: [hbase] user_buckets)")
    migrate.add_argument("--no-progress", action="store_true",
                         help="no progress lines on standard error")
    migrate.set_defaults(func=migrate_keys)

    fsck = sub.add_parser("fsck", parents=[common], help="check (and repair) the store",
                          description="Checks counters against rows, UID counters against "
                          "the highest UID, content reference counts against references, "
                          "orphaned content and unfinished moves.  Exit status 1 when "
                          "something was wrong (even if it was repaired).")
    fsck.add_argument("user", nargs="?", help="check only this user's mailboxes")
    fsck.add_argument("--repair", action="store_true", help="repair what is found")
    fsck.set_defaults(func=run_fsck)

    stats = sub.add_parser("stats", parents=[common],
                           help="users, mailboxes, messages, bytes, bytes saved by sharing")
    stats.set_defaults(func=run_stats)

    hbase = sub.add_parser("hbase", parents=[common], help="raw table access")
    hsub = hbase.add_subparsers(dest="hbase_command", metavar="COMMAND", required=True)
    scan = hsub.add_parser("scan", parents=[common], help="print raw rows like the HBase shell")
    scan.add_argument("table")
    scan.add_argument("--prefix", default="", help="row key prefix, hex")
    scan.add_argument("--limit", type=int, default=100)
    scan.set_defaults(func=hbase_scan)


def init_schema(ctx) -> int:
    cfg = ctx.cfg
    layout = Layout.from_config(cfg)
    if ctx.args.print:
        print(ddl(cfg["hbase"]["table_prefix"] if cfg["store"]["backend"] == "hbase" else "",
                  layout))
        return EXIT_OK
    backend = ctx.raw_backend()
    try:
        created = create_schema(backend, layout)
        # Record the user key format now, at creation (a new store: the configured buckets).
        user_keys = keyformat.settle(backend, layout.user_keys)
    finally:
        backend.close()
    # Over Thrift1 the tables get the family options but not the splits nor MOB: say so
    # whenever that left a table short of its layout.
    short = [t.name for t in TABLES if t.name in created and cfg["store"]["backend"] == "hbase"
             and (t.region_count(layout) > 1 or (layout.mob and t.mob_family))]
    notes = [THRIFT_CANNOT] if short else []
    if user_keys != layout.user_keys:
        notes.append(f"the store's user keys are {user_keys.describe()}: [hbase] user_buckets "
                     f"= {layout.user_buckets} applies to new stores only; `mailadmin "
                     f"migrate-keys --buckets {layout.user_buckets}` converts this one "
                     "(servers stopped)")
    emit(ctx.args, {"created": created, "tables": [t.name for t in TABLES],
                    "user_keys": user_keys.marker().decode(), "notes": notes},
         lambda: "\n".join([f"{t.name}: {'created' if t.name in created else 'exists'}"
                            for t in TABLES] + [f"user keys: {user_keys.describe()}"]
                           + [f"note: {n}" for n in notes]))
    return EXIT_OK


def migrate_keys(ctx) -> int:
    args = ctx.args
    buckets = args.buckets if args.buckets is not None else ctx.cfg["hbase"]["user_buckets"]
    if not 1 <= buckets <= MAX_USER_BUCKETS:
        raise UsageError(f"--buckets must be 1 to {MAX_USER_BUCKETS}: {buckets}")
    target = UserKeys(buckets)
    shown: list = []    # the progress line of the table being worked on

    def progress(phase: str, table: str, rows: int) -> None:
        label = f"{phase} {table}"
        if not shown or shown[0] != label:
            if shown:
                shown[1].close()
            shown[:] = [label, Progress(label, noun="rows", enabled=not args.no_progress)]
        shown[1].update(rows)
    backend = ctx.raw_backend()
    try:
        done = keyformat.migrate(backend, target, progress)
        backend.sync()
    finally:
        if shown:
            shown[1].close()
        backend.close()

    def render() -> str:
        out = [f"user keys: {done['from']} -> {done['to']}"]
        out += [f"{name}: {done['copied'].get(name, 0)} copied, "
                f"{done['deleted'].get(name, 0)} old removed"
                for name in sorted(set(done["copied"]) | set(done["deleted"]))]
        return "\n".join(out)
    emit(args, done, render)
    return EXIT_OK


def run_fsck(ctx) -> int:
    from ..fsck import Fsck
    args = ctx.args
    tty = sys.stderr.isatty()

    def progress(text: str) -> None:
        if tty and not args.json:
            sys.stderr.write("\r" + text[:78].ljust(78))
            sys.stderr.flush()
    user = ctx.user(args.user) if args.user else None
    report = Fsck(ctx.store, repair=args.repair, progress=progress).run(user)
    if tty and not args.json:
        sys.stderr.write("\r" + " " * 78 + "\r")
    problems = [p.as_dict() for p in report.problems]
    data = {"ok": report.ok, "repair": args.repair, "checked": dict(report.checked),
            "problems": problems}

    def render() -> str:
        out = []
        for p in report.problems:
            state = "repaired" if p.repaired else "found"
            out.append(f"{state}: {p.kind}: {p.where}: {p.detail}")
        checked = ", ".join(f"{n} {what}" for what, n in sorted(report.checked.items()))
        kinds = Counter(p.kind for p in report.problems)
        summary = f"checked {checked or 'nothing'}; {len(report.problems)} problem(s)"
        if kinds:
            summary += " (" + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())) + ")"
        out.append(summary)
        unrepaired = [p for p in report.problems if not p.repaired]
        if unrepaired and not args.repair:
            out.append("run again with --repair to repair them")
        elif unrepaired:
            out.append(f"{len(unrepaired)} problem(s) could not be repaired")
        return "\n".join(out)
    emit(args, data, render)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def run_stats(ctx) -> int:
    data = ctx.store.stats()
    emit(ctx.args, data, lambda: fields([
        ("users", str(data["users"])), ("mailboxes", str(data["mailboxes"])),
        ("messages", str(data["messages"])),
        ("bytes stored", f"{size(data['message_bytes'])} in messages, "
                         f"{size(data['content_bytes'])} of content in {data['contents']} "
                         "row(s)"),
        ("saved by sharing", size(data["bytes_saved"]))]))
    return EXIT_OK


def hbase_scan(ctx) -> int:
    args = ctx.args
    if args.table not in {t.name for t in TABLES}:
        raise UsageError(f"no such table: {args.table} "
                         f"(tables: {', '.join(t.name for t in TABLES)})")
    try:
        prefix = bytes.fromhex(args.prefix)
    except ValueError:
        raise UsageError(f"--prefix is not hex: {args.prefix}") from None
    if args.limit < 1:
        raise UsageError(f"--limit must be at least 1: {args.limit}")
    backend = ctx.raw_backend()
    try:
        rows = backend.table(args.table)
        found = (rows.scan(prefix=prefix, limit=args.limit) if prefix
                 else rows.scan(start=b"", stop=b"\xff" * 64, limit=args.limit))
        count = 0
        out = []
        if not args.json:
            print(f"{'ROW':<30} COLUMN+CELL")
        for key, cells in found:
            count += 1
            for col in sorted(cells):
                if args.json:
                    out.append({"row": key.hex(), "column": col.decode(errors="replace"),
                                "value": cells[col].hex()})
                else:
                    print(f" {shell_bytes(key)} column={shell_bytes(col)}, "
                          f"value={shell_bytes(cells[col][:200])}"
                          f"{'...' if len(cells[col]) > 200 else ''}")
        if args.json:
            print(json.dumps(out))
        else:
            print(f"{count} row(s)")
    finally:
        backend.close()
    return EXIT_OK


def shell_bytes(data: bytes) -> str:
    """Bytes the way the HBase shell prints them: printable ASCII as is, the rest \\xNN."""
    return "".join(chr(b) if 32 <= b < 127 and b != 92 else f"\\x{b:02X}" for b in data)

