"""mailadmin queue ...: the outgoing queue (mail waiting for the SMTP relay; docs/relay.md)."""

from __future__ import annotations

import datetime

from .output import EXIT_OK, Column, Failure, emit, size, table


def register(sub, common) -> None:
    queue = sub.add_parser("queue", parents=[common],
                           help="the outgoing queue: Sieve redirects, vacation replies, bounces")
    qsub = queue.add_subparsers(dest="queue_command", metavar="COMMAND", required=True)
    listing = qsub.add_parser("list", parents=[common],
                              help="queued messages, oldest first, with their next attempt")
    listing.set_defaults(func=queue_list)
    retry = qsub.add_parser("retry", parents=[common],
                            help="try queued messages again at once (all without an id)")
    retry.add_argument("ids", nargs="*", metavar="ID")
    retry.set_defaults(func=queue_retry)
    delete = qsub.add_parser("delete", parents=[common],
                             help="remove queued messages without sending them (no bounce)")
    delete.add_argument("ids", nargs="+", metavar="ID")
    delete.set_defaults(func=queue_delete)


def _when(value: object) -> str:
    if not value:
        return "-"
    return datetime.datetime.fromtimestamp(float(value), datetime.UTC).strftime(
        "%Y-%m-%d %H:%M:%SZ")


COLUMNS = [Column("id", "ID"), Column("reason"), Column("from", show=lambda v: v or "<>"),
           Column("pending", "TO", show=lambda v: ",".join(v)), Column("size", show=size),
           Column("created", show=_when), Column("attempts"),
           Column("next_attempt", "NEXT", show=_when),
           Column("last_error", "LAST ERROR", show=lambda v: v or "-")]


def queue_list(ctx) -> int:
    rows = [e.as_dict() for e in ctx.store.outbox.entries()]
    emit(ctx.args, rows, lambda: table(rows, COLUMNS) if rows else "the queue is empty")
    return EXIT_OK


def queue_retry(ctx) -> int:
    outbox = ctx.store.outbox
    ids = ctx.args.ids or [e.id for e in outbox.entries()]
    missing = [qid for qid in ids if not outbox.retry(qid)]
    done = [qid for qid in ids if qid not in missing]
    emit(ctx.args, {"retry": done, "not_found": missing},
         lambda: "\n".join([f"{qid}: due now" for qid in done]
                           + [f"{qid}: not in the queue" for qid in missing]))
    if missing:
        raise Failure(f"not in the queue: {', '.join(missing)}")
    return EXIT_OK


def queue_delete(ctx) -> int:
    outbox = ctx.store.outbox
    missing = [qid for qid in ctx.args.ids if not outbox.delete(qid)]
    done = [qid for qid in ctx.args.ids if qid not in missing]
    emit(ctx.args, {"deleted": done, "not_found": missing},
         lambda: "\n".join([f"{qid}: deleted" for qid in done]
                           + [f"{qid}: not in the queue" for qid in missing]))
    if missing:
        raise Failure(f"not in the queue: {', '.join(missing)}")
    return EXIT_OK
