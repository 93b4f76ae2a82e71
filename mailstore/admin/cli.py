"""mailadmin: provisioning and repair from scripts, through the mail store's public API.

Exit codes: 0 ok, 1 problems found (fsck) or the operation failed, 2 bad usage.  Errors name the
thing that was wrong (``no such user: bob``).  Tables by default, ``--json`` for scripts.
"""

from __future__ import annotations

import argparse
import json
import sys

from .. import config as configmod
from ..backends import open_backend
from ..errors import MailStoreError
from ..schema import TABLES, create_schema, ddl
from ..store import MailStore

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="configuration file (default: built-in defaults)")
    common.add_argument("--data-dir", help="directory of the embedded store")
    common.add_argument("--backend", choices=["embedded", "hbase"])
    common.add_argument("--hbase-host")
    common.add_argument("--hbase-port", type=int)
    common.add_argument("--json", action="store_true", help="machine-readable output")

    parser = argparse.ArgumentParser(prog="mailadmin", parents=[common],
                                     description="Administer the HBase mail store.")
    sub = parser.add_subparsers(dest="command", required=True)

    init = sub.add_parser("init-schema", parents=[common], help="create the tables")
    init.add_argument("--print", action="store_true", help="print the HBase shell DDL instead")

    user = sub.add_parser("user", parents=[common], help="manage users")
    usub = user.add_subparsers(dest="user_command", required=True)
    add = usub.add_parser("add", parents=[common], help="create a user with INBOX and folders")
    add.add_argument("name")
    add.add_argument("--password-stdin", action="store_true",
                     help="read the password from the first line of standard input")
    usub.add_parser("list", parents=[common], help="list users with usage")

    fsck = sub.add_parser("fsck", parents=[common], help="check (and repair) the store")
    fsck.add_argument("user", nargs="?")
    fsck.add_argument("--repair", action="store_true")

    hbase = sub.add_parser("hbase", parents=[common], help="raw table access")
    hsub = hbase.add_subparsers(dest="hbase_command", required=True)
    scan = hsub.add_parser("scan", parents=[common], help="print raw rows like the HBase shell")
    scan.add_argument("table")
    scan.add_argument("--prefix", default="", help="row key prefix, hex")
    scan.add_argument("--limit", type=int, default=100)
    return parser


def load_config(args: argparse.Namespace) -> configmod.Config:
    overrides = {"store": {"data_dir": args.data_dir, "backend": args.backend},
                 "hbase": {"host": args.hbase_host, "port": args.hbase_port}}
    return configmod.load(args.config, overrides)


def open_store(cfg: configmod.Config) -> MailStore:
    name, options = cfg.backend_options()
    return MailStore(open_backend(name, options), **cfg.store_options())


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        cfg = load_config(args)
        return COMMANDS[args.command](args, cfg)
    except (configmod.ConfigError, UsageError) as exc:
        print(f"mailadmin: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except MailStoreError as exc:
        print(f"mailadmin: {exc}", file=sys.stderr)
        return EXIT_PROBLEMS


def cmd_init_schema(args, cfg) -> int:
    if args.print:
        print(ddl(cfg["hbase"]["table_prefix"] if cfg["store"]["backend"] == "hbase" else ""))
        return EXIT_OK
    name, options = cfg.backend_options()
    backend = open_backend(name, options)
    try:
        created = create_schema(backend)
    finally:
        backend.close()
    if args.json:
        print(json.dumps({"created": created, "tables": [t.name for t in TABLES]}))
    else:
        for table in TABLES:
            print(f"{table.name}: {'created' if table.name in created else 'exists'}")
    return EXIT_OK


def cmd_user(args, cfg) -> int:
    store = open_store(cfg)
    try:
        if args.user_command == "add":
            password = None
            if args.password_stdin:
                password = sys.stdin.readline().rstrip("\r\n")
                if not password:
                    raise UsageError("empty password on standard input")
            user = store.create_user(args.name, password)
            print(json.dumps({"created": user}) if args.json else f"created user {user}")
        elif args.user_command == "list":
            users = store.list_users()
            rows = []
            for u in users:
                used_bytes, used_messages = store.usage(u.name)
                rows.append({"user": u.name, "messages": used_messages, "bytes": used_bytes,
                             "storage_limit": u.storage_limit, "message_limit": u.message_limit})
            if args.json:
                print(json.dumps(rows))
            else:
                print_table(rows, ["user", "messages", "bytes"])
        return EXIT_OK
    finally:
        store.close()


def cmd_fsck(args, cfg) -> int:
    from ..fsck import Fsck
    store = open_store(cfg)
    progress = (lambda text: print(text, file=sys.stderr)) if not args.json else None
    try:
        report = Fsck(store, repair=args.repair, progress=progress).run(args.user)
    finally:
        store.close()
    if args.json:
        print(json.dumps({"ok": report.ok, "checked": dict(report.checked),
                          "problems": [p.as_dict() for p in report.problems]}))
    else:
        for p in report.problems:
            state = "repaired" if p.repaired else "found"
            print(f"{state}: {p.kind}: {p.where}: {p.detail}")
        checked = ", ".join(f"{n} {what}" for what, n in sorted(report.checked.items()))
        print(f"checked {checked or 'nothing'}; {len(report.problems)} problem(s)")
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def cmd_hbase(args, cfg) -> int:
    if args.table not in {t.name for t in TABLES}:
        raise UsageError(f"no such table: {args.table} "
                         f"(tables: {', '.join(t.name for t in TABLES)})")
    try:
        prefix = bytes.fromhex(args.prefix)
    except ValueError:
        raise UsageError(f"--prefix is not hex: {args.prefix}") from None
    name, options = cfg.backend_options()
    backend = open_backend(name, options)
    try:
        table = backend.table(args.table)
        rows = (table.scan(prefix=prefix, limit=args.limit) if prefix
                else table.scan(start=b"", stop=b"\xff" * 64, limit=args.limit))
        count = 0
        out = []
        if not args.json:
            print(f"{'ROW':<30} COLUMN+CELL")
        for key, cells in rows:
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


def print_table(rows: list[dict], columns: list[str]) -> None:
    widths = {c: max([len(c)] + [len(str(r[c])) for r in rows]) for c in columns}
    print("  ".join(c.upper().ljust(widths[c]) for c in columns))
    for r in rows:
        print("  ".join(str(r[c]).ljust(widths[c]) for c in columns))


COMMANDS = {"init-schema": cmd_init_schema, "user": cmd_user, "fsck": cmd_fsck,
            "hbase": cmd_hbase}


if __name__ == "__main__":
    sys.exit(main())
