"""mailadmin mailbox ...: create, delete, rename, list, subscribe, unsubscribe."""

from __future__ import annotations

from .. import sharing
from ..acl import SHARED
from ..mailboxes import SPECIAL_USE, describe
from .output import EXIT_OK, Column, UsageError, confirm, emit, size, table


def register(sub, common) -> None:
    mailbox = sub.add_parser("mailbox", parents=[common], help="manage a user's mailboxes")
    msub = mailbox.add_subparsers(dest="mailbox_command", metavar="COMMAND", required=True)

    create = msub.add_parser("create", parents=[common], help="create a mailbox (and parents)",
                             usage="%(prog)s [--shared] [USER] NAME [options]")
    create.add_argument("words", nargs="+", metavar="ARG",
                        help="USER NAME, or NAME alone with --shared")
    create.add_argument("--shared", action="store_true",
                        help="a mailbox of the shared namespace (IMAP: Shared/NAME), owned by "
                             "no user; give rights with `mailadmin acl set --shared`")
    create.add_argument("--special-use", type=special_use, metavar="ATTR",
                        help=f"RFC 6154 attribute: {', '.join(SPECIAL_USE)}")
    create.add_argument("--subscribe", action="store_true", help="subscribe the user to it")
    create.set_defaults(func=mailbox_create)

    delete = msub.add_parser("delete", parents=[common],
                             help="delete a mailbox and its messages (not its children)")
    delete.add_argument("user")
    delete.add_argument("name")
    delete.add_argument("--yes", action="store_true",
                        help="do not ask for confirmation when it holds messages")
    delete.set_defaults(func=mailbox_delete)

    rename = msub.add_parser("rename", parents=[common],
                             help="rename a mailbox with its children (UIDs are kept)")
    rename.add_argument("user")
    rename.add_argument("old")
    rename.add_argument("new")
    rename.set_defaults(func=mailbox_rename)

    listing = msub.add_parser("list", parents=[common],
                              help="a user's mailboxes with counts, UIDVALIDITY, UIDNEXT")
    listing.add_argument("user")
    listing.set_defaults(func=mailbox_list)

    for verb, func in (("subscribe", mailbox_subscribe), ("unsubscribe", mailbox_unsubscribe)):
        p = msub.add_parser(verb, parents=[common], help=f"{verb} a user to a mailbox name")
        p.add_argument("user")
        p.add_argument("name")
        p.set_defaults(func=func)


def special_use(text: str) -> str:
    """``\\Archive``, ``Archive`` or ``archive`` -> ``\\Archive``."""
    wanted = text.lstrip("\\").lower()
    for attr in SPECIAL_USE:
        if attr[1:].lower() == wanted:
            return attr
    raise UsageError(f"unknown special-use attribute: {text} (one of {', '.join(SPECIAL_USE)})")


def mailbox_create(ctx) -> int:
    args = ctx.args
    if len(args.words) != (1 if args.shared else 2):
        raise UsageError("expected NAME with --shared, else USER NAME")
    if args.shared:
        if args.subscribe:
            raise UsageError("--subscribe needs a USER")
        box = sharing.admin_create_shared(ctx.store, args.words[0])
        emit(args, {"user": None, "created": f"{SHARED}/{box.name}",
                    "uidvalidity": box.uidvalidity},
             lambda: f"created shared mailbox {SHARED}/{box.name}")
        return EXIT_OK
    user = ctx.user(args.words[0])
    box = ctx.store.create_mailbox(user, args.words[1], args.special_use)
    if args.subscribe:
        ctx.store.subscribe(user, box.name)
    emit(args, {"user": user, "created": box.name, "uidvalidity": box.uidvalidity},
         lambda: f"created mailbox {box.name} of {user}")
    return EXIT_OK


def mailbox_delete(ctx) -> int:
    args = ctx.args
    user = ctx.user(args.user)
    box = ctx.store.mailbox(user, args.name)
    if box.messages:
        confirm(f"delete mailbox {box.name} of {user} with {box.messages} message(s) "
                f"({size(box.size)})", args.yes)
    ctx.store.delete_mailbox(user, box.name)
    emit(args, {"user": user, "deleted": box.name, "messages": box.messages},
         lambda: f"deleted mailbox {box.name} of {user} ({box.messages} message(s))")
    return EXIT_OK


def mailbox_rename(ctx) -> int:
    args = ctx.args
    user = ctx.user(args.user)
    renamed = ctx.store.rename_mailbox(user, args.old, args.new)
    names = [b.name for b in renamed]
    emit(args, {"user": user, "renamed": names},
         lambda: "\n".join(f"renamed to {n}" for n in names))
    return EXIT_OK


MAILBOX_COLUMNS = [Column("name"), Column("messages"), Column("unseen"),
                   Column("size", show=size, right=True), Column("uidvalidity"),
                   Column("uidnext"), Column("special_use", "SPECIAL-USE"),
                   Column("subscribed")]


def mailbox_list(ctx) -> int:
    user = ctx.user(ctx.args.user)
    subscribed = set(ctx.store.subscriptions(user))
    rows = [{**describe(b), "subscribed": b.name in subscribed}
            for b in ctx.store.list_mailboxes(user)]
    emit(ctx.args, rows, lambda: table(rows, MAILBOX_COLUMNS))
    return EXIT_OK


def mailbox_subscribe(ctx) -> int:
    user = ctx.user(ctx.args.user)
    ctx.store.subscribe(user, ctx.args.name)
    emit(ctx.args, {"user": user, "subscribed": ctx.args.name},
         lambda: f"subscribed {user} to {ctx.args.name}")
    return EXIT_OK


def mailbox_unsubscribe(ctx) -> int:
    user = ctx.user(ctx.args.user)
    ctx.store.unsubscribe(user, ctx.args.name)
    emit(ctx.args, {"user": user, "unsubscribed": ctx.args.name},
         lambda: f"unsubscribed {user} from {ctx.args.name}")
    return EXIT_OK
