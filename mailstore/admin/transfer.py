"""mailadmin import and export: mbox files and Maildir folders in, mbox or Maildir out.

Import sources (``import USER PATH``):

* a file: one mbox, into ``--mailbox`` (default INBOX);
* a Maildir or a Maildir++ tree: the root into ``--mailbox`` (default INBOX), each ``.A.B``
  folder into ``A/B`` (under ``--mailbox`` when one is given);
* any other directory: every mbox file under it, ``Work/Projects.mbox`` (or Thunderbird's
  ``Work.sbd/Projects``) into ``Work/Projects``, which is what ``export --format mbox`` writes.

Messages are stored with CRLF line ends, as delivered mail is (bare LFs become CRLF); export
writes LF line ends again unless ``--crlf``, so a file with LF line ends comes back byte for
byte.  Messages already imported into the same mailbox are skipped (:mod:`mailstore.imports`).  A
message that cannot be imported (not a mail message, too large, unreadable) is reported and the
import goes on; going over quota stops it, since every later message would fail the same way.
Progress goes to standard error; the summary to standard output.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass, field

from ..errors import InvalidName, NotFound, OverQuota, TooLarge
from ..messages import FLAGS, HEADER, STATE
from .maildir import (
    MaildirWriter,
    folder_size,
    folders,
    mailbox_to_folder,
    read_folder,
)
from .mbox import MboxReader, MboxWriter
from .output import EXIT_OK, EXIT_PROBLEMS, Column, Failure, emit, size, table, warn
from .progress import Progress
from .spool import LfReader, Spool

SPILL = 1024 * 1024
"""Messages up to this size are held in memory while imported; larger ones go through a
temporary file.  Also the size of the reads of a Maildir file."""
MAX_REPORTED = 1000
"""Errors kept for the report; beyond that they are only counted (memory stays flat)."""


def register(sub, common) -> None:
    imp = sub.add_parser("import", parents=[common], help="import mbox files or Maildir folders",
                         description=__doc__.split("\n\n", 1)[1])
    imp.add_argument("user")
    imp.add_argument("path", help="an mbox file, a Maildir (++ tree) or a directory of mboxes")
    imp.add_argument("--mailbox", help="target mailbox (default INBOX); a tree's folders go "
                     "under it")
    imp.add_argument("--sync-every", type=int, default=1000, metavar="N",
                     help="make the import durable every N messages (default 1000)")
    imp.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    imp.set_defaults(func=run_import)

    exp = sub.add_parser("export", parents=[common], help="export a user's mail to a directory")
    exp.add_argument("user")
    exp.add_argument("dir", help="directory to create (must be empty if it exists)")
    exp.add_argument("--format", choices=["mbox", "maildir"], default="maildir",
                     help="maildir: a Maildir++ tree, files byte for byte (default); mbox: one "
                     "mboxrd file per mailbox, NAME.mbox")
    exp.add_argument("--mailbox", action="append", metavar="NAME",
                     help="export only this mailbox (repeatable)")
    exp.add_argument("--crlf", action="store_true",
                     help="keep the stored CRLF line ends (default: LF, as mbox and Maildir "
                     "files have them)")
    exp.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    exp.set_defaults(func=run_export)


# -- import ----------------------------------------------------------------------------------

@dataclass
class Source:
    kind: str      # "mbox" or "maildir"
    path: str
    mailbox: str


@dataclass
class ImportReport:
    counts: dict[str, Counter] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)
    failed: int = 0
    stopped: str | None = None

    def count(self, mailbox: str, what: str) -> None:
        self.counts.setdefault(mailbox, Counter())[what] += 1

    def error(self, source: str, text: str, mailbox: str | None = None,
              number: int | None = None, offset: int | None = None) -> None:
        self.failed += 1
        if mailbox is not None:
            self.count(mailbox, "failed")
        if len(self.errors) < MAX_REPORTED:
            self.errors.append({"source": source, "message": number, "offset": offset,
                                "error": text})

    def total(self, what: str) -> int:
        return sum(c[what] for c in self.counts.values())


def plan(path: str, target: str | None) -> list[Source]:
    """What to import from ``path`` into which mailbox."""
    def under(name: str) -> str:
        if not name:
            return target or "INBOX"
        return f"{target}/{name}" if target else name
    try:
        os.stat(path)
    except OSError as exc:
        raise Failure(f"cannot read {path}: {exc.strerror}") from None
    if not os.path.isdir(path):
        _check_readable(path)
        return [Source("mbox", path, under(""))]
    tree = folders(path)
    if tree:
        return [Source("maildir", folder, under(name)) for name, folder in tree]
    sources = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            if name.startswith(".") or not (name.endswith(".mbox") or _looks_like_mbox(full)):
                continue
            rel = os.path.relpath(full, path)
            levels = [lvl[:-4] if lvl.endswith(".sbd") else lvl for lvl in rel.split(os.sep)]
            if levels[-1].endswith(".mbox"):
                levels[-1] = levels[-1][:-5]
            sources.append(Source("mbox", full, under("/".join(levels))))
    if not sources:
        raise Failure(f"nothing to import in {path}: no Maildir folder and no mbox file")
    return sources


def _check_readable(path: str) -> None:
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise Failure(f"cannot read {path}: {exc.strerror}") from None


def _looks_like_mbox(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(5) == b"From "
    except OSError:
        return True  # reported when it is read


def run_import(ctx) -> int:
    args = ctx.args
    if args.sync_every < 1:
        raise Failure(f"--sync-every must be at least 1: {args.sync_every}")
    store = ctx.store
    user = ctx.user(args.user)
    sources = plan(args.path, args.mailbox)
    total = sum(_source_bytes(s) for s in sources)
    progress = Progress("importing", total_bytes=total, enabled=not args.no_progress)
    importer = store.importer(user, sync_every=args.sync_every)
    report = ImportReport()
    done = [0, 0]  # messages seen, bytes of finished sources
    try:
        for source in sources:
            try:
                mailbox = importer.mailbox(source.mailbox)
            except (InvalidName, NotFound) as exc:
                report.error(source.path, f"cannot import into {source.mailbox!r}: {exc}")
                continue
            report.counts.setdefault(mailbox.name, Counter())
            if source.kind == "mbox":
                _import_mbox(importer, mailbox, source.path, report, progress, done)
            else:
                _import_maildir(importer, mailbox, source.path, report, progress, done)
            done[1] += _source_bytes(source)
    except OverQuota as exc:
        report.stopped = f"import stopped: {exc}"
    finally:
        importer.finish()
        progress.close()
    _report_import(args, user, report)
    return EXIT_PROBLEMS if report.failed or report.stopped else EXIT_OK


def _source_bytes(source: Source) -> int:
    if source.kind == "maildir":
        return folder_size(source.path)
    try:
        return os.path.getsize(source.path)
    except OSError:
        return 0


def _store_one(importer, mailbox, report: ImportReport, source: str, number: int,
               offset: int | None, data, length: int, digest: bytes, flags,
               internal_date: float | None) -> None:
    try:
        result = importer.add(mailbox, data, length, digest, flags, internal_date)
    except (TooLarge, InvalidName, ValueError) as exc:
        report.error(source, str(exc), mailbox.name, number, offset)
        return
    report.count(mailbox.name, "skipped" if result.skipped else "imported")


def _import_mbox(importer, mailbox, path: str, report: ImportReport, progress: Progress,
                 done: list[int]) -> None:
    try:
        f = open(path, "rb")
    except OSError as exc:
        report.error(path, f"cannot read {path}: {exc.strerror}", mailbox.name)
        return
    with f:
        reader = MboxReader(f, spill=SPILL, max_size=importer.store.max_message_size)
        seen = 0
        try:
            for msg in reader:
                seen += 1
                try:
                    if msg.skip:
                        report.count(mailbox.name, "ignored")
                    elif msg.error:
                        report.error(path, msg.error, mailbox.name, msg.number, msg.offset)
                    elif msg.spool.overflow:
                        report.error(path, f"message of {msg.spool.size} bytes is larger than "
                                     f"the limit of {importer.store.max_message_size} bytes",
                                     mailbox.name, msg.number, msg.offset)
                    else:
                        _store_one(importer, mailbox, report, path, msg.number, msg.offset,
                                   msg.spool.source(), msg.spool.size, msg.spool.digest,
                                   msg.flags, msg.internal_date)
                finally:
                    msg.spool.close()
                done[0] += 1
                progress.update(done[0], done[1] + reader.position)
        except OSError as exc:
            report.error(path, f"read error after {seen} message(s): {exc.strerror or exc}",
                         mailbox.name)
        if reader.leading_garbage:
            text = ("not an mbox file: no line starts with 'From '" if not seen else
                    f"{reader.leading_garbage} byte(s) before the first 'From ' line are not "
                    "a message")
            report.error(path, text, mailbox.name, offset=0)


def _import_maildir(importer, mailbox, folder: str, report: ImportReport,
                    progress: Progress, done: list[int]) -> None:
    base = done[1]
    number = 0
    for item in read_folder(folder):
        number += 1
        if isinstance(item, tuple):
            path, exc = item
            report.error(path, f"cannot read {path}: {exc.strerror}", mailbox.name)
            continue
        spool = Spool(SPILL, importer.store.max_message_size)
        try:
            with open(item.path, "rb") as f:
                while block := f.read(SPILL):
                    spool.write(block)
            spool.finish()
            if spool.overflow:
                report.error(item.path, f"message of {spool.size} bytes is larger than the "
                             f"limit of {importer.store.max_message_size} bytes", mailbox.name)
            else:
                _store_one(importer, mailbox, report, item.path, number, None, spool.source(),
                           spool.size, spool.digest, item.flags, item.internal_date)
        except OSError as exc:
            report.error(item.path, f"cannot read {item.path}: {exc.strerror or exc}",
                         mailbox.name)
        finally:
            spool.close()
        base += item.size
        done[0] += 1
        progress.update(done[0], base)


IMPORT_COLUMNS = [Column("mailbox"), Column("imported"), Column("skipped"),
                  Column("failed")]


def _report_import(args, user: str, report: ImportReport) -> None:
    for e in report.errors:
        where = e["source"]
        if e["message"] is not None:
            where += f": message {e['message']}"
        if e["offset"] is not None and e["message"] is not None:
            where += f" (byte {e['offset']})"
        warn(f"{where}: {e['error']}")
    if report.failed > len(report.errors):
        warn(f"... and {report.failed - len(report.errors)} more error(s)")
    if report.stopped:
        warn(report.stopped)
    rows = [{"mailbox": name, "imported": c["imported"], "skipped": c["skipped"],
             "failed": c["failed"]} for name, c in report.counts.items()]
    data = {"user": user, "imported": report.total("imported"),
            "skipped": report.total("skipped"), "failed": report.failed,
            "ignored": report.total("ignored"), "mailboxes": rows,
            "errors": report.errors, "stopped": report.stopped}
    emit(args, data, lambda: table(rows, IMPORT_COLUMNS) + (
        f"\nimported {data['imported']} message(s) for {user}, skipped {data['skipped']} "
        f"already there, {data['failed']} failed"))


# -- export ----------------------------------------------------------------------------------

_RETURN_PATH = re.compile(rb"(?im)^Return-Path:[ \t]*<([^>\s]*)>")
_FROM_ADDR = re.compile(rb"(?im)^From:[^\n]*?<([^>\s@]+@[^>\s]+)>|^From:[ \t]*([^\s<>@]+@[^\s<>]+)")


def envelope_sender(header: bytes | None) -> str:
    """The sender for an mbox ``From `` line: Return-Path, else the From address."""
    if header:
        m = _RETURN_PATH.search(header)
        if m:
            return m.group(1).decode("ascii", "replace") or "MAILER-DAEMON"
        m = _FROM_ADDR.search(header)
        if m:
            return (m.group(1) or m.group(2)).decode("ascii", "replace")
    return "MAILER-DAEMON"


def run_export(ctx) -> int:
    args = ctx.args
    store = ctx.store
    user = ctx.user(args.user)
    if args.mailbox:
        boxes = [store.mailbox(user, name) for name in args.mailbox]
    else:
        boxes = store.list_mailboxes(user)
    if os.path.exists(args.dir) and (not os.path.isdir(args.dir) or os.listdir(args.dir)):
        raise Failure(f"export directory is not empty: {args.dir}")
    try:
        os.makedirs(args.dir, exist_ok=True)
    except OSError as exc:
        raise Failure(f"cannot create {args.dir}: {exc.strerror}") from None
    progress = Progress("exporting", total_bytes=sum(b.size for b in boxes),
                        enabled=not args.no_progress)
    rows = []
    count = done = 0
    try:
        for box in boxes:
            exported = 0
            target, writer, f = _open_target(args.dir, box.name, args.format)
            try:
                for view in store.iter_messages(box, columns=[STATE, FLAGS, HEADER]):
                    reader = store.open_message(view)
                    if not args.crlf:
                        reader = LfReader(reader)
                    if args.format == "maildir":
                        writer.write(reader, view.flags.names, view.record.internal_date,
                                     f"U{box.uidvalidity}_{view.uid}")
                    else:
                        writer.write(reader, view.flags.names, view.record.internal_date,
                                     envelope_sender(view.header))
                    exported += 1
                    count += 1
                    done += view.record.size
                    progress.update(count, done)
            finally:
                if f is not None:
                    f.close()
                else:
                    writer.close()
            rows.append({"mailbox": box.name, "messages": exported, "path": target})
    except OSError as exc:
        raise Failure(f"cannot write {exc.filename or args.dir}: {exc.strerror or exc}") from None
    finally:
        progress.close()
    emit(args, {"user": user, "format": args.format, "dir": args.dir, "messages": count,
                "bytes": done, "mailboxes": rows},
         lambda: table(rows, [Column("mailbox"), Column("messages"), Column("path")]) +
         f"\nexported {count} message(s) ({size(done)}) of {user} to {args.dir}")
    return EXIT_OK


def _open_target(root: str, name: str, fmt: str):
    """(path, writer, file to close or None) for one mailbox."""
    if fmt == "maildir":
        folder = root if name == "INBOX" else os.path.join(root, mailbox_to_folder(name))
        return folder, MaildirWriter(folder), None
    path = os.path.join(root, *name.split("/")) + ".mbox"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    f = open(path, "wb", buffering=1024 * 1024)
    return path, MboxWriter(f), f

