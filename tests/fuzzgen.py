"""Hypothesis strategies for fuzzing the IMAP, SMTP and LMTP listeners.

IMAP commands are built from RFC 3501 / RFC 9051 section 9 (formal syntax): valid commands
with random arguments (sequence sets with ``*``, ``$``, huge numbers and reversed ranges; FETCH
items with sections and partials; SEARCH keys nested with OR/NOT/parentheses; STORE flag lists;
LIST patterns; mailbox names of every byte class and modified UTF-7), each string written as an
atom, a quoted string with escapes or a literal (``{n}``, ``{n+}``, ``~{n}``, zero length, and
now and then a length that does not match).  :func:`mutated` then flips, truncates,
duplicates, splices and inserts bytes (CR, LF, NUL, braces...).  A command is plain bytes, as
it goes on the wire; :mod:`tests.fuzzrun` sends it the way a client would (waiting for ``+``
after a synchronizing literal's announcement) and checks the server.

SMTP/LMTP (RFC 5321 section 4.1, RFC 2033): command lines with random arguments, DATA with
dot-stuffing or not, and the same mutations.
"""

from __future__ import annotations

from hypothesis import strategies as st

USER, PASSWORD = "fuzz", "fuzzpass"
CONTROL_USER = USER  # the control session watches the same account
MAILBOXES = ["INBOX", "Fuzz", "Fuzz/Sub", "Archive", "&AOQ-rger"]
"""Mailboxes the account holds at the start of a run (restored now and then)."""

STATES = ["not-auth", "auth", "selected", "idle", "authenticate"]

# -- lexical pieces ----------------------------------------------------------------------------

ATOM_CHARS = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) not in '(){ %*"\\]')
_SPECIAL_BYTES = [b"\r", b"\n", b"\r\n", b"\x00", b"{", b"}", b"(", b")", b"[", b"]", b'"',
                  b"\\", b" ", b"*", b"%", b"~", b"+", b"\xff", b"\x80", b"<", b">", b"$",
                  b"{0}\r\n", b"{5+}\r\n", b"~{3}\r\n", b"NIL", b"\t"]

small = st.integers(0, 12)
number = st.one_of(small, st.integers(0, 2**32 + 2),
                   st.sampled_from([0, 1, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, 10**30]))
atom = st.text(ATOM_CHARS, min_size=1, max_size=12)


def _text_of_every_class() -> st.SearchStrategy[bytes]:
    """Bytes a name or string may hold: ASCII, specials, controls, 8-bit, UTF-8, m-UTF-7."""
    pieces = st.one_of(
        st.text(ATOM_CHARS, min_size=1, max_size=6).map(str.encode),
        st.sampled_from([b"/", b"%", b"*", b"&", b"&-", b"&AOQ-", b"&Jjo!-", b"&AOQ", b"&*-",
                         b".", b"..", b"~", b" ", b'"', b"\\", b"INBOX", b"inbox", b"Fuzz",
                         b"\x00", b"\r", b"\n", b"\x01", b"\x7f", b"\xc3\xa4", b"\xff\xfe",
                         b"\xe2\x98\x83", b"\xf0\x9f\x92\xa9", b"\xed\xa0\x80"]),
        st.binary(min_size=1, max_size=4))
    return st.lists(pieces, min_size=0, max_size=5).map(b"".join)


any_text = _text_of_every_class()


@st.composite
def string(draw, value: st.SearchStrategy[bytes] = any_text, nil: bool = False) -> bytes:
    """An astring/string: atom when it can be one, quoted (escaped), or a literal of any kind."""
    data = draw(value)
    forms = ["quoted", "sync", "nonsync", "literal8"]
    if data and all(chr(c) in ATOM_CHARS for c in data):
        forms.append("atom")
    if nil:
        forms.append("NIL")
    form = draw(st.sampled_from(forms))
    if form == "atom":
        return data
    if form == "NIL":
        return b"NIL"
    if form == "quoted":
        return b'"' + data.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'
    # Now and then a literal whose announced length is not its real one.
    size = draw(st.one_of(st.just(len(data)), st.just(len(data)), st.just(len(data)),
                          st.integers(0, len(data) + 3),
                          # over max_literal_size (refused, or read and discarded if LITERAL+)
                          st.sampled_from([1_000_001, 3_000_000, 10**12, 10**18 - 1])))
    head = {"sync": b"{%d}", "nonsync": b"{%d+}", "literal8": b"~{%d}"}[form] % size
    return head + b"\r\n" + data


def astring_of(*values: bytes) -> st.SearchStrategy[bytes]:
    return string(st.sampled_from(list(values)))


mailbox = string(st.one_of(st.sampled_from([m.encode() for m in MAILBOXES]), any_text,
                           st.sampled_from([b"Fuzz/New", b"a/b/c", b"INBOX/x", b"x/", b"/x"])))
# Mostly numbers the mailbox has (it holds 6 to 40 messages), so that commands get past the
# set and into their own work; now and then 0, huge ones and "*".
seq_number = st.one_of(st.integers(1, 8).map(str), st.integers(1, 8).map(str), st.just("*"),
                       number.map(str))
seq_range = st.tuples(seq_number, seq_number).map(":".join)
sequence_set = st.one_of(
    st.lists(st.one_of(seq_number, seq_range), min_size=1, max_size=3).map(",".join),
    st.just("$"), st.just("1:*"),
    st.lists(st.one_of(seq_number, seq_range), min_size=1, max_size=3).map(",".join),
    st.sampled_from(["", ",", "1,", ":", "1:", "*:*", "-1", "1.5", "0:0", "$,1", "4294967296"]),
).map(str.encode)
date = st.one_of(
    st.tuples(st.integers(1, 31), st.sampled_from(["Jan", "Feb", "Jul", "Dec", "jan"]),
              st.integers(1900, 2100)).map(lambda t: f"{t[0]}-{t[1]}-{t[2]}"),
    st.sampled_from(["0-Jan-2000", "32-Feb-2020", "1-Foo-2000", "1-Jan-99999999999", "", "-",
                     "29-Feb-2021", "1-Jan-0"]),
).map(str.encode).flatmap(lambda d: st.sampled_from([d, b'"' + d + b'"']))
date_time = st.sampled_from([b'"17-Jul-1996 02:44:25 -0700"', b'" 1-Jan-2000 00:00:00 +0000"',
                             b'"31-Dec-9999 23:59:59 +9999"', b'"1-Jan-2000"', b'"garbage"',
                             b'"17-Jul-1996 25:61:61 -0700"', b"17-Jul-1996"])


def joined(parts: list[bytes]) -> bytes:
    return b" ".join(p for p in parts if p is not None)


def paren(items: list[bytes]) -> bytes:
    return b"(" + b" ".join(items) + b")"


# -- flags, FETCH items, SEARCH keys -----------------------------------------------------------

flag = st.one_of(
    st.sampled_from([b"\\Seen", b"\\Answered", b"\\Flagged", b"\\Deleted", b"\\Draft",
                     b"\\Recent", b"\\Bogus", b"\\*", b"$Forwarded", b"$Junk", b"\\", b"$"]),
    atom.map(str.encode))
flag_list = st.lists(flag, max_size=5).flatmap(
    lambda fl: st.sampled_from([paren(fl), b" ".join(fl)]) if fl else st.just(b"()"))

_SECTION_TEXT = st.sampled_from(["", "HEADER", "TEXT", "MIME", "HEADER.FIELDS (FROM TO)",
                                 "HEADER.FIELDS.NOT (SUBJECT)", "HEADER.FIELDS ()",
                                 "HEADER.FIELDS (\"X-Q\" {1}", "HEADER.FIELDS", "BOGUS"])
_PART = st.lists(st.one_of(st.integers(1, 3), st.integers(0, 2**32)).map(str),
                min_size=0, max_size=3).map(".".join)


@st.composite
def _section(draw) -> str:
    part, text = draw(_PART), draw(_SECTION_TEXT)
    spec = ".".join(x for x in (part, text) if x)
    partial = draw(st.one_of(st.just(""), st.tuples(number, number).map(
        lambda t: f"<{t[0]}.{t[1]}>"), st.sampled_from(["<0>", "<1.0>", "<", "<x.y>", "<-1.2>"])))
    return f"[{spec}]{partial}"


fetch_att = st.one_of(
    st.sampled_from(["FLAGS", "UID", "INTERNALDATE", "RFC822.SIZE", "ENVELOPE", "BODY",
                     "BODYSTRUCTURE", "RFC822", "RFC822.HEADER", "RFC822.TEXT", "MODSEQ",
                     "ALL", "FAST", "FULL", "BINARY.SIZE[1]", "BOGUS", "X-GM-MSGID"]),
    st.tuples(st.sampled_from(["BODY", "BODY.PEEK", "BINARY", "BINARY.PEEK"]),
              _section()).map("".join),
).map(str.encode)
fetch_items = st.one_of(fetch_att, st.lists(fetch_att, max_size=6).map(paren))


def _search_key(children):
    str_arg = string(st.one_of(any_text, st.sampled_from([b"fuzz", b"Subject", b"@", b""])))
    return st.one_of(
        st.sampled_from([b"ALL", b"ANSWERED", b"DELETED", b"DRAFT", b"FLAGGED", b"NEW",
                         b"OLD", b"RECENT", b"SEEN", b"UNANSWERED", b"UNDELETED", b"UNDRAFT",
                         b"UNFLAGGED", b"UNSEEN", b"BOGUS", b"OR", b"NOT", b"UID", b"HEADER"]),
        st.tuples(st.sampled_from([b"BCC", b"BODY", b"CC", b"FROM", b"SUBJECT", b"TEXT",
                                   b"TO"]), str_arg).map(joined),
        st.tuples(st.sampled_from([b"BEFORE", b"ON", b"SINCE", b"SENTBEFORE", b"SENTON",
                                   b"SENTSINCE"]), date).map(joined),
        st.tuples(st.sampled_from([b"KEYWORD", b"UNKEYWORD"]), flag).map(joined),
        st.tuples(st.sampled_from([b"LARGER", b"SMALLER", b"MODSEQ"]),
                  number.map(lambda n: str(n).encode())).map(joined),
        st.tuples(st.just(b"HEADER"), str_arg, str_arg).map(joined),
        st.tuples(st.just(b"UID"), sequence_set).map(joined),
        sequence_set,
        st.tuples(st.just(b"NOT"), children).map(joined),
        st.tuples(st.just(b"OR"), children, children).map(joined),
        st.lists(children, min_size=0, max_size=3).map(paren),
    )


search_key = st.recursive(st.just(b"ALL"), _search_key, max_leaves=12)
deep_search = st.integers(1, 400).map(lambda n: b"NOT " * n + b"ALL" if n % 2 else
                                      b"(" * n + b"ALL" + b")" * n)

# -- commands by state ------------------------------------------------------------------------

tag = st.one_of(st.just(b"T"), st.just(b"T"), st.just(b"T"),
                st.sampled_from([b"*", b"+", b"", b"t{1}", b"a(b", b"\xff", b"T]", b"T%"]))


@st.composite
def _uid(draw, name: bytes) -> bytes:
    return (b"UID " if draw(st.booleans()) else b"") + name


def _c(*parts) -> st.SearchStrategy[bytes]:
    """A command line from strategies and constants (bytes), joined by spaces."""
    return st.tuples(*[p if isinstance(p, st.SearchStrategy) else st.just(p)
                       for p in parts]).map(joined)


list_pattern = string(st.one_of(any_text, st.sampled_from(
    [b"*", b"%", b"Fuzz/%", b"*/*", b"%/%", b"INBOX", b"", b"&AOQ-*", b"**", b"%*%"])))
status_items = st.lists(st.sampled_from([b"MESSAGES", b"RECENT", b"UIDNEXT", b"UIDVALIDITY",
                                         b"UNSEEN", b"SIZE", b"HIGHESTMODSEQ", b"DELETED",
                                         b"BOGUS"]), min_size=1, max_size=5).map(paren)

# One message of an APPEND (RFC 3502 MULTIAPPEND: several in one command).
_appended = _c(st.one_of(st.none(), flag_list.filter(lambda f: f[:1] == b"(")),
               st.one_of(st.none(), date_time),
               string(st.sampled_from([b"Subject: fuzz\r\n\r\nbody\r\n", b"", b"\r\n",
                                       b"From: a@b\r\n\r\n\x00\xff\r\n.\r\n", b"x" * 300,
                                       b"Content-Type: multipart/mixed; boundary=\"\"\r\n\r\n"
                                       b"--\r\n\r\n----\r\n"])))
# RFC 5464 METADATA: entry names good and bad (3.2.1), values of every string form and NIL.
_entry = string(st.sampled_from([b"/private/comment", b"/shared/comment", b"/private/specialuse",
                                 b"/shared/admin", b"/private", b"/x*", b"/a//b", b"/Private/A/",
                                 b"/shared/vendor/vendor.fuzz/\xc3\xa9"]))
_metadata_mailbox = st.one_of(mailbox, st.just(b'""'))
metadata_command = st.one_of(
    _c(b"GETMETADATA", st.sampled_from([None, b"(DEPTH infinity)", b"(MAXSIZE 0 DEPTH 1)",
                                        b"(DEPTH 2)", b"()", b"(MAXSIZE"]),
       _metadata_mailbox, st.one_of(_entry, st.lists(_entry, max_size=3).map(paren))),
    _c(b"SETMETADATA", _metadata_mailbox,
       st.lists(_c(_entry, string(st.one_of(any_text, st.just(b"\\Sent")), nil=True)),
                max_size=3).map(paren)),
)
any_state_command = st.one_of(
    st.just(b"CAPABILITY"), st.just(b"NOOP"), st.just(b"NOOP extra"),
    _c(b"ID", st.one_of(st.just(b"NIL"), st.lists(string(nil=True), max_size=6).map(paren))),
    st.just(b"LOGOUT"), st.just(b"STARTTLS"), st.just(b"COMPRESS DEFLATE"),
    st.text(ATOM_CHARS, min_size=1, max_size=10).map(str.encode),  # unknown commands
)
not_auth_command = st.one_of(
    _c(b"LOGIN", string(st.sampled_from([USER.encode(), b"nobody", b"", b"\xff"])),
       string(st.sampled_from([PASSWORD.encode(), b"wrong", b""]))),
    _c(b"AUTHENTICATE", st.sampled_from([b"PLAIN", b"LOGIN", b"CRAM-MD5", b"plain", b""]),
       st.one_of(st.none(), st.sampled_from([b"=", b"AGZ1enoAZnV6enBhc3M=", b"!!", b"AA=="]))),
)
auth_command = st.one_of(
    _c(st.sampled_from([b"SELECT", b"EXAMINE"]), mailbox,
       st.sampled_from([None, b"(CONDSTORE)", b"(QRESYNC (1 2))", b"()", b"(BOGUS"])),
    _c(st.sampled_from([b"CREATE", b"DELETE", b"SUBSCRIBE", b"UNSUBSCRIBE"]), mailbox),
    _c(b"RENAME", mailbox, mailbox),
    _c(st.sampled_from([b"LIST", b"LSUB"]), list_pattern, list_pattern),
    _c(b"LIST", st.sampled_from([b"(SUBSCRIBED)", b"(RECURSIVEMATCH)", b"()", b"(SPECIAL-USE"
                                 b" REMOTE)"]), list_pattern,
       st.lists(list_pattern, max_size=3).map(paren),
       st.sampled_from([None, b"RETURN (CHILDREN)", b"RETURN (SUBSCRIBED STATUS (MESSAGES"
                        b" UIDNEXT))", b"RETURN (STATUS ())", b"RETURN"])),
    _c(b"STATUS", mailbox, status_items),
    _c(b"APPEND", mailbox, st.lists(_appended, min_size=1, max_size=3).map(b" ".join)),
    st.just(b"NAMESPACE"),
    _c(b"ENABLE", st.lists(st.sampled_from([b"CONDSTORE", b"QRESYNC", b"UTF8=ACCEPT",
                                            b"IMAP4rev2", b"BOGUS"]), max_size=3).map(
        b" ".join)),
    st.just(b"IDLE"),
    metadata_command,
)
selected_command = st.one_of(
    st.sampled_from([b"CHECK", b"CLOSE", b"UNSELECT", b"EXPUNGE"]),
    _c(b"UID EXPUNGE", sequence_set),
    _c(_uid(b"FETCH"), sequence_set, fetch_items,
       st.one_of(st.none(), st.none(), st.sampled_from([b"(CHANGEDSINCE 1)", b"()",
                                                        b"(CHANGEDSINCE 1 VANISHED)"]))),
    _c(_uid(b"SEARCH"), st.sampled_from([None, b"CHARSET UTF-8", b"CHARSET KOI8-R",
                                         b"RETURN (MIN MAX COUNT)", b"RETURN (SAVE)",
                                         b"RETURN ()"]),
       st.one_of(search_key, search_key, deep_search)),
    _c(_uid(b"STORE"), sequence_set,
       st.one_of(st.none(), st.none(), st.sampled_from([b"(UNCHANGEDSINCE 5)",
                                                        b"(UNCHANGEDSINCE 0)"])),
       st.sampled_from([b"FLAGS", b"+FLAGS", b"-FLAGS", b"FLAGS.SILENT", b"+FLAGS.SILENT",
                        b"-FLAGS.SILENT", b"BOGUS"]), flag_list),
    _c(st.sampled_from([b"COPY", b"MOVE", b"UID COPY", b"UID MOVE"]), sequence_set, mailbox),
    _c(_uid(b"REPLACE"), sequence_set, mailbox, _appended),  # RFC 8508 (sets: BAD)
)


@st.composite
def command(draw, state: str) -> bytes:
    """One command line (with its literals), mostly one that fits ``state``."""
    by_state = {"not-auth": not_auth_command, "auth": auth_command,
                "selected": selected_command}
    fitting = by_state.get(state, selected_command if state == "idle" else not_auth_command)
    group = draw(st.sampled_from([fitting, fitting, fitting, any_state_command,
                                  not_auth_command, auth_command, selected_command]))
    body = draw(group)
    line = draw(tag) + b" " + body
    # (Hypothesis draws the smallest value often: the rare branches test a larger one.)
    if draw(st.integers(0, 30)) == 30:
        line += b" " + b"x" * draw(st.sampled_from([70_000, 9_000]))  # over max_line_length
    return line + b"\r\n"


# -- mutations ---------------------------------------------------------------------------------

@st.composite
def mutated(draw, base: st.SearchStrategy[bytes], donor: st.SearchStrategy[bytes]) -> bytes:
    """``base`` after a few byte flips, truncations, duplications, splices and insertions."""
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        n = len(data)
        op = draw(st.sampled_from(["flip", "truncate", "duplicate", "splice", "insert",
                                   "delete", "insert"]))
        at = draw(st.integers(0, n))
        if op == "flip" and n:
            at = min(at, n - 1)
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "truncate":
            del data[at:]
        elif op == "duplicate" and n:
            end = draw(st.integers(at, n))
            data[at:at] = data[at:end] * draw(st.integers(1, 3))
        elif op == "splice":
            data[at:] = draw(donor)[draw(st.integers(0, 20)):]
        elif op == "insert":
            data[at:at] = draw(st.sampled_from(_SPECIAL_BYTES))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 8))]
    return bytes(data)


_IDLE_LINES = st.sampled_from([b"DONE\r\n", b"done\r\n", b"DONE \r\n", b"DONE", b"\r\n",
                               b"DONE extra\r\n", b"T NOOP\r\nDONE\r\n", b"DONE\x00\r\n",
                               b"{5}\r\nDONE\r\n", b"x" * 9000 + b"\r\nDONE\r\n"])
_SASL_LINES = st.sampled_from([b"AGZ1enoAZnV6enBhc3M=\r\n", b"*\r\n", b"=\r\n", b"\r\n",
                               b"AA==\r\n", b"!!\r\n", b"AGZ1enoAd3Jvbmc=\r\n", b"{5}\r\n",
                               b"ZnV6egBmdXp6AGZ1enpwYXNz\r\n", b"AAAA" * 3000 + b"\r\n"])


@st.composite
def imap_example(draw) -> tuple[str, list[bytes]]:
    """A state and the commands sent in it: generated ones, and mutated ones.  In IDLE and
    mid-AUTHENTICATE the first line is one for IDLE (DONE or not) or a SASL response."""
    state = draw(st.sampled_from(STATES))
    commands, then = [], state
    if state == "idle":
        commands.append(draw(_IDLE_LINES))
        then = "selected"
    elif state == "authenticate":
        commands.append(draw(_SASL_LINES))
        then = draw(st.sampled_from(["auth", "not-auth"]))
    for _ in range(draw(st.integers(1, 3))):
        generated = command(then)
        if draw(st.integers(0, 3)) == 3:
            commands.append(draw(mutated(generated, command(then))))
        else:
            commands.append(draw(generated))
    return state, commands


# -- SMTP / LMTP -------------------------------------------------------------------------------

address = st.one_of(
    st.sampled_from([b"<fuzz@example.com>", b"<FUZZ@localhost>", b"<fuzz+Fuzz@example.com>",
                     b"<nobody@example.com>", b"<fuzz@elsewhere.org>", b"<>", b"<",
                     b"fuzz@example.com", b"<@a,@b:fuzz@example.com>", b'<"a b"@example.com>',
                     b"<fuzz@[127.0.0.1]>", b"<\xc3\xa4@example.com>", b"<a\x00b@example.com>"]),
    any_text.map(lambda t: b"<" + t + b">"))
mail_params = st.lists(st.sampled_from([b"SIZE=100", b"SIZE=99999999999999", b"BODY=8BITMIME",
                                        b"BODY=BINARYMIME", b"SMTPUTF8", b"SIZE=", b"X=Y",
                                        b"=", b"AUTH=<>"]), max_size=3).map(b" ".join)
message_body = st.one_of(
    st.just(b"Subject: fuzz\r\n\r\nhello\r\n"),
    st.binary(max_size=200),
    st.sampled_from([b"..leading dot\r\n", b"a\nbare LF\r\n", b"\r\n.\r\n", b"x" * 2000 + b"\r\n",
                     b"Subject: \xff\r\n\r\n\x00\r\n", b""]))


_OTHER_SMTP = st.sampled_from([
    b"RSET", b"NOOP", b"VRFY fuzz", b"EXPN list", b"HELP", b"STARTTLS", b"AUTH PLAIN",
    b"AUTH LOGIN", b"AUTH PLAIN AGZ1enoAZnV6enBhc3M=", b"BDAT 5", b"XCLIENT ADDR=1.2.3.4",
    b"EHLO again", b"LHLO again", b"HELO again", b"MAIL", b"RCPT", b"DATA extra", b"", b"\x00",
    b"x" * 1500, b"MAIL FROM:<a@b> RCPT TO:<c@d>", b"QUIT now"])


@st.composite
def smtp_example(draw, lmtp: bool) -> bytes:
    """A session's lines: a greeting, transactions (MAIL, RCPTs, DATA), odd commands between."""
    hello = b"LHLO" if lmtp else draw(st.sampled_from([b"EHLO", b"HELO"]))
    lines = []
    if draw(st.integers(0, 5)):
        lines.append(hello + b" " + draw(st.sampled_from([b"fuzz.example", b"", b"[1.2.3.4]",
                                                          b"\xff", b"x" * 600])))
    for _ in range(draw(st.integers(0, 2))):
        steps = [b"MAIL FROM:" + draw(address) + b" " + draw(mail_params)]
        steps += [b"RCPT TO:" + draw(address) for _ in range(draw(st.integers(0, 3)))]
        if draw(st.integers(0, 4)):
            body = draw(message_body)
            if draw(st.booleans()):  # dot-stuffed, as a client should
                body = b"\r\n".join(b"." + x if x.startswith(b".") else x
                                     for x in body.split(b"\r\n"))
            steps.append(b"DATA")
            steps.append(body + (b"" if body.endswith(b"\r\n") else b"\r\n") + b".")
        for _ in range(draw(st.integers(0, 2))):  # an odd command somewhere in it
            steps.insert(draw(st.integers(0, len(steps))), draw(_OTHER_SMTP))
        lines += steps
    raw = b"".join(line + b"\r\n" for line in lines)
    if draw(st.integers(0, 3)) == 3:
        raw = draw(mutated(st.just(raw), st.just(raw)))
    return raw
