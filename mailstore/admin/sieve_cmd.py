"""mailadmin sieve ...: a user's Sieve scripts (RFC 5228), as ManageSieve (RFC 5804) manages
them, through ``store.sieve_scripts`` (mailstore/sievescripts.py; the same per-user limits).

``put`` validates the script first (mailstore/sieve/validate.py): one that does not parse is
not stored, and the errors name their lines.
"""

from __future__ import annotations

import sys

from ..sieve.validate import validate
from .output import EXIT_OK, Column, Failure, emit, table


def register(sub, common) -> None:
    sieve = sub.add_parser("sieve", parents=[common],
                           help="a user's Sieve scripts (server-side filters)")
    ssub = sieve.add_subparsers(dest="sieve_command", metavar="COMMAND", required=True)
    lst = ssub.add_parser("list", parents=[common], help="the user's scripts; which is active")
    lst.add_argument("user")
    lst.set_defaults(func=sieve_list)
    get = ssub.add_parser("get", parents=[common], help="print a script (or write it to FILE)")
    get.add_argument("user")
    get.add_argument("name")
    get.add_argument("file", nargs="?", default="-", help="where to write it (- : stdout)")
    get.set_defaults(func=sieve_get)
    put = ssub.add_parser("put", parents=[common],
                          help="store a script from FILE (or stdin), after checking it parses")
    put.add_argument("user")
    put.add_argument("name")
    put.add_argument("file", nargs="?", default="-", help="the script (- : stdin)")
    put.set_defaults(func=sieve_put)
    act = ssub.add_parser("activate", parents=[common],
                          help="make a script the one that runs at delivery")
    act.add_argument("user")
    act.add_argument("name")
    act.set_defaults(func=sieve_activate)
    deact = ssub.add_parser("deactivate", parents=[common],
                            help="run no script at delivery (the scripts stay)")
    deact.add_argument("user")
    deact.set_defaults(func=sieve_deactivate)
    delete = ssub.add_parser("delete", aliases=["del"], parents=[common],
                             help="delete a script (not the active one)")
    delete.add_argument("user")
    delete.add_argument("name")
    delete.set_defaults(func=sieve_delete)
    log = ssub.add_parser("log", parents=[common],
                          help="the user's last Sieve runtime errors (oldest first)")
    log.add_argument("user")
    log.add_argument("--clear", action="store_true", help="then forget them")
    log.set_defaults(func=sieve_log)


def sieve_list(ctx) -> int:
    user = ctx.user(ctx.args.user)
    rows = [{"name": name, "active": active}
            for name, active in ctx.store.sieve_scripts.list(user)]
    emit(ctx.args, rows, lambda: table(rows, [Column("name"), Column("active")])
         + f"\n{len(rows)} script(s)")
    return EXIT_OK


def sieve_get(ctx) -> int:
    args = ctx.args
    user = ctx.user(args.user)
    text = ctx.store.sieve_scripts.get(user, args.name)
    if text is None:
        raise Failure(f"no such script: {args.name} (user {user})")
    if args.file == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return EXIT_OK
    try:
        with open(args.file, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    except OSError as exc:
        raise Failure(f"cannot write {args.file}: {exc.strerror}") from None
    emit(args, {"user": user, "script": args.name, "file": args.file},
         lambda: f"wrote script {args.name} of {user} to {args.file}")
    return EXIT_OK


def _read(path: str) -> str:
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except OSError as exc:
        raise Failure(f"cannot read {path}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise Failure(f"{'standard input' if path == '-' else path} is not UTF-8 "
                      "(RFC 5228 2.2: scripts are UTF-8)") from None


def sieve_put(ctx) -> int:
    args = ctx.args
    user = ctx.user(args.user)
    text = _read(args.file)
    errors = validate(text)
    if errors:
        raise Failure(f"script {args.name} not stored: " + "; ".join(errors))
    ctx.store.sieve_scripts.put(user, args.name, text)
    octets = len(text.encode("utf-8"))
    emit(args, {"user": user, "script": args.name, "octets": octets},
         lambda: f"stored script {args.name} of {user} ({octets} octets)")
    return EXIT_OK


def sieve_activate(ctx) -> int:
    args = ctx.args
    user = ctx.user(args.user)
    ctx.store.sieve_scripts.activate(user, args.name)
    emit(args, {"user": user, "active": args.name},
         lambda: f"script {args.name} of {user} is active")
    return EXIT_OK


def sieve_deactivate(ctx) -> int:
    user = ctx.user(ctx.args.user)
    ctx.store.sieve_scripts.activate(user, None)
    emit(ctx.args, {"user": user, "active": None}, lambda: f"no script of {user} is active")
    return EXIT_OK


def sieve_log(ctx) -> int:
    """RFC 5228 2.10.6: why a script failed at delivery (the message was kept in INBOX);
    the same entries the user reads with GETMETADATA (docs/sieve.md, "Limits and errors")."""
    user = ctx.user(ctx.args.user)
    found = ctx.store.sieve_errors.entries(user)
    if ctx.args.clear:
        ctx.store.sieve_errors.clear(user)
    rows = [e.as_dict() for e in found]
    emit(ctx.args, rows, lambda: "\n".join(e.text() for e in found)
         if found else f"no Sieve errors recorded for {user}")
    return EXIT_OK


def sieve_delete(ctx) -> int:
    args = ctx.args
    user = ctx.user(args.user)
    ctx.store.sieve_scripts.delete(user, args.name)
    emit(args, {"user": user, "deleted": args.name},
         lambda: f"deleted script {args.name} of {user}")
    return EXIT_OK
