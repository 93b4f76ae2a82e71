r"""FETCH (RFC 3501 6.4.5, 7.4.2) and UID FETCH (6.4.8).

    fetch = "FETCH" SP sequence-set SP ("ALL" / "FULL" / "FAST" / fetch-att /
            "(" fetch-att *(SP fetch-att) ")") [SP "(" fetch-modifier *(SP fetch-modifier) ")"]
    fetch-att =/ "MODSEQ"                                               ; RFC 7162 3.1.4.2
    fetch-att =/ "PREVIEW" [SP "(" preview-mod *(SP preview-mod) ")"]   ; RFC 8970 6
    preview-mod = "LAZY"
    fetch-modifier = "CHANGEDSINCE" SP mod-sequence-valzer              ; RFC 7162 3.1.4.1
                   / "VANISHED"                       ; UID FETCH under QRESYNC, RFC 7162 3.2.6

CHANGEDSINCE leaves out the messages whose MODSEQ is not above its value and adds MODSEQ to
the items; VANISHED first reports, as ``VANISHED (EARLIER)``, the UIDs of the set expunged
after it (mailstore/modseqs.py; a superset past the change log's retention, docs/decisions/
0014).  Once CONDSTORE is enabled, a FETCH that sets \Seen also shows the new MODSEQ; once
QRESYNC is, every FETCH response carries the UID (RFC 7162 3.1.4.1, 3.2.4).

Messages are read in batches (one store round trip per batch, only the columns the items
need), and each batch's responses go out in one write.  ENVELOPE, BODYSTRUCTURE and header
fields come from data prepared once at delivery; message octets are read chunk by chunk.  A
section over ``STREAM_ABOVE`` octets is streamed: chunks are read in the thread pool and written
as the socket drains, so serving a 50 MB message holds a few chunks, not 50 MB.  BINARY items
(RFC 3516) are built by :mod:`imapserver.imap.binary`, decoded parts streamed the same way.

A message another session expunged after this one last heard (RFC 2180 4.1): its content stays
readable for a grace period (docs/decisions/0011), so it is served as the session still
addresses it (4.1.1).  A slower reader finds it gone (``errors.Expunged``): the other messages
are served and the command ends ``NO [EXPUNGEISSUED]`` (4.1.2, RFC 9051 7.1).  A streamed
literal is never begun for content already gone (its first chunk is read before its head is
written); content that goes while its literal is being written cuts the connection, since the
octet count already sent can only be honoured with bytes that are not the message.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from twisted.internet import defer

from mailstore.errors import Expunged
from mailstore.index import Marks
from mailstore.messages import BODY, ENVELOPE, HEADER, PREVIEW, SUMMARY

from ..binary import UnknownCte, binary_literal, binary_size
from ..context import SELECTED, Bad, No, command
from ..object_items import OBJECT_KINDS, object_item
from ..qresync import missing, ranges_text
from ..render import BODY as NEED_BODY
from ..render import (
    CONTENT,
    cached_bodystructure,
    cached_envelope,
    internaldate,
    parse_fetch_items,
)
from ..render import ENVELOPE as NEED_ENVELOPE
from ..render import HEADER as NEED_HEADER
from ..render import PREVIEW as NEED_PREVIEW
from ..sections import iter_section, resolve
from ..seqset import SeqSet, parse_seqset
from ..wire import Atom
from .common import (
    announce_keywords,
    enable_condstore,
    flags_list,
    modseq_item,
    modseq_modes,
    parse_modseq,
    vanished_line,
)
from .message_cmds import resolve as resolve_set

BATCH = 200
CACHED_KINDS = frozenset({"UID", "FLAGS", "INTERNALDATE", "MODSEQ", "RFC822.SIZE", "ENVELOPE",
                          "BODY", "BODYSTRUCTURE"})
"""Items answered from the message row alone (prepared at delivery): a batch of only these,
setting no \\Seen, is a bounded read that writes nothing (``CommandContext.call_local``)."""
CONTENT_BATCH = 16
"""Messages per batch when message octets are fetched: a batch's responses are built in
memory (sections over STREAM_ABOVE excepted), so this bounds it to ~16 MiB."""
STREAM_ABOVE = 1024 * 1024
STREAM_HOP = 1024 * 1024
"""Octets a streamed literal reads per thread-pool round trip (four 256 KiB chunks, one store
read): one hop is in flight while the previous one drains to the client, so serving a big
body holds about two hops, and a slow reader stops the reads (bench/RESULTS.md)."""


class Stream:
    """A fetch item whose literal is too large to hold: the item's head (``NAME {n}\r\n``),
    the literal's octet count and an iterator of its chunks.

    The head travels with its data as one item, so the separator between items can never
    land between ``{n}\r\n`` and the literal's first octet (RFC 3501 4.3: the n octets follow
    the CRLF immediately).
    """

    def __init__(self, head: bytes, count: int, chunks):
        self.head = head
        self.count = count
        self.chunks = chunks


def _columns(needs: set[str]) -> list[bytes]:
    columns = list(SUMMARY)
    if NEED_ENVELOPE in needs:
        columns.append(ENVELOPE)
    if NEED_BODY in needs:
        columns.append(BODY)
    if NEED_HEADER in needs or CONTENT in needs:
        columns.append(HEADER)
    if NEED_PREVIEW in needs:
        columns.append(PREVIEW)
    return columns


def _render_batch(store, mailbox, batch, columns, items, set_seen, seq_of, own,
                  recent=frozenset(), shown=None, unknown_cte=None, changed_since=None,
                  seen_modseq=False):
    """Read one batch and build its responses (runs in a worker thread).

    Returns (responses, gone): responses as (sequence number, segments), each segment bytes
    or a Stream to be pulled; ``gone`` the number of messages left out because their content
    was released and deleted under us (expunged elsewhere: errors.Expunged).  ``recent``:
    the UIDs that are \\Recent in this session (their FLAGS say so).  ``shown`` (a set)
    collects the flags the responses show; ``unknown_cte`` (a list) the UIDs whose BINARY
    items were left out for an encoding that cannot be undone (RFC 3516 4.2).
    """
    shown = set() if shown is None else shown
    views = store.fetch(mailbox, batch, columns)
    seen_now = set()
    if set_seen:
        unseen = [v.uid for v in views if "\\Seen" not in v.flags.names]
        if unseen:
            changed, _ = store.store_flags(mailbox, unseen, ["\\Seen"], "add")
            own(changed)
            flags_by_uid = {uid: flags for uid, flags in changed}
            for view in views:
                if view.uid in flags_by_uid:
                    view.flags = flags_by_uid[view.uid]
                    seen_now.add(view.uid)
    responses = []
    gone = 0
    for view in views:
        seq = seq_of(view.uid)
        if seq is None:
            continue
        if changed_since is not None and view.modseq <= changed_since:
            continue  # RFC 7162 3.1.4.1
        parts: list = []
        reader = None
        wrote_flags = False
        lost = False
        for item in items:
            kind = item.kind
            if kind == "UID":
                parts.append(b"UID %d" % view.uid)
            elif kind == "FLAGS":
                parts.append(b"FLAGS " + flags_list(view.flags.names, view.uid in recent))
                shown.update(view.flags.names)
                wrote_flags = True
            elif kind == "INTERNALDATE":
                parts.append(b"INTERNALDATE " + internaldate(view.record.internal_date))
            elif kind == "MODSEQ":
                parts.append(modseq_item(view.modseq))
            elif kind == "RFC822.SIZE":
                parts.append(b"RFC822.SIZE %d" % view.record.size)
            elif kind == "ENVELOPE":
                parts.append(b"ENVELOPE " + cached_envelope(view.record.content,
                                                            view.envelope))
            elif kind in ("BODY", "BODYSTRUCTURE"):
                parts.append(kind.encode() + b" " + cached_bodystructure(
                    view.record.content, view.body, kind == "BODYSTRUCTURE"))
            elif kind in ("BINARY", "BINARY.SIZE"):
                if reader is None:
                    reader = store.open_message(view)
                try:
                    if kind == "BINARY.SIZE":
                        parts.append(binary_size(view, item, lambda r=reader: r))
                    else:
                        parts.append(_literal(*binary_literal(view, item, lambda r=reader: r)))
                except UnknownCte:
                    if unknown_cte is not None:
                        unknown_cte.append(view.uid)
                except Expunged:
                    lost = True
                    break
            elif kind in OBJECT_KINDS:
                try:
                    parts.append(object_item(store, mailbox, view, item))
                except Expunged:
                    lost = True
                    break
            else:
                plan = resolve(item.section, view.body, view.header, view.record.size,
                               view.record.header_size)
                if plan.needs_content and reader is None:
                    reader = store.open_message(view)
                count, chunks = iter_section(plan, reader if plan.needs_content else None,
                                             item.partial, chunk=STREAM_HOP)
                head = item.name.encode() + b" {%d}\r\n" % count
                try:
                    parts.append(_literal(head, count, chunks))
                except Expunged:
                    lost = True
                    break
        if lost:
            gone += 1
            continue
        if view.uid in seen_now and not wrote_flags:
            parts.append(b"FLAGS " + flags_list(view.flags.names, view.uid in recent))
            shown.update(view.flags.names)
        if view.uid in seen_now and seen_modseq:
            # CONDSTORE enabled: the \Seen this FETCH set has a new MODSEQ (RFC 7162 3.1.4.1).
            parts.append(modseq_item(view.modseq))
        if parts:  # empty when its only items failed (UNKNOWN-CTE): msg-att needs one
            responses.append((seq, parts))
    return responses, gone


INDEX_KINDS = frozenset({"UID", "FLAGS", "MODSEQ"})
"""Items a session's index holds for every message (mailstore/index.py): a FETCH of only
these is answered without reading the message rows when the index is current."""


def _render_from_index(selected, batch, items, recent, shown, changed_since=None):
    """A batch's responses (as :func:`_render_batch` builds them) from the session's index,
    or None when the index may be behind the rows (SelectedMailbox.current_flags).  The
    index has every stored flag and MODSEQ of each message; \\Recent is the session's."""
    found = selected.current_flags(batch)
    if found is None:
        return None
    responses = []
    rendered: dict[tuple[frozenset[str], bool], bytes] = {}
    for seq, uid, names, modseq in found:
        if changed_since is not None and modseq <= changed_since:
            continue  # RFC 7162 3.1.4.1
        parts = []
        for item in items:
            kind = item.kind
            if kind == "UID":
                parts.append(b"UID %d" % uid)
            elif kind == "FLAGS":
                key = (names, uid in recent)
                flags = rendered.get(key)
                if flags is None:
                    flags = rendered[key] = b"FLAGS " + flags_list(*key)
                    shown.update(names)
                parts.append(flags)
            else:
                parts.append(modseq_item(modseq))
        responses.append((seq, parts))
    return responses, 0


def _literal(head: bytes, count: int, chunks):
    """A literal as one segment: its head and data as bytes, or over ``STREAM_ABOVE`` a
    Stream.  A Stream's first piece is read now, in this thread: content already gone is
    found (errors.Expunged) before the head is written, while the command can still say NO."""
    if count <= STREAM_ABOVE:
        return head + b"".join(chunks)
    first = next(chunks, None)
    return Stream(head, count, itertools.chain(() if first is None else (first,), chunks))


def _next_pieces(chunks, want: int) -> list[bytes]:
    """The next pieces of a streamed literal, at least ``want`` octets of them unless it ends
    first (runs in a worker thread: one round trip reads several chunks)."""
    out: list[bytes] = []
    got = 0
    for piece in chunks:
        out.append(piece)
        got += len(piece)
        if got >= want:
            break
    return out


FETCH_MODIFIERS = ("CHANGEDSINCE", "VANISHED")


def _preview_modifiers(arg) -> bool:
    """Whether ``arg``, the list after a lone ``PREVIEW``, is PREVIEW's modifiers (``(LAZY)``,
    RFC 8970 section 6) rather than FETCH's (RFC 7162 3.1.4.1, 3.2.6)."""
    return isinstance(arg, list) and not any(
        isinstance(m, str) and m.upper() in FETCH_MODIFIERS for m in arg)


def _modifiers(mods, uid_mode: bool) -> tuple[int | None, bool]:
    """(CHANGEDSINCE value or None, VANISHED) from FETCH's optional modifier list."""
    if mods is None:
        return None, False
    if not isinstance(mods, list) or not mods:
        raise Bad("FETCH modifiers must be a parenthesized list")
    since, vanished = None, False
    i = 0
    while i < len(mods):
        word = str(mods[i]).upper()
        if word == "CHANGEDSINCE" and i + 1 < len(mods):
            since = parse_modseq(mods[i + 1], zero=True)
            i += 2
        elif word == "VANISHED" and uid_mode:
            vanished = True
            i += 1
        else:
            raise Bad(f"Unknown FETCH modifier {mods[i]!s}")
    return since, vanished


def _vanished(store, selected, uids_text: str, since: int) -> bytes | None:
    """``VANISHED (EARLIER)`` for the UIDs of a UID FETCH set expunged after ``since``
    (RFC 7162 3.2.6), "*" standing for the highest UID the session knows."""
    top = selected.known_visible
    ranges = [(top if a is None else a, top if b is None else b)
              for a, b in parse_seqset(uids_text).ranges]
    changes = store.since_modseq(selected.mailbox, since, selected.index)
    if changes.vanished is None:
        gone = missing(SeqSet(tuple(ranges)), selected.uids, top)
        return b"VANISHED (EARLIER) " + ranges_text(gone).encode() if gone else None
    wanted = [u for u in changes.vanished if any(min(r) <= u <= max(r) for r in ranges)]
    return vanished_line(wanted, earlier=True) if wanted else None


CHANGED_SCAN = 50
"""Above this many messages, CHANGEDSINCE first narrows them through the change log."""


@dataclass
class _Now:
    """The session's messages with the mailbox's marks as they are now: a FETCH CHANGEDSINCE
    must also find changes the session has not been told of yet (its own STORE, say)."""

    marks: Marks
    uids: object
    seq_of: object


def _changed_uids(store, selected, since: int, uids: list[int]) -> list[int]:
    """Those of ``uids`` whose MODSEQ may be above ``since``: the messages the change log names
    after the point ``since`` came from and those newer than it (mailstore/modseqs.py), not
    every row.  The FETCH still checks each row's MODSEQ."""
    marks = store.marks([selected.mailbox.id]).get(selected.mailbox.id)
    if marks is None:
        return uids
    found = store.since_modseq(selected.mailbox, since, _Now(marks, selected.uids,
                                                              selected.seq_of))
    changed = {uid for uid, _flags in found.changed}
    return [u for u in uids if u in changed]


@defer.inlineCallbacks
def fetch_command(ctx, uid_mode: bool):
    ctx.expect_args(2, 4)
    selected = ctx.session.selected
    uids = resolve_set(ctx, ctx.args[0], uid_mode)
    spec, *rest = ctx.args[1:]
    if rest and isinstance(spec, Atom) and spec.upper() == "PREVIEW" \
            and _preview_modifiers(rest[0]):
        # RFC 8970 section 6: a lone fetch-att may be PREVIEW with its modifiers, which may
        # be followed by the command's own (RFC 7162's CHANGEDSINCE, VANISHED).
        spec = [spec, rest.pop(0)]
    if len(rest) > 1:
        raise Bad(f"{ctx.name} takes at most one list of fetch modifiers")
    try:
        items = parse_fetch_items(spec)
    except ValueError as exc:
        raise Bad(str(exc)) from None
    changed_since, vanished = _modifiers(rest[0] if rest else None, uid_mode)
    from ..render import parse_fetch_item
    if changed_since is not None or any(i.kind == "MODSEQ" for i in items):
        yield enable_condstore(ctx)  # RFC 7162 3.1: CONDSTORE-enabling
        if not any(i.kind == "MODSEQ" for i in items):
            items = [*items, parse_fetch_item("MODSEQ")]
    if vanished:
        # RFC 7162 3.2.6: only with CHANGEDSINCE, only once QRESYNC is enabled.
        if "QRESYNC" not in ctx.session.enabled:
            raise Bad("VANISHED needs QRESYNC enabled first")
        if changed_since is None:
            raise Bad("VANISHED used without CHANGEDSINCE")
    condstore, qresync = modseq_modes(ctx.session)
    if (uid_mode or qresync) and not any(i.kind == "UID" for i in items):
        # RFC 3501 6.4.8: UID FETCH responses always carry the UID; RFC 7162 3.2.4: every
        # FETCH once QRESYNC is enabled.
        items = [parse_fetch_item("UID"), *items]
    if vanished:
        text = str(ctx.args[0]) if not isinstance(ctx.args[0], bytes) else ctx.args[0].decode()
        line = yield ctx.call(_vanished, ctx.store, selected, text, changed_since)
        if line is not None:
            ctx.untagged(line)
    if changed_since is not None and len(uids) > CHANGED_SCAN:
        uids = yield ctx.call(_changed_uids, ctx.store, selected, changed_since, uids)
    needs: set[str] = set()
    for item in items:
        needs |= item.needs
    # RFC 4314 4: without "s" a FETCH of a body leaves \Seen alone, and is no error.
    set_seen = any(i.sets_seen for i in items) and not selected.readonly \
        and "s" in selected.rights
    columns = _columns(needs)
    step = CONTENT_BATCH if CONTENT in needs else BATCH
    # One batch of cached columns is read in the reactor's thread when the store allows
    # (CommandContext.call_local: a worker thread's round trip cost more than the read);
    # more than one go to the pool, so that a FETCH 1:* of a big mailbox lets other
    # connections run between its batches.
    call = ctx.call_local if len(uids) <= step and not set_seen and all(
        i.kind in CACHED_KINDS for i in items) else ctx.call
    # FLAGS, UID and MODSEQ alone (a client's resync) come from the session's index, one
    # row read per batch instead of one per message (bench/RESULTS.md, issue 14).
    from_index = not set_seen and all(i.kind in INDEX_KINDS for i in items)
    gone = 0
    unknown_cte: list[int] = []
    for start in range(0, len(uids), step):
        if ctx.conn.closed or ctx.conn.closing:
            return  # the connection went (or is going) away: nothing more can be sent
        batch = uids[start:start + step]
        shown: set[str] = set()
        answered = None
        if from_index:
            answered = yield ctx.call_local(_render_from_index, selected, batch, items,
                                            selected.recent, shown, changed_since)
        if answered is None:
            answered = yield call(_render_batch, ctx.store, selected.mailbox, batch,
                                  columns, items, set_seen, selected.seq_of,
                                  selected.note_own_flags, selected.recent, shown,
                                  unknown_cte, changed_since,
                                  condstore and not any(i.kind == "MODSEQ" for i in items))
        responses, lost = answered
        gone += lost
        # RFC 3501 7.2.6: a keyword the client was not told of is announced before the FETCH
        # that shows it (one another session set since our last refresh, say).
        announce_keywords(ctx, shown)
        for seq, parts in responses:
            if not any(isinstance(p, Stream) for p in parts):
                ctx.untagged(b"%d FETCH (" % seq + b" ".join(parts) + b")")
                continue
            ctx.flush()
            yield _stream(ctx, seq, parts)
        ctx.flush()
        yield ctx.conn.wait_writable()  # the client reads a batch before the next is built
    if unknown_cte:
        # RFC 3516 4.2: the rest was served, the parts that could not be decoded were not.
        raise No("Unknown Content-Transfer-Encoding", "UNKNOWN-CTE")
    if gone:
        # RFC 2180 4.1.2: the rest was served; RFC 9051 7.1 names the reason.
        raise No("Some of the requested messages no longer exist", "EXPUNGEISSUED")


@defer.inlineCallbacks
def _stream(ctx, seq: int, parts: list):
    conn = ctx.conn
    try:
        pending = [b"* %d FETCH (" % seq]
        for i, part in enumerate(parts):
            # A Stream carries its literal's head: the separator goes before the head, never
            # between it and the data (RFC 3501 4.3: the octets follow the CRLF at once).
            if i:
                pending.append(b" ")
            if not isinstance(part, Stream):
                pending.append(part)
                continue
            pending.append(part.head)
            conn.write_raw(pending)
            pending = []
            conn.streaming = True
            sent = 0
            # One read in flight while the previous pieces drain: the store read and the
            # socket overlap, and memory stays at about two hops whatever the client's pace.
            reading = ctx.call(_next_pieces, part.chunks, STREAM_HOP)
            while reading is not None:
                pieces = yield reading
                reading = None
                sent += sum(map(len, pieces))
                if not pieces or sent > part.count:
                    raise OSError("message ended early" if not pieces else
                                  "message longer than its octet count")
                if sent < part.count:
                    reading = ctx.call(_next_pieces, part.chunks, STREAM_HOP)
                if conn.closed or conn.closing:
                    if reading is not None:
                        reading.addErrback(lambda _: None)  # nobody waits for it any more
                    return
                conn.write_raw(pieces)
                yield conn.wait_writable()
            conn.streaming = False
        pending.append(b")\r\n")
        conn.write_raw(pending)
    except Exception as exc:
        # Part of a literal is out and its octet count promised: the only ways to keep the
        # connection would be to pad the literal with octets that are not the message (which a
        # client may store as the message) or to send fewer (and have the client read our next
        # responses as message data).  So the connection is cut: the client sees it end inside
        # the literal, discards it, reconnects and, told of the expunge, does not ask again.
        # Content expunged by another session is an expected end (errors.Expunged: no
        # traceback); anything else is still logged as a failure by the command runner.
        conn.cut(f"FETCH literal of message {seq} cut short: {exc}")
        raise


@command("FETCH", SELECTED)
def fetch(ctx):
    return fetch_command(ctx, uid_mode=False)
