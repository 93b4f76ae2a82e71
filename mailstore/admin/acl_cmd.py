"""mailadmin acl ...: the ACLs of mailboxes (RFC 4314), set by the administrator.

    acl set [--shared] [USER] MAILBOX IDENTIFIER RIGHTS
    acl delete [--shared] [USER] MAILBOX IDENTIFIER
    acl show [--shared] [USER] MAILBOX

USER is the owner of MAILBOX (their own name for it, as ``INBOX`` or ``Team``); with
``--shared`` the mailbox is one of the shared namespace (``Shared/`` in IMAP; created with
``mailbox create --shared``) and there is no USER.  Rights as in IMAP SETACL (RFC 4314 3.1):
``lrs`` replaces, ``+w`` adds, ``-w`` removes; ``c`` and ``d`` stand for ``kx`` and ``te``.
"""

from __future__ import annotations

from .. import sharing
from ..acl import SHARED_OWNER, format_rights
from .output import EXIT_OK, Column, UsageError, emit, table


def register(sub, common) -> None:
    acl = sub.add_parser("acl", parents=[common], help="mailbox access control lists")
    asub = acl.add_subparsers(dest="acl_command", metavar="COMMAND", required=True)
    for verb, func, rest, text in (
            ("set", acl_set, "IDENTIFIER RIGHTS", "give IDENTIFIER (a user, anyone, -user) "
                                                  "rights on a mailbox (+r adds, -r removes)"),
            ("delete", acl_delete, "IDENTIFIER", "remove IDENTIFIER's entry"),
            ("show", acl_show, "", "the mailbox's ACL")):
        p = asub.add_parser(verb, parents=[common], help=text,
                            usage=f"%(prog)s [--shared] [USER] MAILBOX "
                                  f"{rest}".rstrip())
        p.add_argument("--shared", action="store_true",
                       help="a mailbox of the shared namespace (Shared/...): no USER")
        p.add_argument("words", nargs="+", metavar="ARG",
                       help=f"[USER] MAILBOX {rest}".rstrip())
        p.set_defaults(func=func, acl_rest=len(rest.split()))


def _target(ctx) -> tuple[str, str, list[str]]:
    """(owner, mailbox name, the remaining words) from the command line."""
    args = ctx.args
    words = list(args.words)
    wanted = args.acl_rest + (1 if args.shared else 2)
    if len(words) != wanted:
        shape = ("MAILBOX" if args.shared else "USER MAILBOX") + (
            " IDENTIFIER RIGHTS" if args.acl_rest == 2 else " IDENTIFIER" if args.acl_rest
            else "")
        raise UsageError(f"expected {shape}")
    owner = SHARED_OWNER if args.shared else ctx.user(words.pop(0))
    return owner, words.pop(0), words


def _shown(owner: str) -> str:
    return "(shared)" if owner == SHARED_OWNER else owner


def acl_set(ctx) -> int:
    owner, name, (identifier, rights) = _target(ctx)
    try:
        now = sharing.admin_set_acl(ctx.store, owner, name, identifier, rights)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    emit(ctx.args, {"owner": _shown(owner), "mailbox": name, "identifier": identifier,
                    "rights": format_rights(now)},
         lambda: f"{identifier} has {format_rights(now) or 'no rights'} on {name} of "
                 f"{_shown(owner)}")
    return EXIT_OK


def acl_delete(ctx) -> int:
    owner, name, (identifier,) = _target(ctx)
    sharing.admin_set_acl(ctx.store, owner, name, identifier, "")
    emit(ctx.args, {"owner": _shown(owner), "mailbox": name, "deleted": identifier},
         lambda: f"removed {identifier} from the ACL of {name} of {_shown(owner)}")
    return EXIT_OK


def acl_show(ctx) -> int:
    owner, name, _ = _target(ctx)
    mailbox = ctx.store.mailbox(owner, name)
    rows = [{"identifier": ident, "rights": format_rights(rights)}
            for ident, rights in sharing.acl_entries(mailbox)]
    emit(ctx.args, rows, lambda: table(rows, [Column("identifier"), Column("rights")]))
    return EXIT_OK
