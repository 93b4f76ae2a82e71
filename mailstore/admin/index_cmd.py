"""mailadmin index ...: the text index SEARCH uses (docs/decisions/0026-text-index.md).

``index rebuild USER [MAILBOX]`` indexes every message of a mailbox again, over its old
entry, and removes the entries of messages no longer there (messages stored before the index
existed, an index written by an older version, or one suspected wrong); ``index status USER``
says how much of each mailbox is indexed; ``index run`` indexes what ``text_index =
background`` queued (the server's background indexer does so on its own).  SEARCH stays
right throughout: a message not (yet) indexed is scanned.
"""

from __future__ import annotations

from .output import EXIT_OK, EXIT_PROBLEMS, Column, UsageError, emit, table
from .progress import Progress


def register(sub, common) -> None:
    index = sub.add_parser("index", parents=[common], help="the text index SEARCH uses")
    isub = index.add_subparsers(dest="index_command", metavar="COMMAND", required=True)

    rebuild = isub.add_parser("rebuild", parents=[common],
                              help="index every message of a user's mailboxes (or one) again")
    rebuild.add_argument("user")
    rebuild.add_argument("mailbox", nargs="?", help="only this mailbox")
    rebuild.add_argument("--no-progress", action="store_true",
                         help="no progress line on standard error")
    rebuild.set_defaults(func=index_rebuild)

    run = isub.add_parser("run", parents=[common],
                          help="index every message queued by text_index = background now "
                               "(what the server's background indexer does)")
    run.add_argument("--no-progress", action="store_true",
                     help="no progress line on standard error")
    run.set_defaults(func=index_run)

    status = isub.add_parser("status", parents=[common],
                             help="messages indexed and not indexed, per mailbox")
    status.add_argument("user")
    status.add_argument("mailbox", nargs="?", help="only this mailbox")
    status.set_defaults(func=index_status)


def _mailboxes(ctx, user: str, name: str | None):
    store = ctx.store
    return [store.mailbox(user, name)] if name else store.list_mailboxes(user)


def index_rebuild(ctx) -> int:
    args = ctx.args
    store = ctx.store
    user = ctx.user(args.user)
    text = store.text
    rows = []
    failed = 0
    for box in _mailboxes(ctx, user, args.mailbox):
        uids = store.uids(box)
        progress = Progress(f"indexing {box.name}", total_count=len(uids),
                            enabled=not args.no_progress and not args.json)
        # Each message indexed again over its old entry, one at a time (atomic on FTS5;
        # postings only added, marker last): a SEARCH running meanwhile always finds either
        # entry whole.  Dropping the mailbox's index first would leave markers read by such
        # a SEARCH pointing at text already gone.
        text.forget(box.id, text.check(box.id, uids)[1])
        try:
            done = text.index_messages(box.id, uids, sync=store.backend.sync,
                                       progress=progress.update)
        finally:
            progress.close()
        failed += len(uids) - done
        rows.append({"mailbox": box.name, "messages": len(uids), "indexed": done})
    emit(args, {"user": user, "mailboxes": rows},
         lambda: table(rows, [Column("mailbox"), Column("messages"), Column("indexed")]))
    return EXIT_PROBLEMS if failed else EXIT_OK


def index_run(ctx) -> int:
    """Catch up with the background indexer's queue (a store no server serves, after an
    import, or a server whose indexer fell behind): batches until nothing is left."""
    from ..indexer import BackgroundIndexer, TextQueue
    args = ctx.args
    store = ctx.store
    if not store.text.enabled:
        raise UsageError("text_index = no: there is no index to write")
    queue = store.text.queue or TextQueue(store.backend)
    waiting = queue.count()
    progress = Progress("indexing the queue", total_count=waiting,
                        enabled=not args.no_progress and not args.json)
    try:
        done = BackgroundIndexer(store, queue=queue).run_until_empty(progress.update)
    finally:
        progress.close()
    left = queue.count()
    row = {"queued": waiting, "indexed": done, "left": left}
    emit(args, row, lambda: table([row], [Column("queued"), Column("indexed"),
                                          Column("left")]))
    return EXIT_OK


def index_status(ctx) -> int:
    args = ctx.args
    store = ctx.store
    user = ctx.user(args.user)
    rows = []
    for box in _mailboxes(ctx, user, args.mailbox):
        uids = store.uids(box)
        markers = store.text.index.markers(box.id)
        indexed = sum(1 for uid in uids if markers.get(uid))
        skipped = sum(1 for uid in uids if markers.get(uid) is False)
        rows.append({"mailbox": box.name, "messages": len(uids), "indexed": indexed,
                     "not_indexable": skipped, "missing": len(uids) - indexed - skipped})
    emit(args, {"user": user, "mailboxes": rows},
         lambda: table(rows, [Column("mailbox"), Column("messages"), Column("indexed"),
                              Column("not_indexable", "TOO BIG"), Column("missing")]))
    return EXIT_OK
