"""Where our server and Dovecot may differ, by name: deliberate differences and known defects.

A script names the entries it needs (``Script(deliberate=(...), defects=(...))``); each is a
hook over the pair of normalised events of one step (ours, Dovecot's) that brings the two to
a common form only where the difference is exactly the one described, so anything else still
shows.  An entry a script names that never applies is reported as stale.
docs/differential.md holds the table of :data:`differential.DELIBERATE`; keep it in step.

``KNOWN_DEFECTS`` masks defects being fixed on other branches; each raises
:class:`differential.DefectFixed` as soon as our server behaves, so the mask goes with the fix.
"""

from __future__ import annotations

import datetime
import re

from differential import (
    ALWAYS,
    PIPELINE_SEPARATOR,
    Event,
    Response,
    answers,
    command_text,
    deliberate,
    render,
    response_lines,
    word,
)

SPECIAL_USE = {b"\\ALL", b"\\ARCHIVE", b"\\DRAFTS", b"\\FLAGGED", b"\\JUNK", b"\\SENT",
               b"\\TRASH"}
CHILD_INFO = {b"\\HASCHILDREN", b"\\HASNOCHILDREN"}


def _data(event: Event, name: bytes):
    """The untagged data responses of ``event`` whose first word is ``name``."""
    return [r for r in event.responses
            if r.kind == "data" and r.data and word(r.data[0]) == name]


def _listings(event: Event) -> dict[bytes, Response]:
    return {r.data[3]: r for r in _data(event, b"LIST") if len(r.data) > 3}


def _strip_attributes(r: Response, drop) -> bool:
    attrs = r.data[1]
    kept = [a for a in attrs if not drop(word(a))]
    if len(kept) != len(attrs):
        r.data[1] = kept
        return True
    return False


def _tagged(event: Event) -> Response | None:
    tagged = [r for r in event.responses if r.kind == "tagged"]
    return tagged[-1] if tagged else None


# -- deliberate differences -------------------------------------------------------------------


@deliberate("unsolicited-fetch-uid",
            "Our unsolicited FETCH (another session's flag change, reported by NOOP, IDLE or any "
            "other command) carries UID as well as FLAGS; Dovecot sends FLAGS alone. RFC 3501 "
            "7.4.2 lets a server send any data item, and with the UID a client applies the "
            "change without a sequence-number lookup (RFC 7162 3.2.4 makes it mandatory under "
            "QRESYNC). UID is removed from FLAGS-only FETCH responses to commands other than "
            "FETCH, STORE and UID commands.")
def _unsolicited_fetch_uid(ours: Event, dovecot: Event) -> bool:
    name = command_text(ours).split(" ", 1)[0].upper()
    if name in ("UID", "FETCH", "STORE"):
        return False
    changed = False

    def fetches(event):
        return [r for r in event.responses if r.kind == "data" and len(r.data) == 3
                and word(r.data[1]) == b"FETCH" and isinstance(r.data[2], list)]
    # Under QRESYNC (RFC 7162 3.2.4) Dovecot sends the UID too: nothing to remove then.
    if any(word(r.data[2][k]) == b"UID" for r in fetches(dovecot)
           for k in range(0, len(r.data[2]), 2)):
        return False
    for r in fetches(ours):
        items = r.data[2]
        names = sorted(word(items[k]) for k in range(0, len(items), 2))
        # With CONDSTORE enabled the FETCH carries MODSEQ too (RFC 7162 3.1.4.1).
        if names in ([b"FLAGS", b"UID"], [b"FLAGS", b"MODSEQ", b"UID"]):
            r.data[2] = [x for k in range(0, len(items) - 1, 2)
                         if word(items[k]) != b"UID" for x in items[k:k + 2]]
            changed = True
    return changed


@deliberate("list-extra-attributes",
            "We return \\HasChildren/\\HasNoChildren and the special-use attributes on every "
            "LIST response (we advertise CHILDREN, RFC 3348 section 3, and RFC 6154 section 2 "
            "lets a server include special-use attributes in any LIST); Dovecot leaves them "
            "out of an extended LIST (RFC 5258) unless RETURN (CHILDREN) or (SPECIAL-USE) "
            "asks for them. Removed from ours where Dovecot has none and they were not asked "
            "for.")
def _list_extra_attributes(ours: Event, dovecot: Event) -> bool:
    text = command_text(ours).upper()
    changed = False
    theirs = _listings(dovecot)
    for name, r in _listings(ours).items():
        other = theirs.get(name)
        present = {word(a) for a in other.data[1]} if other is not None else set()

        def drop(attr, present=present):
            if attr in present:
                return False
            if attr in CHILD_INFO:
                return "CHILDREN" not in text
            return attr in SPECIAL_USE and "SPECIAL-USE" not in text
        changed |= _strip_attributes(r, drop)
    return changed


@deliberate("dovecot-marked",
            "Dovecot adds \\Marked/\\UnMarked (RFC 3501 7.2.2: optional) to some LIST "
            "responses; we do not track whether a mailbox was 'marked' and never send them. "
            "Removed from Dovecot's.")
def _dovecot_marked(ours: Event, dovecot: Event) -> bool:
    changed = False
    for r in _data(dovecot, b"LIST") + _data(dovecot, b"LSUB"):
        changed |= _strip_attributes(r, lambda a: a in (b"\\MARKED", b"\\UNMARKED"))
    return changed


@deliberate("acl-rights-order",
            "RFC 4314 rights are a set and an ACL response's identifiers come in no set order "
            "(3.6); Dovecot writes rights in the order they were granted (\"kxlrc\") and the "
            "owner's entry last, we write them in one fixed order (lrwstipekxa, then c, d) and "
            "the entries sorted. Both sorted here: the letters of every rights string of ACL, "
            "MYRIGHTS and LISTRIGHTS responses, and ACL's (identifier, rights) pairs.")
def _acl_rights_order(ours: Event, dovecot: Event) -> bool:
    changed = False
    for event in (ours, dovecot):
        for r in _data(event, b"ACL"):
            pairs = [(r.data[i], bytes(sorted(r.data[i + 1] or b"")))
                     for i in range(2, len(r.data) - 1, 2)]
            new = r.data[:2] + [x for pair in sorted(pairs) for x in pair]
            changed |= new != r.data
            r.data[:] = new
        for r in _data(event, b"MYRIGHTS"):
            if len(r.data) == 3 and isinstance(r.data[2], bytes):
                new = bytes(sorted(r.data[2]))
                changed |= new != r.data[2]
                r.data[2] = new
    return changed


@deliberate("namespace-shared",
            "NAMESPACE (RFC 2342 5) announces our other users' namespace (\"Other Users/\") "
            "and shared namespace (\"Shared/\") for ACL sharing (RFC 4314); a Dovecot with "
            "no such namespace configured has NIL there (tests/test_differential_acl.py "
            "configures the other users' one; its public namespace needs a mail location of "
            "its own). Ours is set to NIL where Dovecot's is.")
def _namespace_shared(ours: Event, dovecot: Event) -> bool:
    changed = False
    theirs = _data(dovecot, b"NAMESPACE")
    for r, other in zip(_data(ours, b"NAMESPACE"), theirs, strict=False):
        for i, prefix in ((2, b"Other Users/"), (3, b"Shared/")):
            if len(r.data) > i and len(other.data) > i and other.data[i] is None \
                    and r.data[i] == [[prefix, b"/"]]:
                r.data[i] = None
                changed = True
    return changed


answers("acl-expunge-noperm",
        "EXPUNGE without the e right (RFC 4314 4) answers NO [NOPERM] here (RFC 5530 3: the "
        "ACL does not permit it), so the client knows nothing was expunged; Dovecot answers "
        "OK and expunges nothing.",
        {"EXPUNGE": (["tag NO [NOPERM]"], ["tag OK"])})


@deliberate("dovecot-lsub-special-use",
            "Dovecot puts special-use attributes on LSUB responses; RFC 6154 defines them for "
            "LIST only and we send none on LSUB. Removed from Dovecot's.")
def _dovecot_lsub_special_use(ours: Event, dovecot: Event) -> bool:
    changed = False
    for r in _data(dovecot, b"LSUB"):
        changed |= _strip_attributes(r, lambda a: a in SPECIAL_USE)
    return changed


def _is_closed(r: Response) -> bool:
    return r.kind == "status" and bool(r.code) and word(r.code[0]) == b"CLOSED"


@deliberate("dovecot-qresync-codes",
            "Dovecot sends 'OK [CLIENTBUG]' for STATUS of the selected mailbox (RFC 5530 codes "
            "are optional): removed from Dovecot's. '* OK [CLOSED]' when a SELECT/EXAMINE "
            "closes the previous mailbox (RFC 7162 3.2.11), which both servers send now that "
            "we advertise QRESYNC, is dropped from both in the scripts that name this entry "
            "(tests/test_differential_condstore.py compares it).")
def _dovecot_qresync_codes(ours: Event, dovecot: Event) -> bool:
    before = len(dovecot.responses)
    dovecot.responses[:] = [r for r in dovecot.responses if not _is_closed(r)]
    changed = len(dovecot.responses) != before
    ours.responses[:] = [r for r in ours.responses if not _is_closed(r)]
    for r in dovecot.responses:
        if r.kind == "tagged" and r.code and word(r.code[0]) == b"CLIENTBUG":
            r.code = None
            changed = True
    return changed


@deliberate("optional-response-codes",
            "Our tagged NO/BAD carries an RFC 5530 response code (NONEXISTENT, CANNOT, "
            "HASCHILDREN, ...) or BADCHARSET its list of charsets (RFC 3501 7.1) where "
            "Dovecot's has none; both are optional. Our code is removed where Dovecot's same "
            "status has none.")
def _optional_response_codes(ours: Event, dovecot: Event) -> bool:
    theirs = {r.tag: r for r in dovecot.responses if r.kind == "tagged"}
    changed = False
    for a in ours.responses:
        b = theirs.get(a.tag) if a.kind == "tagged" else None
        if b is None or a.status != b.status or a.status == b"OK" or not a.code:
            continue
        if b.code is None:
            a.code = None
            changed = True
        elif word(a.code[0]) == word(b.code[0]) == b"BADCHARSET" and len(a.code) > len(b.code):
            a.code = a.code[:len(b.code)]
            changed = True
    return changed


@deliberate("refuse-after-literal",
            "A command with synchronizing literals that we refuse (bad flag or date in APPEND, "
            "unknown mailbox) is refused once its literals are read: we send '+' for each and "
            "then the tagged NO/BAD; Dovecot refuses at the first literal, before '+' (RFC 3501 "
            "7.5 allows both). Our continuations are dropped and the command as sent is "
            "compared as Dovecot got it, when both end with the same status and code.")
def _refuse_after_literal(ours: Event, dovecot: Event) -> bool:
    a, b = _tagged(ours), _tagged(dovecot)
    conts = [r for r in ours.responses if r.kind == "cont"]
    if a is None or b is None or a.status == b"OK" or (a.status, a.code) != (b.status, b.code):
        return False
    if len(conts) <= len([r for r in dovecot.responses if r.kind == "cont"]):
        return False
    if not ours.sent.startswith(dovecot.sent.rstrip()):
        return False
    ours.responses[:] = ([r for r in dovecot.responses if r.kind == "cont"]
                         + [r for r in ours.responses if r.kind != "cont"])
    ours.sent = dovecot.sent
    return True


@deliberate("status-inbox-name",
            "STATUS of 'inbox' (any case): we answer with the name INBOX (RFC 3501 5.1: INBOX "
            "is case-insensitive, and this is its name); Dovecot echoes the client's spelling.")
def _status_inbox_name(ours: Event, dovecot: Event) -> bool:
    changed = False
    for a, b in zip(_data(ours, b"STATUS"), _data(dovecot, b"STATUS"), strict=False):
        if a.data[1] == b"INBOX" and b.data[1] != b"INBOX" and word(b.data[1]) == b"INBOX":
            b.data[1] = b"INBOX"
            changed = True
    return changed


@deliberate("implicit-parents",
            "CREATE a/b/c creates a and a/b as ordinary (selectable) mailboxes here, as "
            "RFC 3501 6.3.3 asks ('SHOULD create any superior hierarchical names'); Dovecot's "
            "sdbox keeps them as \\Noselect placeholders (and 'CREATE x/' likewise, where we "
            "ignore the trailing separator as 6.3.3 allows). \\Noselect is removed from "
            "Dovecot's LIST responses for names we list as selectable.")
def _implicit_parents(ours: Event, dovecot: Event) -> bool:
    changed = False
    mine = _listings(ours)
    for name, r in _listings(dovecot).items():
        other = mine.get(name)
        if other is not None and b"\\NOSELECT" not in {word(a) for a in other.data[1]}:
            changed |= _strip_attributes(r, lambda a: a == b"\\NOSELECT")
    return changed


@deliberate("rename-inbox-uidvalidity",
            "RENAME INBOX moves INBOX's messages to a new mailbox (RFC 3501 6.3.5): ours gets "
            "a new UIDVALIDITY and INBOX keeps its UIDVALIDITY and UIDNEXT, so no UID is ever "
            "reused; Dovecot gives the new name INBOX's UIDVALIDITY and starts INBOX afresh. "
            "Both keep UIDs unique per UIDVALIDITY. UIDVALIDITY values and INBOX's UIDNEXT are "
            "made equal in the script that renames INBOX.")
def _rename_inbox_uidvalidity(ours: Event, dovecot: Event) -> bool:
    changed = False
    for event in (ours, dovecot):
        for r in event.responses:
            if r.code and word(r.code[0]) == b"UIDVALIDITY":
                r.code = [r.code[0], b"<uidvalidity>"]
                changed = True
            if r.kind == "data" and len(r.data) == 3 and word(r.data[0]) == b"STATUS" \
                    and r.data[1] == b"INBOX":
                items = r.data[2]
                for k in range(0, len(items) - 1, 2):
                    if word(items[k]) == b"UIDNEXT":
                        items[k + 1] = b"<uidnext>"
                        changed = True
    return changed


@deliberate("delete-with-children",
            "DELETE of a mailbox that has children answers NO [HASCHILDREN] (RFC 5530) here: "
            "our store has no \\Noselect placeholders. RFC 3501 6.3.4 permits deleting it "
            "(its name then becomes \\Noselect), which Dovecot does. The DELETE answer and "
            "Dovecot's \\Noselect on the parent afterwards are made ours.")
def _delete_with_children(ours: Event, dovecot: Event) -> bool:
    if command_text(ours).upper().startswith("DELETE "):
        if (response_lines(ours), response_lines(dovecot)) == (["tag NO [HASCHILDREN]"],
                                                               ["tag OK"]):
            dovecot.responses[:] = ours.responses
            return True
        return False
    return _implicit_parents(ours, dovecot)


@deliberate("store-reports-unchanged",
            "STORE without .SILENT answers an untagged FETCH for every message it names (RFC "
            "3501 6.4.6: 'the server SHOULD send an untagged FETCH response'), even where no "
            "flag changed; Dovecot leaves out messages whose flags stayed the same. Our FETCH "
            "responses for sequence numbers Dovecot did not report are removed.")
def _store_reports_unchanged(ours: Event, dovecot: Event) -> bool:
    text = command_text(ours).upper()
    if not (text.startswith("STORE ") or text.startswith("UID STORE ")) or ".SILENT" in text:
        return False
    reported = {r.data[0] for r in dovecot.responses
                if r.kind == "data" and len(r.data) == 3 and word(r.data[1]) == b"FETCH"}
    before = len(ours.responses)
    ours.responses[:] = [r for r in ours.responses
                         if not (r.kind == "data" and len(r.data) == 3
                                 and word(r.data[1]) == b"FETCH" and r.data[0] not in reported)]
    return len(ours.responses) != before


@deliberate("dovecot-search-keyword",
            "SEARCH KEYWORD of a keyword no message has: Dovecot registers the keyword in the "
            "mailbox and announces new FLAGS/PERMANENTFLAGS; we answer the search only. Dovecot's "
            "FLAGS and PERMANENTFLAGS responses to SEARCH are removed.")
def _dovecot_search_keyword(ours: Event, dovecot: Event) -> bool:
    if "SEARCH" not in command_text(ours).upper():
        return False
    before = len(dovecot.responses)
    dovecot.responses[:] = [
        r for r in dovecot.responses
        if not (r.kind == "data" and r.data and word(r.data[0]) == b"FLAGS")
        and not (r.kind == "status" and r.code and word(r.code[0]) == b"PERMANENTFLAGS")]
    return len(dovecot.responses) != before


def _crlf(data: bytes) -> bytes:
    return re.sub(rb"(?<!\r)\n", b"\r\n", data)


@deliberate("bare-lf-kept",
            "A message APPENDed with bare LF line ends is kept and served octet for octet (its "
            "RFC822.SIZE is the octets stored); Dovecot turns bare LF into CRLF on output and "
            "counts sizes that way. Where ours with LF made CRLF equals Dovecot's value, "
            "Dovecot's is taken, and RFC822.SIZE of such a message is compared as Dovecot's.")
def _bare_lf_kept(ours: Event, dovecot: Event) -> bool:
    changed = False
    theirs = {r.data[0]: r for r in dovecot.responses
              if r.kind == "data" and len(r.data) == 3 and word(r.data[1]) == b"FETCH"}
    for r in ours.responses:
        if not (r.kind == "data" and len(r.data) == 3 and word(r.data[1]) == b"FETCH"):
            continue
        other = theirs.get(r.data[0])
        if other is None:
            continue
        mine, their = r.data[2], dict(zip(other.data[2][::2], other.data[2][1::2],
                                          strict=False))
        converted = False
        for k in range(0, len(mine) - 1, 2):
            value, want = mine[k + 1], their.get(mine[k])
            if isinstance(value, bytes) and isinstance(want, bytes) and value != want \
                    and b"\n" in value and _crlf(value) == want:
                mine[k + 1] = want
                converted = changed = True
        for k in range(0, len(mine) - 1, 2):
            if converted and word(mine[k]) == b"RFC822.SIZE" and mine[k] in their:
                mine[k + 1] = their[mine[k]]
    return changed


STRICT_SYNTAX = {
    "NOOP extra", "NAMESPACE extra", "ENABLE", "ID", 'ID ("a")', "STORE 1 FLAGS",
    "SEARCH BEFORE 32-Jan-2026", "FETCH 1 BODY[1.0]", "FETCH 1:* (BODY.PEEK[]<0>)"}


@deliberate("strict-syntax",
            "Dovecot accepts commands that the grammar of RFC 3501 section 9 (and RFC 5161, "
            "2971) forbids; we answer BAD: arguments to NOOP or NAMESPACE, ENABLE or ID "
            "without arguments, ID with an odd-length list, STORE without a flag list, an "
            "impossible date, section part 0, a partial without its length (<0>). Dovecot's "
            "answer is replaced by ours for exactly these commands.")
def _strict_syntax(ours: Event, dovecot: Event) -> bool:
    theirs = _tagged(dovecot)
    if command_text(ours) in STRICT_SYNTAX and response_lines(ours) == ["tag BAD"] \
            and theirs is not None and theirs.status == b"OK":
        dovecot.responses[:] = ours.responses
        return True
    return False


_APPEND_DATE = re.compile(r'APPEND \S+ (?:\([^)]*\) )?"([^"]*)"')


def _impossible_date(text: str) -> bool:
    """Whether ``text`` is an RFC 3501 date-time in form whose day or time does not exist."""
    m = re.fullmatch(r" ?(\d{1,2})-([A-Z][a-z]{2})-(\d{4}) (\d\d):(\d\d):(\d\d) [+-]\d{4}", text)
    if m is None:
        return False
    try:
        datetime.datetime.strptime(f"{m[1]}-{m[2]}-{m[3]}", "%d-%b-%Y")
    except ValueError:
        return True
    return int(m[4]) > 23 or int(m[5]) > 59 or int(m[6]) > 60


@deliberate("append-impossible-date",
            "APPEND with a date-time that does not exist (31-Feb, 29-Feb of a common year, "
            "32-Jan, hour 24, minute 60) is BAD here: RFC 3501 6.3.11 says the internal date "
            "SHOULD be set to the one given, which is impossible, and storing another date "
            "in its place would lose the client's intent silently (SEARCH dates are refused "
            "alike, see strict-syntax). Dovecot says OK and stores the current time. "
            "Dovecot's answer is replaced by ours for such APPENDs.")
def _append_impossible_date(ours: Event, dovecot: Event) -> bool:
    theirs = _tagged(dovecot)
    m = _APPEND_DATE.match(command_text(ours))
    if m and _impossible_date(m[1]) and response_lines(ours) == ["tag BAD"] \
            and theirs is not None and theirs.status == b"OK" \
            and command_text(ours) == command_text(dovecot):
        dovecot.responses[:] = ours.responses
        return True
    return False


answers("enable-not-authenticated",
        "ENABLE before login: BAD here (RFC 5161 section 3.1: valid only in the authenticated "
        "state); Dovecot's login process accepts it.",
        {"ENABLE IMAP4rev1": (["tag BAD"], ["* ENABLED", "tag OK"])})

answers("append-empty-message",
        "APPEND of an empty (zero-octet) message is stored here (RFC 5322 section 3.5 allows "
        "a message of no header fields and no body; RFC 3501 6.3.11 sets no minimum); Dovecot "
        "refuses it with NO.",
        {"APPEND INBOX {0+}": (["tag OK [APPENDUID <uidvalidity-1> 1]"], ["tag NO"])})

answers("dovecot-create-inbox",
        "CREATE INBOX on a fresh account: NO [ALREADYEXISTS] here (RFC 3501 6.3.3: 'It is an "
        "error to attempt to create INBOX'); Dovecot says OK while its INBOX is not yet on "
        "disk.",
        {"CREATE INBOX": (["tag NO [ALREADYEXISTS]"], ["tag OK"])})


@deliberate("lsub-nonexistent-noselect",
            "LSUB of a subscribed name whose mailbox no longer exists: we mark it \\Noselect "
            "(it cannot be selected; LIST-EXTENDED says \\NonExistent, RFC 5258 3.1); "
            "Dovecot returns no attribute. Our \\Noselect is removed where Dovecot lists the "
            "same name without it.")
def _lsub_nonexistent_noselect(ours: Event, dovecot: Event) -> bool:
    theirs = {r.data[3]: r for r in _data(dovecot, b"LSUB") if len(r.data) > 3}
    changed = False
    for r in _data(ours, b"LSUB"):
        other = theirs.get(r.data[3]) if len(r.data) > 3 else None
        if other is not None and b"\\NOSELECT" not in {word(a) for a in other.data[1]}:
            changed |= _strip_attributes(r, lambda a: a == b"\\NOSELECT")
    return changed


answers("read-only-refuses-changes",
        "In a mailbox opened with EXAMINE, STORE, EXPUNGE and MOVE answer NO [READ-ONLY] "
        "here (RFC 3501 6.3.2: no permanent changes; RFC 6851 3.3 MOVE expunges the source); "
        "Dovecot says OK and ignores STORE and EXPUNGE, and MOVEs (expunging from the "
        "read-only mailbox).",
        {"STORE 1 +FLAGS (\\\\Flagged)": (["tag NO [READ-ONLY]"], ["tag OK"]),
         "EXPUNGE": (["tag NO [READ-ONLY]"], ["tag OK"]),
         "MOVE 1 Trash": (["tag NO [READ-ONLY]"], ["* OK [COPYUID <uidvalidity-2> 1 2]",
                                                   "* 1 EXPUNGE", "tag OK"])})

answers("subscriptions-unchecked",
        "SUBSCRIBE of a name that does not exist is accepted (RFC 3501 6.3.6: the server MAY "
        "check; subscriptions outlive mailboxes anyway), and UNSUBSCRIBE of a name not "
        "subscribed answers NO [NONEXISTENT] (6.3.7: 'can't unsubscribe that name'); Dovecot "
        "does the opposite in both.",
        {"SUBSCRIBE nonexistent": (["tag OK"], ["tag NO"]),
         "UNSUBSCRIBE never-subscribed": (["tag NO [NONEXISTENT]"], ["tag OK"])})

answers("enable-empty",
        "ENABLE of nothing we support answers an empty '* ENABLED' (RFC 5161 section 4 "
        "grammar: 'ENABLED' *(SP capability)); Dovecot sends no ENABLED response then.",
        {"ENABLE FOO": (["* ENABLED", "tag OK"], ["tag OK"]),
         "ENABLE IMAP4rev1": (["* ENABLED", "tag OK"], ["tag OK"])})

answers("auth-mechanism-code",
        "AUTHENTICATE with a mechanism we do not offer: NO [CANNOT] (RFC 5530: can never "
        "succeed); Dovecot uses [ALERT].",
        {"AUTHENTICATE UNKNOWN-MECH": (["tag NO [CANNOT]"], ["tag NO [ALERT]"])})


def _highestmodseq_code(r: Response) -> bool:
    return r.kind == "status" and bool(r.code) and word(r.code[0]) == b"HIGHESTMODSEQ"


@deliberate("dovecot-lazy-highestmodseq",
            "At SELECT/EXAMINE we send '* OK [HIGHESTMODSEQ n]' every time, as RFC 7162 "
            "3.1.2.1 requires of a server with persistent MODSEQs; Dovecot only once some "
            "client used CONDSTORE on the mailbox (before that it sends neither HIGHESTMODSEQ "
            "nor NOMODSEQ). Ours is removed where Dovecot's SELECT/EXAMINE has none. Applied "
            "to every script.")
def _dovecot_lazy_highestmodseq(ours: Event, dovecot: Event) -> bool:
    # Each pipelined command keeps its tag: the command name is the second word.
    parts = [c.split()[:2] for c in ours.sent.split(PIPELINE_SEPARATOR)]
    if not any(len(w) == 2 and w[1].upper() in ("SELECT", "EXAMINE") for w in parts):
        return False
    if any(_highestmodseq_code(r) for r in dovecot.responses):
        return False
    before = len(ours.responses)
    ours.responses[:] = [r for r in ours.responses if not _highestmodseq_code(r)]
    return len(ours.responses) != before


ALWAYS.append("dovecot-lazy-highestmodseq")


def _modseq_value(value) -> bool:
    return isinstance(value, bytes) and value.isdigit()


@deliberate("modseq-values",
            "MOD-SEQUENCE values are each server's own (RFC 7162 3.1: only 'strictly "
            "increasing' per mailbox; Dovecot gives every message of one STORE the same "
            "MODSEQ, we one each): HIGHESTMODSEQ codes and STATUS items, FETCH MODSEQ items, "
            "SEARCH's and SORT's (MODSEQ n) and ESEARCH's MODSEQ n read '<modseq>' on both sides; "
            "scripts take the values they send from each server's own earlier answers "
            "(differential.Recall).")
def _modseq_values(ours: Event, dovecot: Event) -> bool:
    changed = False
    for event in (ours, dovecot):
        for r in event.responses:
            if r.code and word(r.code[0]) == b"HIGHESTMODSEQ" and len(r.code) > 1:
                r.code = [r.code[0], b"<modseq>"]
                changed = True
            data = r.data if r.kind == "data" else None
            if not data:
                continue
            first = word(data[0])
            if first == b"STATUS" and len(data) > 2 and isinstance(data[2], list):
                items = data[2]
                for k in range(0, len(items) - 1, 2):
                    if word(items[k]) == b"HIGHESTMODSEQ":
                        items[k + 1] = b"<modseq>"
                        changed = True
            elif first == b"ESEARCH":
                for k in range(1, len(data) - 1):
                    if word(data[k]) == b"MODSEQ" and _modseq_value(data[k + 1]):
                        data[k + 1] = b"<modseq>"
                        changed = True
            elif first in (b"SEARCH", b"SORT") and data and isinstance(data[-1], list) \
                    and len(data[-1]) == 2 and word(data[-1][0]) == b"MODSEQ":
                data[-1] = [data[-1][0], b"<modseq>"]
                changed = True
            elif len(data) == 3 and word(data[1]) == b"FETCH" and isinstance(data[2], list):
                items = data[2]
                for k in range(0, len(items) - 1, 2):
                    if word(items[k]) == b"MODSEQ" and isinstance(items[k + 1], list):
                        items[k + 1] = [b"<modseq>"]
                        changed = True
    return changed


@deliberate("preview-stored-at-append",
            "PREVIEW (LAZY) of a message whose preview was never asked for: we answer the "
            "preview, computed when the message was stored (RFC 8970 section 3: 'at append'); "
            "Dovecot computes previews on the first PREVIEW without LAZY and answers NIL until "
            "then (section 3.1 allows NIL while no preview is at hand). Where Dovecot's PREVIEW "
            "is NIL in the answer to a LAZY fetch and ours a string, ours is taken.")
def _preview_stored_at_append(ours: Event, dovecot: Event) -> bool:
    if "LAZY" not in command_text(ours).upper():
        return False
    changed = False
    for a, b in zip(_fetches(ours), _fetches(dovecot), strict=False):
        items_a, items_b = a.data[2], b.data[2]
        for k in range(0, len(items_b) - 1, 2):
            if word(items_b[k]) != b"PREVIEW" or items_b[k + 1] is not None:
                continue
            for j in range(0, len(items_a) - 1, 2):
                if word(items_a[j]) == b"PREVIEW" and isinstance(items_a[j + 1], bytes):
                    items_b[k + 1] = items_a[j + 1]
                    changed = True
    return changed


answers("dovecot-digest-preview",
        "PREVIEW of a multipart/digest whose first part has no Content-Type: that part is "
        "message/rfc822 (RFC 2046 5.1.5), and we look into no attached message for a preview "
        "(as Dovecot does for an explicit message/rfc822), so ours is the first text part "
        "after it; Dovecot reads the part as text/plain, its header fields included.",
        {"FETCH 1 PREVIEW": (['* 1 FETCH (PREVIEW "explicitly text")', "tag OK"],
                             ['* 1 FETCH (PREVIEW "From: one@example.com Subject: first first '
                              'body")', "tag OK"])})

def _fetches(event: Event) -> list[Response]:
    """The ``* n FETCH (...)`` responses of ``event``."""
    return [r for r in event.responses if r.kind == "data" and len(r.data) == 3
            and word(r.data[1]) == b"FETCH" and isinstance(r.data[2], list)]


answers("quota-root-of-unlimited-user",
        "A user without limits has no quota root: GETQUOTAROOT answers '* QUOTAROOT mailbox' "
        "with no root (RFC 9208 4.1.2 makes QUOTAROOT a required response; 4.2.2's example "
        "of a mailbox without a quota root) and GETQUOTA of the root is NO [NONEXISTENT] "
        "(4.1.1; a QUOTA response needs at least one resource, section 7). Dovecot sends no "
        "untagged response to either and says OK.",
        {'GETQUOTAROOT "INBOX"': (["* QUOTAROOT INBOX", "tag OK"], ["tag OK"]),
         'GETQUOTA "User quota"': (["tag NO [NONEXISTENT]"], ["tag OK"])})


# -- BINARY (RFC 3516): tests/test_differential_binary.py -----------------------------------------

def _items(r: Response) -> dict[bytes, object]:
    items = r.data[2]
    return {word(items[k]).upper(): items[k + 1] for k in range(0, len(items) - 1, 2)}


@deliberate("dovecot-unknown-cte-uid",
            "A BINARY.SIZE (or BINARY) whose part has an encoding neither server can decode: "
            "both end NO [UNKNOWN-CTE] (RFC 3516 4.2); Dovecot also sends a FETCH holding only "
            "the UID for that message in a FETCH that did not ask for UIDs, we send no FETCH "
            "for it (it has nothing asked for to carry). Dovecot's UID-only FETCH is dropped.")
def _dovecot_unknown_cte_uid(ours: Event, dovecot: Event) -> bool:
    a, b = _tagged(ours), _tagged(dovecot)
    if a is None or b is None or b.code != [b"UNKNOWN-CTE"] or a.code != b.code:
        return False
    if "UID" in command_text(ours).upper().split():
        return False
    before = len(dovecot.responses)
    dovecot.responses[:] = [r for r in dovecot.responses
                            if not (r in _fetches(dovecot) and list(_items(r)) == [b"UID"])]
    return len(dovecot.responses) != before


@deliberate("binary-section-grammar",
            "BINARY[1.MIME], BINARY[HEADER], BINARY[TEXT] and BINARY.SIZE[1]<0.2>: BAD here, "
            "as RFC 3516 section 8 has section-binary = \"[\" [section-part] \"]\" and no partial "
            "for BINARY.SIZE; Dovecot answers them (as BODY[] would, or ignoring the partial). "
            "Where ours is BAD and Dovecot's OK for such an item, ours is taken.")
def _binary_section_grammar(ours: Event, dovecot: Event) -> bool:
    text = command_text(ours).upper()
    if not re.search(r"BINARY(\.PEEK)?\[[0-9.]*[A-Z]|BINARY\.SIZE\[[0-9.]*\]<", text):
        return False
    a, b = _tagged(ours), _tagged(dovecot)
    if a is None or b is None or a.status != b"BAD" or b.status != b"OK":
        return False
    dovecot.responses[:] = ours.responses
    return True


@deliberate("dovecot-strict-base64",
            "A base64 part with characters outside the alphabet (spaces, '*', '!') and split "
            "padding: decoded here, the other characters ignored (RFC 2045 6.8: 'Any characters "
            "outside of the base64 alphabet are to be ignored'), as Python's b64decode does; "
            "Dovecot refuses the FETCH with NO [PARSE]. Where Dovecot says NO [PARSE] to a "
            "BINARY fetch that we answer, ours is taken.")
def _dovecot_strict_base64(ours: Event, dovecot: Event) -> bool:
    a, b = _tagged(ours), _tagged(dovecot)
    if "BINARY" not in command_text(ours).upper() or a is None or b is None:
        return False
    if a.status != b"OK" or (b.status, b.code) != (b"NO", [b"PARSE"]):
        return False
    dovecot.responses[:] = ours.responses
    return True


@deliberate("dovecot-binary-rfc822-part",
            "BINARY[n] of a message/rfc822 part: ours is the part's body as BODY[n] frames it "
            "(the CRLF before the next boundary belongs to the boundary, RFC 2046 5.1.1) with "
            "its leaves decoded, and BINARY.SIZE[n] its length; Dovecot's BINARY[n] carries "
            "that CRLF as well and its BINARY.SIZE[n] counts something else (123 for 233 "
            "octets sent). Where Dovecot's octets are ours plus CRLF, ours (and our size, "
            "which equals our octets' count) are taken.")
def _dovecot_binary_rfc822_part(ours: Event, dovecot: Event) -> bool:
    changed = False
    for a, b in zip(_fetches(ours), _fetches(dovecot), strict=False):
        ia, ib = _items(a), _items(b)
        for name, value in ia.items():
            m = re.fullmatch(rb"BINARY\[([0-9.]+)\]", name)
            other = ib.get(name)
            if m is None or not isinstance(value, bytes) or other != value + b"\r\n":
                continue
            size = b"BINARY.SIZE[" + m.group(1) + b"]"
            if size in ia and ia[size] != b"%d" % len(value):
                continue
            items = b.data[2]
            for k in range(0, len(items) - 1, 2):
                key = word(items[k]).upper()
                if key == name:
                    items[k + 1] = value
                elif key == size and size in ia:
                    items[k + 1] = ia[size]
            changed = True
    return changed


@deliberate("binary-append-stored-as-sent",
            "A message APPENDed as a literal8 (RFC 3516 4.3) is stored as sent: BODY[] gives its "
            "octets back (NUL as 0x80, as for any message: a literal cannot carry NUL) with its "
            "Content-Transfer-Encoding: binary; Dovecot re-encodes binary parts in base64 when "
            "it stores them (so its BODY[] and RFC822.SIZE differ). BINARY[] is the same on "
            "both. Where Dovecot's BODY[...] is ours with the binary part in base64, and its "
            "RFC822.SIZE that message's size, ours are taken.")
def _binary_append_stored_as_sent(ours: Event, dovecot: Event) -> bool:
    import base64
    changed = False
    for a, b in zip(_fetches(ours), _fetches(dovecot), strict=False):
        ia, ib = _items(a), _items(b)
        body = ib.get(b"BODY[]")
        if isinstance(body, bytes) and isinstance(ia.get(b"BODY[]"), bytes):
            head, sep, rest = body.partition(b"\r\n\r\n")
            try:
                decoded = base64.b64decode(rest)
            except ValueError:
                continue
            ours_body = ia[b"BODY[]"]
            want = head.replace(b"Content-Transfer-Encoding: base64",
                                b"Content-Transfer-Encoding: binary") + sep + decoded
            if want.replace(b"\x00", b"\x80") != ours_body:
                continue
            for k in range(0, len(b.data[2]) - 1, 2):
                key = word(b.data[2][k]).upper()
                if key in (b"BODY[]", b"RFC822.SIZE") and key in ia:
                    b.data[2][k + 1] = ia[key]
            changed = True
        for name, value in ib.items():
            if re.fullmatch(rb"BODY\[[0-9.]+\]", name) and isinstance(value, bytes) and \
                    isinstance(ia.get(name), bytes):
                try:
                    same = base64.b64decode(value).replace(b"\x00", b"\x80") == ia[name]
                except ValueError:
                    continue
                if same:
                    for k in range(0, len(b.data[2]) - 1, 2):
                        if word(b.data[2][k]).upper() == name:
                            b.data[2][k + 1] = ia[name]
                    changed = True
    return changed


answers("compress-unknown-mechanism",
        "COMPRESS with a mechanism other than DEFLATE is BAD here (RFC 4978 3: 'BAD - command "
        "unknown or arguments invalid'; section 5's grammar has algorithm = \"DEFLATE\" only); "
        "Dovecot answers NO. Neither turns compression on.",
        {"COMPRESS LZMA": (["tag BAD"], ["tag NO"])})


# -- METADATA (RFC 5464; tests/test_differential_metadata.py) ---------------------------------


def _metadata_pairs(event: Event) -> list[Response]:
    return [r for r in _data(event, b"METADATA") if len(r.data) == 3
            and isinstance(r.data[2], list) and len(r.data[2]) % 2 == 0]


@deliberate("metadata-entry-order",
            "RFC 5464 4.4.1 fixes no order for the entries of one METADATA response: ours "
            "lists each requested entry's subtree sorted by name, Dovecot in its dict's "
            "order. Both lists are sorted by entry name where they hold the same entries.")
def _metadata_entry_order(ours: Event, dovecot: Event) -> bool:
    changed = False
    for a, b in zip(_metadata_pairs(ours), _metadata_pairs(dovecot), strict=False):
        pairs = {id(r): [r.data[2][k:k + 2] for k in range(0, len(r.data[2]), 2)]
                 for r in (a, b)}
        names = {id(r): [word(p[0]) for p in pairs[id(r)]] for r in (a, b)}
        if len(names[id(a)]) < 2 or sorted(names[id(a)]) != sorted(names[id(b)]):
            continue
        # Applied wherever order could differ, not only where it did this time: Dovecot's
        # dict order varies from run to run, and matched ours once (a "never applied" flake).
        for r in (a, b):
            r.data[2] = [x for p in sorted(pairs[id(r)], key=lambda p: word(p[0])) for x in p]
        changed = True
    return changed


answers("metadata-binary-values",
        "RFC 5464 5 allows any octets in a value (value = nstring / literal8) and we store "
        "them, NUL included, answering with a literal8 (RFC 3516 4.2); Dovecot's dict "
        "refuses a value holding NUL (NO [CANNOT]).",
        {"SETMETADATA INBOX (/shared/nul ~{3})": (["+", "tag OK"], ["+", "tag NO [CANNOT]"]),
         "GETMETADATA INBOX /shared/nul": (
             ['* METADATA INBOX (/shared/nul "a\\x00b")', "tag OK"],
             ["* METADATA INBOX (/shared/nul NIL)", "tag OK"])})

answers("metadata-specialuse-writable",
        "RFC 6154 3 lets a client set a mailbox's special use through /private/specialuse "
        "(NO [USEATTR] for one the server cannot give); we do, with CREATE's rules (one use "
        "of a real folder). Dovecot 2.3 reports the entry read-only (NO [CANNOT]).",
        {'SETMETADATA Sent (/private/specialuse "\\\\\\\\Drafts")': (
            ["tag OK"], ["tag NO [CANNOT]"])})

answers("metadata-strict-grammar",
        "RFC 5464 5: entries and entry-values hold at least one entry, a value is nstring or "
        "literal8 (not an atom), and /private and /shared themselves are the roots of the "
        "entry tree, not entries with values, as /shared/vendor/<vendor-token> is the top of "
        "one vendor's entries (3.2.1): we answer BAD. Dovecot takes all five (and a value "
        "stored at /private then breaks its later SETMETADATAs with NO [SERVERBUG]).",
        {"GETMETADATA INBOX ()": (["tag BAD"], ["tag OK"]),
         "SETMETADATA INBOX ()": (["tag BAD"], ["tag OK"]),
         "SETMETADATA INBOX (/private/x FOO)": (["tag BAD"], ["tag OK"]),
         'SETMETADATA INBOX (/private "x")': (["tag BAD"], ["tag OK"]),
         'SETMETADATA INBOX (/shared/vendor/vendor.example "x")': (["tag BAD"], ["tag OK"])})
# -- NOTIFY (RFC 5465; tests/test_differential_notify.py) ----------------------------------

answers("notify-composition-rules",
        "RFC 5465 5: 'If one of MessageNew or MessageExpunge is specified, then both events "
        "MUST be specified' and FlagChange needs both, 'Otherwise, the server MUST respond "
        "with the tagged BAD response'; 6.1: only message events with SELECTED; 8: NOTIFY SET "
        "takes at least one event group.  We answer BAD with the reason; Dovecot 2.3 checks "
        "the first rule for SELECTED only and accepts the rest.",
        {"NOTIFY SET (personal (FlagChange))": (["tag BAD"], ["tag OK"]),
         "NOTIFY SET (personal (MessageNew))": (["tag BAD"], ["tag OK"]),
         "NOTIFY SET (selected (MailboxName))": (["tag BAD"], ["tag OK"]),
         "NOTIFY SET": (["tag BAD"], ["tag OK"])})

_SUPPORTED = ("(MessageNew MessageExpunge FlagChange MailboxName SubscriptionChange "
              "MailboxMetadataChange ServerMetadataChange)")

answers("notify-badevent",
        "RFC 5465 3.1: an unsupported event is refused with a tagged NO whose BADEVENT code "
        "'MUST list names of all events supported by the server', in parentheses (8: "
        "unsupported-events-code = \"BADEVENT\" SP \"(\" event *(SP event) \")\"); an event "
        "name the server does not know is such an event (8: event-ext).  Dovecot 2.3 answers "
        "BAD to an unknown one.  Both refuse the command and keep the previous NOTIFY setting.",
        {"NOTIFY SET (personal (XUnknownEvent))":
            ([f"tag NO [BADEVENT {_SUPPORTED}]"], ["tag BAD"])})

answers("notify-metadata-events",
        "RFC 5465 5.6, 5.7: we report MailboxMetadataChange and ServerMetadataChange (METADATA "
        "is here: an unsolicited METADATA response, RFC 5464 4.4.2, after each SETMETADATA "
        "that changes an entry; tests/test_imap_notify.py).  Dovecot 2.3 does not support "
        "them and refuses a NOTIFY SET asking for them with NO [BADEVENT event].",
        {"NOTIFY SET (personal (MessageNew MessageExpunge MailboxMetadataChange))":
            (["tag OK"], ["tag NO [BADEVENT MailboxMetadataChange]"]),
         "NOTIFY SET (personal (ServerMetadataChange))":
            (["tag OK"], ["tag NO [BADEVENT ServerMetadataChange]"])})


@deliberate("notify-own-changes",
            "RFC 5465 5: 'The server SHOULD omit notifying the client if the event is caused "
            "by this client' -- we leave out the LIST/STATUS a session's own CREATE, RENAME, "
            "DELETE, (UN)SUBSCRIBE, APPEND, COPY or MOVE would cause; Dovecot 2.3 sends them. "
            "Dovecot's extra LIST/STATUS responses are dropped from a wait for notifications "
            "when the rest is the same.")
def _notify_own_changes(ours: Event, dovecot: Event) -> bool:
    if not ours.sent.startswith("(wait for") or dovecot.sent != ours.sent:
        return False
    theirs = {tuple(render(r)) for r in ours.responses}
    kept = [r for r in dovecot.responses
            if tuple(render(r)) in theirs or not (
                r.kind == "data" and r.data and word(r.data[0]) in (b"LIST", b"STATUS"))]
    if len(kept) == len(dovecot.responses) or \
            [render(r) for r in kept] != [render(r) for r in ours.responses]:
        return False
    dovecot.responses[:] = kept
    return True
# -- CATENATE and URLAUTH (tests/test_differential_catenate.py) -------------------------------

def _tagged_code(event: Event) -> tuple[bytes, bytes]:
    tagged = _tagged(event)
    if tagged is None:
        return b"", b""
    return tagged.status, word(tagged.code[0]) if tagged.code else b""


@deliberate("catenate-unknown-section",
            "A CATENATE URL naming a section the message does not have (SECTION=7 of a "
            "two-part message, n.HEADER of a part that is no message/rfc822) is NO [BADURL "
            "url] here: RFC 4469 3 makes the message from the octets the URL references, and "
            "a URL that references nothing is a broken reference, not an empty part; Dovecot "
            "appends the empty string in its place (as FETCH answers such a section). "
            "Dovecot's OK is replaced by our BADURL.")
def _catenate_unknown_section(ours: Event, dovecot: Event) -> bool:
    if "CATENATE" not in command_text(ours).upper():
        return False
    if _tagged_code(ours) == (b"NO", b"BADURL") and _tagged_code(dovecot) == \
            (b"OK", b"APPENDUID"):
        dovecot.responses[:] = ours.responses
        return True
    return False


@deliberate("catenate-absolute-url",
            "A CATENATE URL in absolute form naming the session's own user "
            "(imap://user@host/mailbox/;UID=n) is taken here: RFC 4469 3 lets a URL be "
            "absolute or relative, and section 5 only forbids one naming another user without "
            "URLAUTH; Dovecot requires relative URLs and answers NO [BADURL] 'Relative URL "
            "required'. Dovecot's NO is replaced by our OK [APPENDUID].")
def _catenate_absolute_url(ours: Event, dovecot: Event) -> bool:
    if "URL \"IMAP://" not in command_text(ours).upper():
        return False
    if _tagged_code(ours) == (b"OK", b"APPENDUID") and _tagged_code(dovecot) == \
            (b"NO", b"BADURL"):
        dovecot.responses[:] = ours.responses
        return True
    return False


_VERIFIER = re.compile(rb"(:internal:)[0-9a-fA-F]{32,}")


def _mask_verifiers(tokens: list) -> bool:
    changed = False
    for k, t in enumerate(tokens):
        if isinstance(t, list):
            changed |= _mask_verifiers(t)
        elif isinstance(t, bytes) and _VERIFIER.search(t):
            tokens[k] = _VERIFIER.sub(rb"\1<verifier>", t)
            changed = True
    return changed


@deliberate("urlauth-verifier",
            "The verifier of a URLAUTH URL (RFC 4467 3.4.1, INTERNAL) is an HMAC under each "
            "server's own random mailbox key, so the two can never be equal (Dovecot's also "
            "starts with a version octet: 42 hex digits to our 40; enc-urlauth is 32*HEXDIG). "
            "Verifiers in GENURLAUTH and URLFETCH responses read '<verifier>' on both sides; "
            "each URL is sent back to the server that made it.")
def _urlauth_verifier(ours: Event, dovecot: Event) -> bool:
    changed = False
    for event in (ours, dovecot):
        for r in event.responses:
            changed |= _mask_verifiers(r.data)
            if r.code:
                changed |= _mask_verifiers(r.code)
    return changed


@deliberate("dovecot-urlfetch-notice",
            "URLFETCH of a URL that does not verify: both answer '* URLFETCH url NIL' (RFC "
            "4467 7.3); Dovecot adds an untagged NO saying why, which we do not (the reason "
            "would tell a fetcher which part of someone else's URL was wrong). Dovecot's "
            "untagged NO responses to URLFETCH are removed.")
def _dovecot_urlfetch_notice(ours: Event, dovecot: Event) -> bool:
    if not command_text(dovecot).upper().startswith("URLFETCH"):
        return False
    kept = [r for r in dovecot.responses if not (r.kind == "status" and r.status == b"NO")]
    if len(kept) == len(dovecot.responses):
        return False
    dovecot.responses[:] = kept
    return True


def _urlmech_code(r: Response) -> bool:
    return r.kind == "status" and bool(r.code) and word(r.code[0]) == b"URLMECH"


@deliberate("urlmech-at-select",
            "At SELECT/EXAMINE we send '* OK [URLMECH INTERNAL]', the URLAUTH mechanisms of the "
            "mailbox (RFC 4467 8.1: returned in an untagged OK to SELECT and EXAMINE; Cyrus "
            "sends it too); Dovecot 2.3 does not, even with URLAUTH configured. Ours is removed "
            "where Dovecot's SELECT/EXAMINE has none. Applied to every script.")
def _urlmech_at_select(ours: Event, dovecot: Event) -> bool:
    parts = [c.split()[:2] for c in ours.sent.split(PIPELINE_SEPARATOR)]
    if not any(len(w) == 2 and w[1].upper() in ("SELECT", "EXAMINE") for w in parts):
        return False
    if any(_urlmech_code(r) for r in dovecot.responses):
        return False
    before = len(ours.responses)
    ours.responses[:] = [r for r in ours.responses if not _urlmech_code(r)]
    return len(ours.responses) != before


ALWAYS.append("urlmech-at-select")
