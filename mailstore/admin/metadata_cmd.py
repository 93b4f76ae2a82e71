"""mailadmin metadata ...: the server's shared annotations (RFC 5464 METADATA-SERVER), which
every user reads and only the administrator writes (docs/metadata.md)."""

from __future__ import annotations

from ..metadata import Policy, entry_name
from .output import EXIT_OK, Column, emit, table


def register(sub, common) -> None:
    meta = sub.add_parser("metadata", parents=[common],
                          help="server annotations users read (RFC 5464)")
    msub = meta.add_subparsers(dest="metadata_command", metavar="COMMAND", required=True)
    show = msub.add_parser("show", parents=[common],
                           help="the server's /shared entries (those under ENTRY)")
    show.add_argument("entry", nargs="?", default="/shared")
    show.set_defaults(func=metadata_show)
    put = msub.add_parser("set", parents=[common], help="set a server /shared entry")
    put.add_argument("entry", help="e.g. /shared/comment (/shared/admin is [imap] "
                                   "metadata_admin)")
    put.add_argument("value")
    put.set_defaults(func=metadata_set)
    unset = msub.add_parser("unset", parents=[common], help="remove a server /shared entry")
    unset.add_argument("entry")
    unset.set_defaults(func=metadata_unset)


def metadata_show(ctx) -> int:
    policy = Policy(admin=ctx.cfg["imap"]["metadata_admin"])
    _, found = ctx.store.get_metadata("", None, [entry_name(ctx.args.entry)], None, policy)
    rows = [{"entry": name, "value": value.decode("utf-8", "replace")}
            for name, value in found if value is not None]
    emit(ctx.args, {r["entry"]: r["value"] for r in rows},
         lambda: table(rows, [Column("entry"), Column("value")]))
    return EXIT_OK


def metadata_set(ctx) -> int:
    ctx.store.annotations.set_server_shared(ctx.args.entry, ctx.args.value.encode())
    ctx.store.note_server_metadata_change()  # RFC 5465 5.8 for running NOTIFY sessions
    return metadata_show(ctx)


def metadata_unset(ctx) -> int:
    ctx.store.annotations.set_server_shared(ctx.args.entry, None)
    ctx.store.note_server_metadata_change()
    return metadata_show(ctx)
