"""mailadmin user ... and quota ...: accounts, passwords, limits."""

from __future__ import annotations

import getpass
import sys

from .output import (
    EXIT_OK,
    Column,
    UsageError,
    confirm,
    emit,
    fields,
    limit,
    parse_count,
    parse_size,
    size,
    size_limit,
    table,
)

KEEP = object()
"""Default of quota set's options: leave that limit unchanged."""


def register(sub, common) -> None:
    user = sub.add_parser("user", parents=[common], help="manage users")
    usub = user.add_subparsers(dest="user_command", metavar="COMMAND", required=True)
    add = usub.add_parser("add", parents=[common], help="create a user with INBOX and folders")
    add.add_argument("name")
    add.add_argument("--password-stdin", action="store_true",
                     help="read the password from the first line of standard input")
    add.add_argument("--no-folders", action="store_true",
                     help="create INBOX only, not Drafts, Sent, Trash, Junk and Archive")
    add.set_defaults(func=user_add)
    passwd = usub.add_parser("passwd", parents=[common], help="set a user's password")
    passwd.add_argument("name")
    passwd.add_argument("--password-stdin", action="store_true",
                        help="read the password from the first line of standard input")
    passwd.set_defaults(func=user_passwd)
    delete = usub.add_parser("del", aliases=["delete"], parents=[common],
                             help="delete a user with all their mailboxes and messages")
    delete.add_argument("name")
    delete.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    delete.set_defaults(func=user_del)
    usub.add_parser("list", parents=[common],
                    help="list users with message count and size").set_defaults(func=user_list)
    show = usub.add_parser("show", parents=[common], help="one user's usage and limits")
    show.add_argument("name")
    show.set_defaults(func=user_show)

    quota = sub.add_parser("quota", parents=[common], help="storage and message limits")
    qsub = quota.add_subparsers(dest="quota_command", metavar="COMMAND", required=True)
    qset = qsub.add_parser("set", parents=[common], help="set a user's limits",
                           description="Sizes take K, M, G, T (binary units); 'unlimited' "
                           "removes a limit.  A limit not given is left as it is.")
    qset.add_argument("user")
    qset.add_argument("--storage", metavar="BYTES", type=parse_size,
                      help="bytes of messages, e.g. 500M, 2G, unlimited")
    qset.add_argument("--messages", metavar="N", type=parse_count,
                      help="number of messages, or unlimited")
    qset.set_defaults(func=quota_set, storage=KEEP, messages=KEEP)
    qshow = qsub.add_parser("show", aliases=["get"], parents=[common],
                            help="a user's usage against their limits")
    qshow.add_argument("user")
    qshow.set_defaults(func=quota_show)


def read_password(from_stdin: bool, what: str) -> str:
    if from_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise UsageError("empty password on standard input")
        return password
    if not sys.stdin.isatty():
        raise UsageError(f"no terminal to ask {what}'s password on: use --password-stdin")
    first = getpass.getpass(f"new password for {what}: ")
    if not first:
        raise UsageError("empty password")
    if getpass.getpass("again: ") != first:
        raise UsageError("the passwords differ; nothing was changed")
    return first


def user_add(ctx) -> int:
    args = ctx.args
    password = read_password(True, args.name) if args.password_stdin else None
    user = ctx.store.create_user(args.name, password, default_folders=not args.no_folders)
    emit(args, {"created": user}, lambda: f"created user {user}")
    return EXIT_OK


def user_passwd(ctx) -> int:
    user = ctx.user(ctx.args.name)
    ctx.store.set_password(user, read_password(ctx.args.password_stdin, user))
    emit(ctx.args, {"user": user, "password": "changed"}, lambda: f"password of {user} changed")
    return EXIT_OK


def usage_row(store, account) -> dict:
    boxes = store.list_mailboxes(account.name)
    return {"user": account.name, "mailboxes": len(boxes),
            "messages": sum(b.messages for b in boxes), "bytes": sum(b.size for b in boxes),
            "storage_limit": account.storage_limit, "message_limit": account.message_limit}


def user_del(ctx) -> int:
    store = ctx.store
    account = store.user(ctx.args.name)
    row = usage_row(store, account)
    confirm(f"delete user {account.name} with {row['mailboxes']} mailbox(es) and "
            f"{row['messages']} message(s) ({size(row['bytes'])})", ctx.args.yes)
    store.delete_user(account.name)
    emit(ctx.args, {"deleted": account.name, "mailboxes": row["mailboxes"],
                    "messages": row["messages"], "bytes": row["bytes"]},
         lambda: f"deleted user {account.name}: {row['mailboxes']} mailbox(es), "
                 f"{row['messages']} message(s)")
    return EXIT_OK


USER_COLUMNS = [Column("user"), Column("mailboxes"), Column("messages"),
                Column("bytes", "SIZE", size), Column("storage_limit", "STORAGE LIMIT",
                                                      size_limit, right=True),
                Column("message_limit", "MESSAGE LIMIT", limit, right=True)]


def user_list(ctx) -> int:
    store = ctx.store
    rows = [usage_row(store, account) for account in store.list_users()]
    emit(ctx.args, rows, lambda: table(rows, USER_COLUMNS) + f"\n{len(rows)} user(s)")
    return EXIT_OK


def user_show(ctx) -> int:
    store = ctx.store
    account = store.user(ctx.args.name)
    row = usage_row(store, account)
    row["subscriptions"] = len(store.subscriptions(account.name))
    emit(ctx.args, row, lambda: fields([
        ("user", row["user"]), ("mailboxes", str(row["mailboxes"])),
        ("subscriptions", str(row["subscriptions"])),
        ("messages", f"{row['messages']} of {limit(row['message_limit'])}"),
        ("storage", f"{size(row['bytes'])} of {size_limit(row['storage_limit'])}")]))
    return EXIT_OK


def quota_set(ctx) -> int:
    args = ctx.args
    if args.storage is KEEP and args.messages is KEEP:
        raise UsageError("quota set needs --storage or --messages (or both)")
    store = ctx.store
    account = store.user(args.user)
    storage = account.storage_limit if args.storage is KEEP else args.storage
    messages = account.message_limit if args.messages is KEEP else args.messages
    store.set_quota(account.name, storage, messages)
    return _show(ctx, account.name)


def quota_show(ctx) -> int:
    return _show(ctx, ctx.user(ctx.args.user))


def _show(ctx, user: str) -> int:
    store = ctx.store
    account = store.user(user)
    used_bytes, used_messages = store.usage(user)
    data = {"user": user,
            "storage": {"used": used_bytes, "limit": account.storage_limit},
            "messages": {"used": used_messages, "limit": account.message_limit}}

    def percent(used: int, cap: int | None) -> str:
        return "-" if cap is None else f"{100 * used / cap:.0f}%" if cap else "100%"
    rows = [{"resource": "STORAGE", "used": size(used_bytes),
             "limit": size_limit(account.storage_limit),
             "percent": percent(used_bytes, account.storage_limit)},
            {"resource": "MESSAGES", "used": str(used_messages),
             "limit": limit(account.message_limit),
             "percent": percent(used_messages, account.message_limit)}]
    emit(ctx.args, data, lambda: f"quota of {user}\n" + table(rows, [
        Column("resource"), Column("used", right=True), Column("limit", right=True),
        Column("percent", "%", right=True)]))
    return EXIT_OK
