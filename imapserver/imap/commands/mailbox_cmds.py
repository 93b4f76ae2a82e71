"""Mailbox commands.

    select      = "SELECT" SP mailbox [SP "(" select-param *(SP select-param) ")"]
                                               ; RFC 3501 6.3.1, RFC 4466 2.1, RFC 7162
                                               ; (select-param: ../qresync.py)
    examine     = "EXAMINE" SP mailbox [...]   ; 6.3.2, as SELECT
    create      = "CREATE" SP mailbox [SP "(" "USE" SP "(" [use-attr *(SP use-attr)] ")" ")"]
                                               ; 6.3.3, RFC 4466 create-param, RFC 6154 3
    delete      = "DELETE" SP mailbox          ; 6.3.4
    rename      = "RENAME" SP mailbox SP mailbox                         ; 6.3.5
    subscribe   = "SUBSCRIBE" SP mailbox / "UNSUBSCRIBE" SP mailbox      ; 6.3.6, 6.3.7
    list        = "LIST" [SP list-select-opts] SP mailbox SP mbox-or-pat
                  [SP list-return-opts]                     ; 6.3.8, RFC 5258, 6154, 5819
    lsub        = "LSUB" SP mailbox SP list-mailbox         ; 6.3.9
    status      = "STATUS" SP mailbox SP "(" status-att *(SP status-att) ")"   ; 6.3.10
    status-att  =/ "SIZE"                      ; RFC 8438: sum of RFC822.SIZE, number64
    status-att  =/ "MAILBOXID"                 ; RFC 8474 4.3: "MAILBOXID" SP "(" objectid ")"
    resp-text-code =/ "MAILBOXID" SP "(" objectid ")"   ; RFC 8474 4.1: CREATE, SELECT, EXAMINE
    namespace   = "NAMESPACE"                  ; RFC 2342: personal, other users', shared
    list-return-opt =/ "MYRIGHTS"              ; RFC 8440: a MYRIGHTS response per mailbox
    unselect    = "UNSELECT"                   ; RFC 3691
    close       = "CLOSE"                      ; 6.4.2
"""

from __future__ import annotations

from twisted.internet import defer

from mailstore import sharing
from mailstore.acl import WRITE_RIGHTS, format_rights, public_name
from mailstore.errors import NotFound
from mailstore.objectids import mailbox_id

from ..context import AUTH, SELECTED, Bad, No, command
from ..names import (
    DELIMITER,
    decode_name,
    decode_pattern,
    encode_name,
    lsub_names,
    normalize_new_name,
    pattern_regex,
    recursive_match_parents,
)
from ..notify_session import note_own
from ..qresync import in_set, missing, parse_select_params, ranges_text
from ..rev2 import rev2, utf8_names
from ..selected import SelectedMailbox
from ..wire import Atom, quoted_or_literal
from .common import (
    enable_condstore,
    flags_lines,
    flags_list,
    modseq_item,
    modseq_modes,
    vanished_line,
)
from .quota import DELETED_ITEMS, deleted_values
from .special_use import creatable_use

STATUS_ITEMS = ("MESSAGES", "RECENT", "UIDNEXT", "UIDVALIDITY", "UNSEEN", "SIZE", "MAILBOXID",
                *DELETED_ITEMS, "HIGHESTMODSEQ")


def _open(store, user: str, name: str, readonly: bool, modseqs: bool = False,
          qresync=None, rev2: bool = False) -> tuple[SelectedMailbox, int, list[bytes]]:
    """Open the mailbox: the session's view, its HIGHESTMODSEQ (RFC 7162 3.1.2.1) and, for a
    QRESYNC SELECT whose UIDVALIDITY still holds, the VANISHED (EARLIER) and FETCH responses
    that resync the client (3.2.5.2).  ``rev2``: an IMAP4rev2 session, which claims no
    \\Recent and is told whether the mailbox has children (RFC 9051 6.3.2: the LIST)."""
    # RFC 4314 4: SELECT and EXAMINE need "r"; read-only without any right to change
    # something (s, w, i, t, e), as Dovecot answers.
    mailbox, rights = sharing.open_mailbox(store, user, name, "r")
    readonly = readonly or not rights & WRITE_RIGHTS
    selected = SelectedMailbox(store, mailbox, readonly, rights, viewer=user)
    selected.tracks_recent = not rev2
    selected.load()
    if rev2:
        selected.has_children = bool(store.mailboxes.list(mailbox.owner, under=mailbox.name))
    selected.modseqs = modseqs
    highest = selected.highest_modseq()
    lines: list[bytes] = []
    if qresync is not None and qresync[0] == mailbox.uidvalidity:
        _uidvalidity, modseq, known = qresync
        since = store.since_modseq(mailbox, modseq, selected.index)
        if since.vanished is None:
            gone = missing(known, selected.uids, selected.known_visible)
            if gone:
                lines.append(b"VANISHED (EARLIER) " + ranges_text(gone).encode())
        else:
            gone_uids = [u for u in since.vanished if in_set(known, u)]
            if gone_uids:
                lines.append(vanished_line(gone_uids, earlier=True))
        for uid, flags in since.changed:
            seq = selected.seq_of(uid)
            if seq is not None:
                lines.append(b"%d FETCH (UID %d FLAGS %s %s)" % (
                    seq, uid, flags_list(flags.names, uid in selected.recent),
                    modseq_item(flags.modseq)))
    return selected, highest, lines


@defer.inlineCallbacks
def _select(ctx, readonly: bool):
    if not ctx.args:
        raise Bad(f"{ctx.name} takes a mailbox name")
    # RFC 3501 6.3.1: a failed SELECT leaves no mailbox selected -- also one whose name is
    # not valid in the session's encoding (NO, as Dovecot).  RFC 7162 3.2.11: what follows
    # [CLOSED] is about the new mailbox (sent, as by Dovecot, before the parameters are even
    # looked at, and whether QRESYNC is enabled or not).
    ctx.server.watchers.unwatch(ctx.session)
    if ctx.session.selected is not None:
        ctx.untagged(b"OK [CLOSED] Previous mailbox closed")
    ctx.session.selected = None
    name = decode_name(ctx.args[0], utf8_names(ctx.session))
    params = parse_select_params(ctx.args[1:])
    if params.qresync and "QRESYNC" not in ctx.session.enabled:
        raise Bad("QRESYNC must be enabled first (RFC 7162 3.2.5)")
    if params.condstore:
        yield enable_condstore(ctx)
    condstore, _ = modseq_modes(ctx.session)
    is_rev2 = rev2(ctx.session)
    # In the reactor's thread when nothing needs writing (call_local; a SELECT that claims
    # \Recent for new messages, or stores a HIGHESTMODSEQ point, runs again in the pool).
    selected, highest, resync = yield ctx.call_local(_open, ctx.store, ctx.session.user, name,
                                                     readonly, condstore, params.qresync,
                                                     is_rev2)
    ctx.session.selected = selected
    readonly = selected.readonly
    for line in flags_lines(sorted(selected.announced), readonly, selected.rights):
        ctx.untagged(line)
    ctx.untagged(b"%d EXISTS" % selected.exists)
    if is_rev2:
        # RFC 9051 6.3.2: no RECENT and no OK [UNSEEN] (Appendix E), but the mailbox's LIST
        # -- its name as stored, with its attributes.
        ctx.untagged(_selected_list_line(selected, ctx.session.user))
    else:
        ctx.untagged(b"%d RECENT" % len(selected.recent))
        if selected.first_unseen is not None:
            ctx.untagged(b"OK [UNSEEN %d] First unseen" % selected.first_unseen)
    ctx.untagged(b"OK [UIDVALIDITY %d] UIDs valid" % selected.mailbox.uidvalidity)
    # The mailbox row was read before the index: a message may have arrived in between.
    uidnext = max(selected.mailbox.uidnext, selected.index.marks.visible + 1)
    ctx.untagged(b"OK [UIDNEXT %d] Predicted next UID" % uidnext)
    # RFC 7162 3.1.2.1: on every SELECT and EXAMINE, CONDSTORE enabled or not.
    ctx.untagged(b"OK [HIGHESTMODSEQ %d] Highest" % highest)
    ctx.untagged(b"OK [MAILBOXID (%s)] Ok" % mailbox_id(selected.mailbox.id).encode())
    # RFC 4467 8.1: the URLAUTH mechanisms this mailbox's URLs may use (as Cyrus sends it).
    ctx.untagged(b"OK [URLMECH INTERNAL] URLAUTH mechanisms")
    for line in resync:
        ctx.untagged(line)
    ctx.finish(b"OK", f"{ctx.name} completed", "READ-ONLY" if readonly else "READ-WRITE")


def _selected_list_line(selected, user: str) -> bytes:
    """The untagged LIST an IMAP4rev2 SELECT/EXAMINE sends (RFC 9051 6.3.2, always UTF-8):
    the mailbox by the name ``user`` sees it by (``Other Users/alice/Team`` for another's,
    RFC 2342 5), never by its owner's name."""
    mailbox = selected.mailbox
    name = public_name(user, mailbox.owner, mailbox.name)
    attrs = ["\\HasChildren" if selected.has_children else "\\HasNoChildren"]
    if mailbox.special_use:
        attrs.append(mailbox.special_use)
    return f"LIST ({' '.join(attrs)}) \"{DELIMITER}\" ".encode() + encode_name(name, True)


def _oldname_line(name: str, oldname: str) -> bytes:
    """``LIST () "/" name ("OLDNAME" (oldname))``: the OLDNAME extended data item (RFC 9051
    6.3.9, from RFC 5465 5.4), telling an IMAP4rev2 client what a name became."""
    return (f"LIST () \"{DELIMITER}\" ".encode() + encode_name(name, True)
            + b' ("OLDNAME" (' + quoted_or_literal(oldname, utf8=True) + b"))")


@command("SELECT", AUTH, SELECTED)
def select(ctx):
    return _select(ctx, readonly=False)


@command("EXAMINE", AUTH, SELECTED)
def examine(ctx):
    return _select(ctx, readonly=True)


@command("CREATE", AUTH, SELECTED)
@defer.inlineCallbacks
def create(ctx):
    ctx.expect_args(1, 2)
    utf8 = utf8_names(ctx.session)
    given = decode_name(ctx.args[0], utf8)
    name = given.rstrip(DELIMITER)  # RFC 3501: a trailing delimiter is ok
    if utf8:
        name = normalize_new_name(name)  # RFC 9051 5.1: Net-Unicode, NFC
    use = creatable_use(ctx.args[1]) if len(ctx.args) == 2 else None
    if name.upper() == "INBOX":
        raise No("INBOX always exists", "ALREADYEXISTS")
    mailbox = yield ctx.call(sharing.create_mailbox, ctx.store, ctx.session.user, name, use)
    note_own(ctx.session, names=[mailbox.name])
    shown = public_name(ctx.session.user, mailbox.owner, mailbox.name)
    if rev2(ctx.session) and shown != given.rstrip(DELIMITER):
        # RFC 9051 6.3.4: a name the server changed (NFC, INBOX's case) is told with OLDNAME.
        ctx.untagged(_oldname_line(shown, given.rstrip(DELIMITER)))
    ctx.finish(b"OK", "CREATE completed", f"MAILBOXID ({mailbox_id(mailbox.id)})")


@command("DELETE", AUTH, SELECTED)
@defer.inlineCallbacks
def delete(ctx):
    ctx.expect_args(1)
    name = decode_name(ctx.args[0], utf8_names(ctx.session))
    user = ctx.session.user

    def run():
        mailbox, _rights = sharing.open_mailbox(ctx.store, user, name, "x")  # RFC 4314 4
        if sharing.has_children(ctx.store, mailbox):
            raise No("Mailbox has children, delete them first", "HASCHILDREN")
        ctx.store.delete_mailbox(mailbox.owner, mailbox.name)
        return mailbox
    mailbox = yield ctx.call(run)
    note_own(ctx.session, names=[mailbox.name])
    selected = ctx.session.selected
    if selected is not None and selected.mailbox.id == mailbox.id:
        ctx.server.watchers.unwatch(ctx.session)
        ctx.session.selected = None


@command("RENAME", AUTH, SELECTED)
@defer.inlineCallbacks
def rename(ctx):
    ctx.expect_args(2)
    utf8 = utf8_names(ctx.session)
    old, new = decode_name(ctx.args[0], utf8), decode_name(ctx.args[1], utf8)
    if utf8:
        new = normalize_new_name(new)  # RFC 9051 5.1: Net-Unicode, NFC
    renamed = yield ctx.call(sharing.rename_mailbox, ctx.store, ctx.session.user, old, new)
    note_own(ctx.session, names=[m.name for m in renamed])
    if rev2(ctx.session) and renamed:
        # RFC 9051 6.3.6 and 6.3.9.7: the new name (as stored: NFC, INBOX's case) with the
        # old one as OLDNAME, so the client can carry its state for the mailbox across.
        top = renamed[0]
        ctx.untagged(_oldname_line(public_name(ctx.session.user, top.owner, top.name), old))


@command("SUBSCRIBE", AUTH, SELECTED)
@defer.inlineCallbacks
def subscribe(ctx):
    ctx.expect_args(1)
    name = decode_name(ctx.args[0], utf8_names(ctx.session))
    yield ctx.call(ctx.store.subscribe, ctx.session.user, name)
    note_own(ctx.session, subscriptions=[name])


@command("UNSUBSCRIBE", AUTH, SELECTED)
@defer.inlineCallbacks
def unsubscribe(ctx):
    ctx.expect_args(1)
    name = decode_name(ctx.args[0], utf8_names(ctx.session))
    yield ctx.call(ctx.store.unsubscribe, ctx.session.user, name)
    note_own(ctx.session, subscriptions=[name])


@command("NAMESPACE", AUTH, SELECTED)
def namespace(ctx):
    ctx.expect_args(0)
    # RFC 2342 5: personal, other users' (RFC 4314 sharing) and shared mailboxes.
    ctx.untagged(b'NAMESPACE (("" "/")) (("Other Users/" "/")) (("Shared/" "/"))')


@command("UNSELECT", SELECTED)
def unselect(ctx):
    ctx.expect_args(0)
    ctx.server.watchers.unwatch(ctx.session)
    ctx.session.selected = None


@command("CLOSE", SELECTED)
@defer.inlineCallbacks
def close(ctx):
    ctx.expect_args(0)
    selected = ctx.session.selected
    ctx.server.watchers.unwatch(ctx.session)
    ctx.session.selected = None
    if not selected.readonly and "e" in selected.rights:
        # RFC 3501 6.4.2: expunge \Deleted messages silently (RFC 4314 4: if "e" allows).
        def run():
            if "e" not in selected.require(""):
                return
            doomed = selected.deleted_uids()
            if doomed:
                ctx.store.expunge(selected.mailbox, doomed, only_deleted=True)
        yield ctx.call(run)


# -- LIST / LSUB ---------------------------------------------------------------------------------

class ListRequest:
    def __init__(self):
        self.subscribed_only = False
        self.recursive = False
        self.return_subscribed = False
        self.return_children = True
        self.return_special_use = True
        self.status: list[str] | None = None
        self.extended = False
        self.special_only = False
        self.myrights = False
        self.nonexistent = False  # \NonExistent for implied parents without LIST-EXTENDED


def _parse_list(args, session=None) -> tuple[ListRequest, str, list[str]]:
    req = ListRequest()
    utf8 = utf8_names(session)
    # IMAP4rev2 includes LIST-EXTENDED (RFC 9051 6.3.9): names that do not exist are
    # \NonExistent, also in a LIST without selection or return options.
    req.nonexistent = rev2(session)
    args = list(args)
    if args and isinstance(args[0], list):
        req.extended = True
        for opt in args.pop(0):
            word = str(opt).upper()
            if word == "SUBSCRIBED":
                req.subscribed_only = req.return_subscribed = True
            elif word == "RECURSIVEMATCH":
                req.recursive = True
            elif word == "REMOTE":
                pass
            elif word == "SPECIAL-USE":
                req.special_only = True
            else:
                raise Bad(f"Unknown LIST selection option {opt}")
        if req.recursive and not req.subscribed_only:
            raise Bad("RECURSIVEMATCH needs another selection option")
    if len(args) < 2:
        raise Bad("LIST takes a reference and a mailbox pattern")
    # Names are sent in modified UTF-7: a reference or pattern that is not matches no name.
    reference = decode_pattern(args[0], utf8) if args[0] != b"" else ""
    patterns_arg = args[1]
    patterns = [decode_pattern(p, utf8) if p != b"" else "" for p in
                (patterns_arg if isinstance(patterns_arg, list) else [patterns_arg])]
    rest = args[2:]
    if rest:
        if len(rest) != 2 or not isinstance(rest[0], Atom) or rest[0].upper() != "RETURN" \
                or not isinstance(rest[1], list):
            raise Bad("Expected RETURN (options) after the LIST pattern")
        req.extended = True
        opts = rest[1]
        i = 0
        while i < len(opts):
            word = str(opts[i]).upper()
            if word == "SUBSCRIBED":
                req.return_subscribed = True
            elif word == "CHILDREN":
                req.return_children = True
            elif word == "SPECIAL-USE":
                req.return_special_use = True
            elif word == "MYRIGHTS":
                req.myrights = True  # RFC 8440 2
            elif word == "STATUS" and i + 1 < len(opts) and isinstance(opts[i + 1], list):
                req.status = _status_items(opts[i + 1], session)
                i += 1
            else:
                raise Bad(f"Unknown LIST return option {opts[i]}")
            i += 1
    return req, reference, patterns


def _status_items(items, session=None) -> list[str]:
    out = []
    for item in items:
        word = str(item).upper()
        if word not in STATUS_ITEMS:
            raise Bad(f"Unknown STATUS item {item}")
        if word == "RECENT" and rev2(session):
            raise Bad("STATUS RECENT is not in IMAP4rev2 (RFC 9051 6.3.11)")
        out.append(word)
    if not out:
        raise Bad("STATUS needs at least one item")
    return out


def _list_data(store, user: str):
    """The mailboxes the user may list (own ones, and others' with ``l``; RFC 4314 4),
    named as the user sees them, with the user's rights on each; the subscriptions."""
    visible = sharing.visible_mailboxes(store, user)
    return visible, set(store.subscriptions(user))


def _recent(store, mailbox, selected) -> int:
    """STATUS RECENT (RFC 3501 6.3.10): the messages that are \\Recent to this session -- its
    own if it has the mailbox selected -- and those nobody has claimed yet, which its next
    look would make recent to it (Dovecot answers the same).  Runs in a thread."""
    if selected is not None and selected.mailbox.id == mailbox.id:
        return len(selected.recent) + store.unclaimed_recent(mailbox, selected.known_visible)
    return store.unclaimed_recent(mailbox)


def _recent_counts(store, mailboxes, selected) -> dict[bytes, int]:
    return {m.id: _recent(store, m, selected) for m in mailboxes}


def _highests(store, mailboxes) -> dict[bytes, int]:
    return {m.id: store.highest_modseq(m) for m in mailboxes}


def _deleted_counts(store, mailboxes, items) -> dict[bytes, dict[str, int]]:
    return {m.id: deleted_values(store, m, items) for m in mailboxes}


def _status_line(mailbox, items: list[str], recent: int = 0,
                 extra: dict[str, int] | None = None, name: str | None = None,
                 utf8: bool = False) -> bytes:
    # SIZE is the mailbox's size counter, which every append, copy, move and expunge keeps
    # (docs/decisions/0004; fsck repairs it): RFC 8438 asks for the sum of RFC822.SIZE.
    # ``extra``: the items worked out apart (DELETED, DELETED-STORAGE, HIGHESTMODSEQ).
    values = {"MESSAGES": mailbox.messages, "RECENT": recent, "UIDNEXT": mailbox.uidnext,
              "UIDVALIDITY": mailbox.uidvalidity, "UNSEEN": mailbox.unseen,
              "SIZE": mailbox.size, "MAILBOXID": f"({mailbox_id(mailbox.id)})", **(extra or {})}
    body = " ".join(f"{item} {values[item]}" for item in items)
    return b"STATUS " + encode_name(mailbox.name if name is None else name, utf8) + b" (" \
        + body.encode() + b")"


@command("LIST", AUTH, SELECTED)
@defer.inlineCallbacks
def list_(ctx):
    req, reference, patterns = _parse_list(ctx.args, ctx.session)
    utf8 = utf8_names(ctx.session)
    if patterns == [""] and not req.extended:
        # RFC 3501 6.3.8: the hierarchy delimiter and root.
        ctx.untagged(b'LIST (\\Noselect) "/" ""')
        return
    visible, subscribed = yield ctx.call_local(_list_data, ctx.store, ctx.session.user)
    rights_of = {m.id: r for m, r in visible}
    mailboxes = [m for m, _r in visible]
    # STATUS items only of mailboxes the user may read (RFC 4314 4: STATUS needs "r").
    readable = [m for m in mailboxes if "r" in rights_of[m.id]]
    recents, deleted = {}, {}
    if req.status and "RECENT" in req.status:
        recents = yield ctx.call(_recent_counts, ctx.store, readable, ctx.session.selected)
    highests = {}
    if req.status and "HIGHESTMODSEQ" in req.status:
        yield enable_condstore(ctx)
        highests = yield ctx.call(_highests, ctx.store, readable)
    if req.status and set(req.status) & set(DELETED_ITEMS):
        deleted = yield ctx.call(_deleted_counts, ctx.store, readable, req.status)
    by_name = {m.name: m for m in mailboxes}
    names = set(by_name)
    regexes = [pattern_regex(reference, p) for p in patterns
               if p and reference is not None]
    candidates = set(names)
    if req.subscribed_only:
        candidates = set(subscribed)
    # Parents implied by existing names answer % patterns as \Noselect (RFC 3501 6.3.8).
    implied = {DELIMITER.join(n.split(DELIMITER)[:i]) for n in candidates
               for i in range(1, n.count(DELIMITER) + 1)}
    # RFC 5258 3.5: with RECURSIVEMATCH only parents of subscribed names left unanswered.
    lifted = recursive_match_parents(subscribed, regexes) if req.recursive else set()
    lines = []
    for name in sorted(candidates | implied, key=lambda n: (n != "INBOX", n)):
        if not any(r.match(name) for r in regexes):
            continue
        attrs = []
        mailbox = by_name.get(name)
        if req.special_only and (mailbox is None or not mailbox.special_use):
            continue
        exists = mailbox is not None
        has_children = any(n.startswith(name + DELIMITER) for n in names)
        if name not in candidates:  # an implied parent
            if req.subscribed_only and name not in lifted:
                continue
            if req.subscribed_only:
                attrs.append("\\NonExistent" if not exists else "")
            elif not exists and req.extended:
                attrs.append("\\NonExistent")
            elif not exists:
                # A name with children but no mailbox of its own (the namespace roots
                # "Other Users" and "Other Users/<owner>", RFC 2342): as Dovecot answers;
                # \NonExistent for an IMAP4rev2 session (RFC 9051 6.3.9).
                attrs += ["\\NonExistent" if req.nonexistent else "\\Noselect",
                          "\\HasChildren"]
        elif not exists:
            attrs.append("\\NonExistent")
        if exists or name in candidates:
            attrs.append("\\HasChildren" if has_children else "\\HasNoChildren")
        if req.return_subscribed and name in subscribed:
            attrs.append("\\Subscribed")
        if mailbox is not None and mailbox.special_use and req.return_special_use:
            attrs.append(mailbox.special_use)
        attr_text = " ".join(a for a in attrs if a)
        line = f"LIST ({attr_text}) \"{DELIMITER}\" ".encode() + encode_name(name, utf8)
        # RFC 5258 4, example 9 (eps2): a subscribed mailbox with subscribed descendants
        # has CHILDINFO too, whether or not they are answered themselves (as in Dovecot).
        if name in lifted or req.recursive and name in subscribed and any(
                s.startswith(name + DELIMITER) for s in subscribed):
            line += b' ("CHILDINFO" ("SUBSCRIBED"))'
        lines.append(line)
        if req.myrights and mailbox is not None:
            # RFC 8440 2: right after the mailbox's LIST response.
            lines.append(b"MYRIGHTS " + encode_name(name, utf8) + b" "
                         + format_rights(rights_of[mailbox.id]).encode())
        if req.status and mailbox is not None and "r" in rights_of[mailbox.id]:
            lines.append(_status_line(mailbox, req.status, recents.get(mailbox.id, 0),
                                      {**deleted.get(mailbox.id, {}),
                                       **({"HIGHESTMODSEQ": highests[mailbox.id]}
                                          if mailbox.id in highests else {})},
                                      name=name, utf8=utf8))
    for line in lines:
        ctx.untagged(line)


@command("LSUB", AUTH, SELECTED)
@defer.inlineCallbacks
def lsub(ctx):
    ctx.expect_args(2)
    # RFC 9051 drops LSUB (Appendix E: LIST (SUBSCRIBED) replaces it); it stays for every
    # session, answering in the session's name encoding.
    utf8 = utf8_names(ctx.session)
    reference = decode_pattern(ctx.args[0], utf8) if ctx.args[0] != b"" else ""
    pattern = decode_pattern(ctx.args[1], utf8) if ctx.args[1] != b"" else ""
    if reference is None or pattern is None:
        return  # not modified UTF-7: no name matches
    visible, subscribed = yield ctx.call(_list_data, ctx.store, ctx.session.user)
    names = {m.name for m, _rights in visible}
    for name, parent_only in lsub_names(subscribed, reference, pattern):
        attrs = "" if name in names and not parent_only else "\\Noselect"
        ctx.untagged(f"LSUB ({attrs}) \"{DELIMITER}\" ".encode() + encode_name(name, utf8))


@command("STATUS", AUTH, SELECTED)
@defer.inlineCallbacks
def status(ctx):
    ctx.expect_args(2)
    utf8 = utf8_names(ctx.session)
    name = decode_name(ctx.args[0], utf8)
    if not isinstance(ctx.args[1], list):
        raise Bad("STATUS items must be a parenthesized list")
    items = _status_items(ctx.args[1], ctx.session)
    # Reads of a few rows: in the reactor's thread where the store allows (call_local).
    call = ctx.call_local
    selected = ctx.session.selected

    if "HIGHESTMODSEQ" in items:
        yield enable_condstore(ctx)  # RFC 7162 3.1: a CONDSTORE-enabling command

    def run():
        mailbox, _rights = sharing.open_mailbox(ctx.store, ctx.session.user, name, "r")
        recent = _recent(ctx.store, mailbox, selected) if "RECENT" in items else 0
        extra = deleted_values(ctx.store, mailbox, items)
        if "HIGHESTMODSEQ" in items:
            extra["HIGHESTMODSEQ"] = ctx.store.highest_modseq(mailbox)
        return mailbox, recent, extra
    try:
        mailbox, recent, extra = yield call(run)
    except NotFound:
        raise No(f"Mailbox does not exist: {name}", "NONEXISTENT") from None
    ctx.untagged(_status_line(mailbox, items, recent, extra,
                              public_name(ctx.session.user, mailbox.owner, mailbox.name),
                              utf8=utf8))

