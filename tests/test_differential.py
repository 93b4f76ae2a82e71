"""Differential IMAP scripts: every command and item we implement, against Dovecot.

Each :class:`~differential.Script` below is played against a real ``imapserver`` and Debian's
Dovecot on fresh accounts seeded through the conversation itself (APPEND with fixed dates and
flags), and the normalised transcripts must be equal (tests/differential.py says what is
normalised; docs/differential.md lists the deliberate differences and how to add a script).

What we advertise (imapserver/imap/session.py): IMAP4rev1 LITERAL+ SASL-IR ID ENABLE IDLE
NAMESPACE UIDPLUS MOVE UNSELECT CHILDREN SPECIAL-USE LIST-EXTENDED LIST-STATUS MULTIAPPEND
APPENDLIMIT ESEARCH SEARCHRES WITHIN CONTEXT=SEARCH SORT SORT=DISPLAY THREAD=ORDEREDSUBJECT
THREAD=REFERENCES ESORT STATUS=SIZE OBJECTID SAVEDATE PREVIEW; all of these Dovecot advertises
too except APPENDLIMIT (not compared) and OBJECTID (Dovecot 2.3.19 lacks it).  The issue-12
extensions have their scripts in tests/test_differential_{esearch,sort,objectid}.py.  QUOTA
(with QUOTA=RES-STORAGE, QUOTA=RES-MESSAGE), CREATE-SPECIAL-USE and UNAUTHENTICATE are judged
in tests/test_differential_quota.py, against a Dovecot with its quota plugins.

Scripts for the issue-11 defects are in tests/test_differential_issue11.py; \\Recent (issue 11
case 3) is compared in every script.
"""

from __future__ import annotations

import base64

import pytest
from corpus import SAMPLES
from differential import (
    DELIBERATE,
    PASSWORD,
    Done,
    Idle,
    Pipelined,
    Raw,
    Script,
    WaitFor,
    append,
    date,
    lit,
    parse_response,
    plus,
    render,
    servers,
)
from mailgen import message
from test_imap_render_dovecot import BARE_LF
from test_imap_render_dovecot import KNOWN_DIFFERENCES as RENDER_DIFFERENCES

from imapserver.imap.commands.fetch import BATCH, CONTENT_BATCH, STREAM_ABOVE
from imapserver.imap.protocol import SPOOL_ABOVE
from mailstore.content import DEFAULT_CHUNK


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential")) as pair:
        yield pair


def crlf(text: str) -> bytes:
    return text.replace("\n", "\r\n").encode("utf-8")


# -- the seed: a small mailbox exercising flags, keywords, dates, MIME and addresses ----------

M1 = crlf("""\
Date: Sat, 21 Nov 2026 12:00:00 +0000
From: Alice Example <alice@example.com>
Sender: secretary@example.com
Reply-To: replies@example.com
To: Bob <bob@example.org>, carol@example.org
Cc: "Dave, Jr." <dave@example.org>
Bcc: mallory@example.net
Subject: Lunch on Friday
Message-ID: <lunch@example.com>
In-Reply-To: <plans@example.org>
MIME-Version: 1.0
Content-Type: text/plain; charset=us-ascii

Shall we have lunch on Friday?
The usual place.
""")
M2 = crlf("""\
Date: Sun, 22 Nov 2026 09:30:00 +0100
From: bob@example.org
To: Alice Example <alice@example.com>
Subject: Re: Lunch on Friday
Message-ID: <re-lunch@example.org>
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="b1"

Preamble.
--b1
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: quoted-printable

Yes, at noon. Caf=C3=A9?
--b1
Content-Type: application/pdf; name="menu.pdf"
Content-Disposition: attachment; filename="menu.pdf"
Content-Transfer-Encoding: base64

JVBERi0xLjQKJcfsj6IKMSAwIG9iago8PC9UeXBlL0NhdGFsb2c+PgplbmRvYmoK
--b1--
Epilogue.
""")
M3 = crlf("""\
Date: Mon, 02 Nov 2026 08:00:00 -0500
From: Carol <carol@example.org>
To: alice@example.com
Subject: Draft: budget
Message-ID: <budget@example.org>

Numbers to follow. Budget 2027.
""")
M4 = crlf("""\
Date: Tue, 24 Nov 2026 23:59:59 +0000
From: "Eve" <eve@example.net>
To: undisclosed-recipients:;
Subject: deleted soon
X-Priority: 1

Junk.
""")
M5 = crlf("""\
Date: Wed, 25 Nov 2026 10:00:00 +0000
From: =?utf-8?q?J=C3=B6rg?= <joerg@example.de>
To: alice@example.com
Subject: =?utf-8?b?R3LDvMOfZQ==?=
MIME-Version: 1.0
Content-Type: text/plain; charset=utf-8
Content-Transfer-Encoding: 8bit

Grüße aus Köln, straße.
""") + b"x" * 2000 + b"\r\n"

SEED = [(M1, "\\Seen"), (M2, "\\Answered \\Flagged $Work"), (M3, "\\Draft"),
        (M4, "\\Deleted \\Seen"), (M5, "")]


def seed(client: str = "A", mailbox: str = "INBOX") -> list:
    """APPEND the seed messages with fixed dates and flags (before any session selects the
    mailbox, so no session is told of a keyword in a FETCH first)."""
    return [(client, append(mailbox, raw, flags, date(n)))
            for n, (raw, flags) in enumerate(SEED, 1)]


def s(client: str, *actions) -> list:
    return [(client, a) for a in actions]


SCRIPTS: list[Script] = []


def script(name: str, steps: list, **kw) -> None:
    """Add a script."""
    SCRIPTS.append(Script(name, steps, **kw))


# -- any state ----------------------------------------------------------------------------------

script("capability-noop-logout", [
    *s("Z", "CAPABILITY", "NOOP", "LOGOUT"),
    *s("A", "CAPABILITY", "NOOP", "LOGOUT"),
], anonymous=("Z",))

def plain(user: str) -> bytes:
    """The SASL PLAIN response for the script's account (RFC 4616)."""
    return base64.b64encode(f"\0{user}\0{PASSWORD}".encode())


# One failed login per session: Dovecot delays further failures from the same address.
script("login", [
    ("Z1", "LOGIN nobody-here secret"), ("Z2", lambda user: f"LOGIN {user} wrong"),
    ("Z3", "LOGIN"), ("Z3", "LOGIN onlyuser"), ("Z3", "AUTHENTICATE UNKNOWN-MECH"),
    ("Z3", 'LOGIN "a b" "c d"'),
    ("Z4", "AUTHENTICATE PLAIN " + base64.b64encode(b"\0x\0y").decode()),
    ("Z5", ("LOGIN ", lit(b"nouser"), " ", plus(b"nopass"))),
    ("Z6", lambda user: ("LOGIN ", lit(user.encode()), " ", plus(PASSWORD.encode()))),
    ("Z6", "NOOP"), ("Z6", "LOGIN again please"),
    ("Z7", lambda user: "AUTHENTICATE PLAIN " + plain(user).decode()),
    ("Z7", 'LIST "" INBOX'),
    ("Z8", "AUTHENTICATE PLAIN"), ("Z8", lambda user: Raw(plain(user) + b"\r\n")),
    ("Z9", "AUTHENTICATE PLAIN"), ("Z9", Raw(b"*\r\n")),
], anonymous=("Z1", "Z2", "Z3", "Z4", "Z5", "Z6", "Z7", "Z8", "Z9"),
   deliberate=("auth-mechanism-code",))

NOT_AUTHENTICATED = [
    "SELECT INBOX", "EXAMINE INBOX", "CREATE x", "DELETE x", "RENAME x y", "SUBSCRIBE x",
    "UNSUBSCRIBE x", 'LIST "" *', 'LSUB "" *', "STATUS INBOX (MESSAGES)",
    "APPEND INBOX {0+}\r\n", "CHECK", "CLOSE", "UNSELECT", "EXPUNGE", "SEARCH ALL",
    "FETCH 1 FLAGS", "STORE 1 FLAGS (\\Seen)", "COPY 1 INBOX", "MOVE 1 INBOX",
    "UID FETCH 1 FLAGS", "IDLE", "ENABLE IMAP4rev1", "NAMESPACE"]
# Two commands a session: Dovecot's login process hangs up after a few bad commands.
script("not-authenticated-state",
       [(f"Z{n // 2}", command) for n, command in enumerate(NOT_AUTHENTICATED)],
       anonymous=tuple(f"Z{n}" for n in range(len(NOT_AUTHENTICATED) // 2 + 1)),
       deliberate=("enable-not-authenticated",))

script("authenticated-state", s(
    "A", "CHECK", "CLOSE", "UNSELECT", "EXPUNGE", "UID EXPUNGE 1", "SEARCH ALL",
    "FETCH 1 FLAGS", "STORE 1 FLAGS (\\Seen)", "COPY 1 INBOX", "MOVE 1 INBOX",
    "UID FETCH 1 FLAGS", "UID SEARCH ALL", "UID STORE 1 FLAGS (\\Seen)", "UID COPY 1 INBOX",
    "UID MOVE 1 INBOX", "LOGIN x y", "AUTHENTICATE PLAIN"))

script("bad-syntax", [
    *seed(),
    *s("A", "SELECT INBOX", "FOO", "NOOP extra", "FETCH", "FETCH 1", "FETCH 1 (FLAGS",
       "FETCH 1 FLAGS)", "FETCH 1 (NOSUCHITEM)", "FETCH 1 BODY[NOPE]", "FETCH 1 BODY[1.0]",
       "FETCH 0 FLAGS", "FETCH 1:0 FLAGS", "FETCH x FLAGS", "FETCH 1,,2 FLAGS",
       "FETCH 99 FLAGS", "FETCH 3:99 FLAGS", "FETCH 5:* FLAGS", "FETCH *:4 FLAGS",
       "UID FETCH 99 FLAGS", "UID FETCH 0 FLAGS", "UID FETCH 3:99 FLAGS",
       "STORE 1 FLAGS", "STORE 1 NOTFLAGS (\\Seen)", "STORE 99 +FLAGS (\\Seen)",
       "STORE 1 +FLAGS (\\Nonexistent)", "SEARCH", "SEARCH NOSUCHKEY", "SEARCH FROM",
       "SEARCH BEFORE 32-Jan-2026", "SEARCH LARGER x", "SEARCH (ALL", "SEARCH 0",
       "SEARCH CHARSET NOSUCH-CHARSET ALL", "COPY 99 Trash", "COPY 1", "MOVE 99 Trash",
       "CREATE", "RENAME x", "LIST", 'LIST ""', "STATUS INBOX", "STATUS INBOX ()",
       "STATUS INBOX (NOSUCH)", "ENABLE", "ID", "ID (\"a\")", "UID", "UID NOOP",
       'LIST "" "\\"', "SELECT"),
    ("A", Raw(b"\r\n")),
    ("A", Raw(b"tagonly\r\n")),
    ("A", "NOOP"),
], deliberate=("strict-syntax", "optional-response-codes", "dovecot-qresync-codes"))

# -- mailboxes ----------------------------------------------------------------------------------

# Parents are created first: implicit parents are the "implicit-parents" script's subject.
script("create-delete-rename", s(
    "A", "CREATE Projects", "CREATE Projects", "CREATE projects", "CREATE projects/Alpha",
    "CREATE projects/Alpha/Beta", "CREATE INBOX", "CREATE inbox", "CREATE Archive/2026",
    "CREATE \"With Space\"", "CREATE &AMk-t&AOk-", 'CREATE "Caf&AOk-"', "CREATE &Jjo-!",
    'LIST "" *', "DELETE Projects", 'LIST "" *', "DELETE NoSuch", "DELETE INBOX",
    "RENAME Projects Projects2", "CREATE Home", "RENAME Home Archive", "RENAME NoSuch Other",
    "RENAME projects Stuff", 'LIST "" *', "RENAME Stuff/Alpha Moved", 'LIST "" *',
    'RENAME "With Space" INBOX', "RENAME Stuff Stuff", "DELETE Moved/Beta", "DELETE Moved",
    'LIST "" *', "SELECT Moved/Beta", "DELETE Stuff/Alpha", 'LIST "" *'),
    deliberate=("optional-response-codes", "dovecot-create-inbox"))

script("implicit-parents", s(
    "A", "CREATE a/b/c", "CREATE Trailing/", 'LIST "" *', 'LIST "" a/%', 'LIST "" %',
    "SUBSCRIBE a/b/c", 'LSUB "" *'),
    deliberate=("implicit-parents", "dovecot-lsub-special-use"))

script("delete-with-children", s(
    "A", "CREATE p", "CREATE p/q", "DELETE p", 'LIST "" p*'),
    deliberate=("delete-with-children",))

script("rename-inbox", [
    *seed(), *s("A", "RENAME INBOX Old", "STATUS INBOX (MESSAGES UIDNEXT)",
                "STATUS Old (MESSAGES UIDNEXT UNSEEN)", 'LIST "" *', "SELECT Old",
                "FETCH 1:* (UID FLAGS)")],
    deliberate=("rename-inbox-uidvalidity", "dovecot-marked"))

script("subscribe-lsub", s(
    "A", "CREATE a", "CREATE a/b", "CREATE a/b/c", "CREATE x", "SUBSCRIBE a/b/c",
    "SUBSCRIBE x", 'LSUB "" *', 'LSUB "" a/b/%', 'LSUB "" x', "UNSUBSCRIBE x",
    'LSUB "" *', "SUBSCRIBE x", "DELETE x", 'LSUB "" *', 'LSUB "" ""', 'LSUB "" a/b/*',
    ("SUBSCRIBE ", lit(b"a/b")), 'LSUB "" a/%', "UNSUBSCRIBE never-subscribed",
    "SUBSCRIBE nonexistent"),
    deliberate=("subscriptions-unchecked", "dovecot-lsub-special-use",
                "lsub-nonexistent-noselect"))

script("list-patterns", s(
    "A", "CREATE Work", "CREATE Work/2025", "CREATE Work/2025/Q1", "CREATE Work/2026",
    "CREATE Home", "CREATE Inbox2",
    'LIST "" ""', 'LIST "" *', 'LIST "" %', 'LIST "" Work/%', 'LIST "" Work/*',
    'LIST Work/ %', 'LIST Work/ *', 'LIST "" inbox', 'LIST "" InBoX', 'LIST "" I*',
    'LIST "" *2*', 'LIST "" %/%', 'LIST "" NoSuch', 'LIST "" Work/%/Q%',
    ("LIST ", lit(b""), " ", lit(b"Work/*")), 'LIST "" "*"', 'LIST "%" ""'))

script("list-extended", s(
    "A", "CREATE Work", "CREATE Work/2025", "CREATE Work/2025/Q1", "CREATE Work/2026",
    "CREATE Home", "SUBSCRIBE Work/2026", 'LIST (SUBSCRIBED) "" *', 'LIST (SUBSCRIBED) "" %',
    'LIST "" * RETURN (CHILDREN)', 'LIST "" % RETURN (CHILDREN)',
    'LIST "" % RETURN (SUBSCRIBED)', 'LIST "" ("Work/*" Home)', 'LIST "" (Home INBOX)',
    'LIST (SPECIAL-USE) "" *', 'LIST "" * RETURN (SPECIAL-USE)',
    'LIST (SPECIAL-USE) "" * RETURN (SPECIAL-USE)', 'LIST () "" %',
    'LIST (NOSUCH) "" *', 'LIST "" * RETURN (NOSUCH)', 'LIST (RECURSIVEMATCH) "" *',
    'LIST (SUBSCRIBED RECURSIVEMATCH) "" %', 'LIST (SUBSCRIBED RECURSIVEMATCH) "" Work/%',
    'LIST (SUBSCRIBED) "" * RETURN (CHILDREN)', 'LIST (REMOTE) "" %',
    'LIST (REMOTE SUBSCRIBED) "" *', 'LIST () "" "" RETURN (CHILDREN)',
    'LIST (SUBSCRIBED) Work/ %', 'LIST "" (Work/% "")'),
    deliberate=("list-extra-attributes",))

script("list-status", [
    *seed(), *s("A", "CREATE Empty", 'LIST "" % RETURN (STATUS (MESSAGES UNSEEN UIDNEXT))',
                'LIST "" * RETURN (CHILDREN STATUS (MESSAGES UIDVALIDITY))',
                'LIST "" INBOX RETURN (STATUS ())')],
    deliberate=("list-extra-attributes", "dovecot-marked"))

script("status", [
    *seed(),
    *s("A", "STATUS INBOX (MESSAGES)", "STATUS INBOX (MESSAGES UIDNEXT UIDVALIDITY UNSEEN)",
       "STATUS inbox (UNSEEN)", "STATUS Trash (MESSAGES UNSEEN UIDNEXT)",
       "STATUS NoSuch (MESSAGES)",
       ("STATUS ", lit(b"INBOX"), " (MESSAGES)"), "SELECT INBOX",
       "STATUS INBOX (MESSAGES UNSEEN)", "STORE 1:* -FLAGS (\\Seen)",
       "STATUS INBOX (UNSEEN)")],
    deliberate=("status-inbox-name", "optional-response-codes", "dovecot-qresync-codes",
                "store-reports-unchanged"))

script("namespace-id-enable", s(
    "A", "NAMESPACE", "ID NIL", 'ID ("name" "differential" "version" "1")', "ENABLE FOO",
    "ENABLE IMAP4rev1", "ENABLE", "NAMESPACE extra"),
    deliberate=("strict-syntax", "enable-empty", "namespace-shared"))

# -- APPEND -------------------------------------------------------------------------------------

script("append", [
    ("A", append("INBOX", message(1), "")),
    ("A", append("INBOX", message(2), "\\Seen \\Flagged", date(2))),
    ("A", append("INBOX", message(3), None, date(3), lit)),
    ("A", append("INBOX", message(4), "\\Draft $Label1 Custom", None, lit)),
    ("A", append("Trash", message(5), "\\Deleted", date(4))),
    ("A", append("NoSuch", message(6), "", date(5))),
    # Refused APPENDs use synchronizing literals: Dovecot refuses before reading a literal
    # and then takes a LITERAL+ literal for commands.
    ("A", append("INBOX", message(7), "\\Recent", date(6), lit)),
    ("A", append("INBOX", message(8), "\\Bogus", date(7), lit)),
    ("A", ('APPEND INBOX "1-Feb-2026 00:00:00 +0000" ', lit(message(10)))),
    ("A", ('APPEND INBOX " 2-Feb-2026 23:59:59 -1200" ', lit(message(11)))),
    ("A", ("APPEND INBOX () ", plus(message(12)))),
    ("A", ("APPEND INBOX (\\Seen) ", plus(message(14)), " ", plus(message(15)))),
    ("A", "APPEND INBOX"),
    *s("A", "STATUS INBOX (MESSAGES UIDNEXT UNSEEN)", "STATUS Trash (MESSAGES)",
       "SELECT INBOX", "FETCH 1:* (UID FLAGS INTERNALDATE RFC822.SIZE)"),
], deliberate=("refuse-after-literal",))

# Dates at the edge of the calendar: a leap day, a leap second (taken as second 59 by both),
# zones at the grammar's limits; then dates that do not exist, refused here (the last steps:
# Dovecot stores them with the current time, so the mailboxes differ afterwards).
script("append-date-edges", [
    ("A", append("INBOX", message(1), "", "29-Feb-2024 12:00:00 +0000")),
    ("A", append("INBOX", message(2), "", " 1-Jan-2026 23:59:60 +0000")),
    ("A", append("INBOX", message(3), "", "31-Dec-2025 23:59:59 -1159")),
    ("A", append("INBOX", message(4), "", "01-Jan-2026 00:00:00 +2359")),
    *s("A", "EXAMINE INBOX", "FETCH 1:* INTERNALDATE", "SEARCH ON 1-Jan-2026"),
    ("A", append("INBOX", message(5), "", "31-Feb-2026 00:00:00 +0000")),
    ("A", append("INBOX", message(6), "", "29-Feb-2026 00:00:00 +0000")),
    ("A", append("INBOX", message(7), "", "31-Apr-2026 00:00:00 +0000")),
    ("A", append("INBOX", message(8), "\\Seen", "32-Jan-2026 00:00:00 +0000")),
    ("A", append("INBOX", message(9), "", " 1-Jan-2026 24:00:00 +0000")),
    ("A", append("INBOX", message(10), "", " 1-Jan-2026 23:60:00 +0000")),
], deliberate=("append-impossible-date",))

# Last step: after refusing it, Dovecot stops answering on that connection.
script("append-empty-message", [("A", ("APPEND INBOX ", plus(b"")))],
       deliberate=("append-empty-message",))

script("multiappend", [
    ("A", ("APPEND INBOX (\\Seen) ", plus(message(1)), " ", plus(message(2)),
           ' (\\Flagged) "03-Mar-2026 10:00:00 +0000" ', lit(message(3)),
           " () ", plus(message(4)))),
    # One message of a MULTIAPPEND is bad: none may be appended (RFC 3502 section 6).
    ("A", ("APPEND INBOX ", lit(message(5)), " (\\Bogus-Flag) ", lit(message(6)))),
    ("A", ("APPEND INBOX ", lit(message(7)), ' "99-Foo-2026 00:00:00 +0000" ',
           lit(message(8)))),
    ("A", ("APPEND NoSuch ", lit(message(9)), " ", lit(message(10)))),
    ("A", ("APPEND INBOX ", lit(message(11)), " junk")),
    *s("A", "STATUS INBOX (MESSAGES UIDNEXT)", "SELECT INBOX",
       "FETCH 1:* (UID FLAGS INTERNALDATE RFC822.SIZE BODY.PEEK[HEADER.FIELDS (SUBJECT)])"),
], deliberate=("refuse-after-literal",))

script("append-to-selected", [
    *seed(), *s("A", "SELECT INBOX"), *s("B", "SELECT INBOX"),
    ("A", append("INBOX", message(20), "\\Flagged", date(20))),
    *s("A", "NOOP"), *s("B", "NOOP", "FETCH 6 (UID FLAGS)"),
])

# -- SELECT / EXAMINE / CLOSE / UNSELECT / EXPUNGE / CHECK -------------------------------------

script("select-examine", [
    *seed(),
    *s("A", "SELECT INBOX", "SELECT inbox", "SELECT Trash", "SELECT NoSuch", "FETCH 1 FLAGS",
       "EXAMINE INBOX", "FETCH 1:* FLAGS", "FETCH 2 BODY[TEXT]", "FETCH 2 FLAGS",
       "COPY 1 Trash", "CHECK", "CLOSE", "SELECT INBOX", "CHECK", "UNSELECT", "UNSELECT",
       "EXAMINE INBOX", "CLOSE", ("SELECT ", lit(b"INBOX")), ("EXAMINE ", plus(b"INBOX")),
       # Last: Dovecot carries these out in a read-only mailbox.
       "STORE 1 +FLAGS (\\Flagged)", "EXPUNGE", "MOVE 1 Trash"),
], deliberate=("dovecot-qresync-codes", "optional-response-codes",
               "read-only-refuses-changes"))

script("expunge-close-unselect", [
    *seed(),
    ("A", append("INBOX", message(6), "\\Deleted", date(6))),
    *s("A", "SELECT INBOX"), *s("B", "SELECT INBOX"),
    *s("A", "EXPUNGE", "FETCH 1:* (UID FLAGS)"),
    *s("B", "NOOP", "STORE 1,3 +FLAGS.SILENT (\\Deleted)", "UID EXPUNGE 1",
       "UID EXPUNGE 1:*", "FETCH 1:* UID"),
    *s("A", "NOOP", "STORE 1 +FLAGS (\\Deleted)", "UNSELECT", "SELECT INBOX", "CLOSE",
       "STATUS INBOX (MESSAGES)", "SELECT INBOX", "STORE 1:* +FLAGS (\\Deleted)"),
    *s("B", "NOOP"),
    *s("A", "EXAMINE INBOX", "CLOSE", "STATUS INBOX (MESSAGES)", "SELECT INBOX", "CLOSE",
       "STATUS INBOX (MESSAGES)"),
    *s("B", "NOOP", "FETCH 1:* UID"),
], deliberate=("unsolicited-fetch-uid", "dovecot-qresync-codes"))

# -- FETCH --------------------------------------------------------------------------------------

FETCH_ITEMS = [
    "FLAGS", "INTERNALDATE", "RFC822.SIZE", "ENVELOPE", "BODY", "BODYSTRUCTURE", "UID",
    "RFC822.HEADER", "BODY.PEEK[]", "BODY.PEEK[HEADER]", "BODY.PEEK[TEXT]",
    "BODY.PEEK[HEADER.FIELDS (From To SUBJECT)]", "BODY.PEEK[HEADER.FIELDS.NOT (Received)]",
    "BODY.PEEK[HEADER.FIELDS (X-Nothing)]", "BODY.PEEK[1]", "BODY.PEEK[1.MIME]",
    "BODY.PEEK[2]", "BODY.PEEK[2.MIME]", "BODY.PEEK[3]", "BODY.PEEK[1.1]",
    "BODY.PEEK[]<0>", "BODY.PEEK[]<0.10>", "BODY.PEEK[]<10.20>", "BODY.PEEK[]<100000.10>",
    "BODY.PEEK[TEXT]<5.0>", "BODY.PEEK[HEADER]<3.30>", "BODY.PEEK[1]<2.5>",
    "BODY.PEEK[HEADER.FIELDS (Subject)]<2.4>",
]

script("fetch-items", [
    *seed(), *s("A", "EXAMINE INBOX"),
    *s("A", *[f"FETCH 1:* ({item})" for item in FETCH_ITEMS]),
    *s("A", *[f"UID FETCH 1:* ({item})" for item in FETCH_ITEMS[:12]]),
    *s("A", "FETCH 1:* ALL", "FETCH 1:* FAST", "FETCH 1:* FULL",
       "FETCH 2,4,1 (UID)", "FETCH 4:2 UID", "FETCH * UID", "UID FETCH * UID",
       "UID FETCH 2:3,5 (FLAGS)", "UID FETCH 4:* UID", "UID FETCH 100:* UID",
       "FETCH 2,2,1:2 UID", "UID FETCH 5:3 UID", "FETCH 1:2,4:* (UID RFC822.SIZE)",
       "UID FETCH 1,3:4,99 (UID FLAGS)",
       "FETCH 1 (RFC822.SIZE BODY.PEEK[HEADER.FIELDS (FROM)] BODY.PEEK[HEADER.FIELDS (TO)])"),
], deliberate=("strict-syntax",))

script("fetch-sets-seen", [
    *seed(), *s("A", "SELECT INBOX"), *s("B", "SELECT INBOX"),
    *s("A", "FETCH 2 BODY[TEXT]", "FETCH 3 RFC822", "FETCH 5 RFC822.TEXT", "FETCH 5 BODY[1]",
       "FETCH 5 RFC822.HEADER", "FETCH 2 BODY[]<0.5>", "UID FETCH 3 BODY[HEADER]",
       "FETCH 1:* FLAGS"),
    *s("B", "NOOP"),
], deliberate=("unsolicited-fetch-uid",))

# The corpus's rendering differences are test_imap_render_dovecot.py's subject: its known
# differences are left out here, and the bare-LF sample is in "odd-octets".
CORPUS = [s for s in SAMPLES if s.name != BARE_LF]


def corpus_items(sample) -> list[str]:
    items = ["ENVELOPE", "BODY", "BODYSTRUCTURE", "RFC822.SIZE", "BODY.PEEK[]",
             "BODY.PEEK[HEADER]", "BODY.PEEK[TEXT]", *(f"BODY.PEEK[{x}]" for x in sample.sections),
             *(f"BODY.PEEK[]<{o}.{c}>" for o, c in sample.partials)]
    return [i for i in items
            if (sample.name, i.replace(".PEEK", "").encode()) not in RENDER_DIFFERENCES]


script("fetch-corpus", [
    *[("A", append("INBOX", sample.raw, "", date(n))) for n, sample in enumerate(CORPUS, 1)],
    ("A", "EXAMINE INBOX"),
    *[("A", f"FETCH {n} ({item})") for n, sample in enumerate(CORPUS, 1)
      for item in corpus_items(sample)],
])

# -- STORE --------------------------------------------------------------------------------------

script("store", [
    *seed(), *s("A", "SELECT INBOX"), *s("B", "SELECT INBOX"),
    *s("A", "STORE 1 +FLAGS (\\Flagged)", "STORE 1 -FLAGS (\\Seen)",
       "STORE 1 FLAGS (\\Answered $Work)", "STORE 1:3 +FLAGS.SILENT (\\Draft)",
       "STORE 2 -FLAGS.SILENT ($Work)", "STORE 3 FLAGS.SILENT ()", "STORE 1,3 +FLAGS \\Seen",
       "STORE 4 FLAGS (\\Seen)", "STORE 5 +FLAGS ()", "STORE 1 +FLAGS (\\Flagged)",
       "STORE 1 -FLAGS (\\Deleted)", "UID STORE 2 +FLAGS (\\Deleted)",
       "UID STORE 1:* -FLAGS.SILENT (\\Draft)", "UID STORE 5,3 FLAGS ($Work)",
       "UID STORE 99 +FLAGS (\\Seen)", "STORE * +FLAGS (\\Answered)",
       "STORE 1 +FLAGS (\\seen \\FLAGGED)", "FETCH 1:* (UID FLAGS)"),
    *s("B", "NOOP", "FETCH 1:* FLAGS"),
], deliberate=("unsolicited-fetch-uid", "store-reports-unchanged"))

script("store-seen-by-other-session", [
    *seed(), *s("A", "SELECT INBOX"), *s("B", "SELECT INBOX"),
    ("A", "STORE 1 +FLAGS (\\Flagged)"), ("B", "NOOP"),
    ("A", "UID STORE 3 FLAGS.SILENT (\\Seen)"), ("B", "CHECK"),
    ("A", "STORE 2 -FLAGS (\\Answered)"), ("A", "STORE 5 +FLAGS (\\Seen)"), ("B", "NOOP"),
    ("B", "STORE 4 +FLAGS (\\Answered)"), ("A", "NOOP"), ("B", "FETCH 1:* FLAGS"),
], deliberate=("unsolicited-fetch-uid",))

# -- SEARCH -------------------------------------------------------------------------------------

SEARCH_KEYS = [
    "ALL", "ANSWERED", "UNANSWERED", "DELETED", "UNDELETED", "DRAFT", "UNDRAFT", "FLAGGED",
    "UNFLAGGED", "SEEN", "UNSEEN", "KEYWORD $Work", "UNKEYWORD $Work", "KEYWORD $Nothing",
    "FROM alice", "FROM bob@example.org", "FROM Carol", "TO bob", "TO alice@example.com",
    "CC dave", "CC Jr.", "BCC mallory", "SUBJECT lunch", "SUBJECT \"on Friday\"",
    "SUBJECT Grüße", "FROM Jörg", "BODY usual", "BODY Café", "BODY noon",
    "BODY straße", "TEXT alice", "TEXT budget", "TEXT \"Reply-To\"",
    "HEADER Message-ID <lunch@example.com>", "HEADER X-Priority 1", "HEADER X-Priority \"\"",
    "HEADER X-Nothing \"\"", "HEADER subject Re:", "LARGER 1000", "SMALLER 500", "LARGER 0",
    "BEFORE 3-Feb-2026", "BEFORE 1-Jan-2026", "ON 3-Feb-2026", "ON 03-Feb-2026",
    "SINCE 4-Feb-2026", 'SINCE "4-Feb-2026"', "SENTBEFORE 21-Nov-2026",
    "SENTON 21-Nov-2026", "SENTON 22-Nov-2026", "SENTSINCE 24-Nov-2026", "SENTON 2-Nov-2026",
    "NOT SEEN", "NOT NOT SEEN", "OR SEEN FLAGGED", "OR (SEEN DRAFT) DELETED",
    "(FROM alice SUBJECT lunch)", "1:3", "2,4", "*", "5:*", "UID 1:2", "UID 4,5", "UID *",
    "NOT 1:3", "OR 1 UID 5", "SEEN UNDELETED 1:4", "ALL ALL", "UID 100", "1:* NOT DELETED",
    "CHARSET UTF-8 SUBJECT Grüße", "CHARSET US-ASCII FROM alice",
    "FROM \"\"", "SUBJECT {0}\r\n", "BODY \"\\\"\"",
]


def search_command(key: str):
    if key.startswith("SUBJECT {0}"):
        return ("SEARCH SUBJECT ", lit(b""))
    return "SEARCH " + key


script("search", [
    *seed(), *s("A", "EXAMINE INBOX"),
    *s("A", *[search_command(k) for k in SEARCH_KEYS]),
    *s("A", *["UID " + search_command(k) for k in SEARCH_KEYS[::3] if "{" not in k]),
    ("A", ("SEARCH CHARSET UTF-8 BODY ", lit("Köln".encode()))),
    ("A", ("UID SEARCH CHARSET UTF-8 TEXT ", plus("Grüße".encode()))),
], deliberate=("dovecot-search-keyword",))

# -- COPY / MOVE --------------------------------------------------------------------------------

script("copy", [
    *seed(), *s("A", "CREATE Dest", "SELECT INBOX"),
    *s("A", "COPY 1:2 Dest", "COPY 5,3 Dest", "UID COPY 4 Dest", "UID COPY 3:* Trash",
       "COPY 1 NoSuch", "UID COPY 99 Dest", "COPY 1 Dest/", "STATUS Dest (MESSAGES UIDNEXT)",
       "SELECT Dest", "FETCH 1:* (UID FLAGS INTERNALDATE RFC822.SIZE)"),
], deliberate=("dovecot-qresync-codes",))

script("move", [
    *seed(), *s("A", "CREATE Dest", "SELECT INBOX"), *s("B", "SELECT INBOX"),
    *s("A", "MOVE 2 Dest", "UID MOVE 4:5 Dest", "MOVE 1 NoSuch", "UID MOVE 99 Dest",
       "FETCH 1:* (UID FLAGS)"),
    *s("B", "NOOP", "FETCH 1:* UID"),
    *s("A", "STATUS Dest (MESSAGES UIDNEXT UNSEEN)", "EXAMINE Dest",
       "FETCH 1:* (UID FLAGS INTERNALDATE)", "SELECT INBOX", "MOVE 1:* Trash"),
    *s("B", "NOOP"),
], deliberate=("dovecot-qresync-codes",))

# -- IDLE, several sessions ----------------------------------------------------------------------

script("idle", [
    *seed(), *s("A", "SELECT INBOX"), ("A", Idle()),
    ("B", append("INBOX", message(30), "\\Seen", date(30))),
    ("A", WaitFor(r"^\* 6 EXISTS")),
    ("B", "SELECT INBOX"), ("B", "STORE 2 +FLAGS (\\Deleted)"), ("B", "EXPUNGE"),
    ("A", WaitFor(r"^\* 2 EXPUNGE")),
    ("A", Done()), ("A", "NOOP"),
    ("A", Idle()), ("A", Raw(b"done\r\n")),
    ("Z", Idle()), ("Z", Done()),
])

script("idle-flags", [
    *seed(), *s("A", "SELECT INBOX"), *s("B", "SELECT INBOX"), ("A", Idle()),
    ("B", "STORE 1 +FLAGS (\\Flagged)"), ("A", WaitFor(r"^\* 1 FETCH")), ("A", Done()),
], deliberate=("unsolicited-fetch-uid",))

# -- pipelining and literals ------------------------------------------------------------------

script("pipelined", [
    ("A", Pipelined(append("INBOX", message(1), "\\Seen", date(1)),
                    append("INBOX", message(2), "", date(2)),
                    "SELECT INBOX", "FETCH 1:* (UID FLAGS)", "STORE 2 +FLAGS (\\Seen)",
                    "SEARCH UNSEEN", "NOOP", "FETCH 1 BODY.PEEK[HEADER.FIELDS (SUBJECT)]",
                    ("SEARCH SUBJECT ", plus(b"message 2")), "CLOSE", "LIST \"\" INBOX")),
    ("B", Pipelined("CREATE P1", "CREATE P1/P2", "RENAME P1 Q1", 'LIST "" Q1*',
                    "DELETE Q1/P2", 'LIST "" Q1*', "STATUS Q1/P2 (MESSAGES)")),
], deliberate=("optional-response-codes",))

script("literals", [
    ("A", ("CREATE ", lit(b"Lit Box"))),
    ("A", ("CREATE ", plus(b"Plus Box"))),
    ("A", ("CREATE ", plus(b""))),
    ("A", ("SELECT ", lit(b""))),
    ("A", ('LIST "" ', lit(b"* Box"))),
    ("A", ("APPEND ", lit(b"Lit Box"), " ", lit(message(1)))),
    ("A", ("APPEND ", plus(b"Plus Box"), " (\\Seen) ", plus(message(2)))),
    ("A", ("STATUS ", plus(b"Lit Box"), " (MESSAGES)")),
    ("A", ("SELECT ", lit(b"Plus Box"))),
    ("A", ("SEARCH HEADER ", lit(b"Subject"), " ", plus(b"message"))),
    ("A", ("SEARCH HEADER ", plus(b"Subject"), " ", lit(b""))),
    ("A", ("RENAME ", lit(b"Lit Box"), " ", plus(b"Renamed Box"))),
    ("A", 'LIST "" "* Box"'),
])

# -- the size thresholds in the code --------------------------------------------------------------


def exact(size: int, n: int) -> bytes:
    """A message of exactly ``size`` octets, CRLF lines, with a unique first line."""
    head = message(n, body=b"")
    filler = (b"%07d " % n + b"y" * 68 + b"\r\n") * (size // 78 + 1)
    return head + filler[:size - len(head) - 2] + b"\r\n"


assert len(exact(1000, 1)) == 1000

# 1 MiB streaming (STREAM_ABOVE): at and just below; the body one octet over is issue 11 (1),
# see test_differential_issue11.py.  Chunk size (DEFAULT_CHUNK): at, just over, two chunks.
# SPOOL_ABOVE: an APPEND literal at the limit and one over it, and a MULTIAPPEND whose
# literals pass it together.
script("size-thresholds", [
    ("A", append("INBOX", exact(STREAM_ABOVE, 1), "", date(1))),
    ("A", append("INBOX", exact(STREAM_ABOVE - 1, 2), "", date(2), lit)),
    ("A", append("INBOX", exact(DEFAULT_CHUNK, 3), "", date(3))),
    ("A", append("INBOX", exact(DEFAULT_CHUNK + 1, 4), "", date(4))),
    ("A", append("INBOX", exact(2 * DEFAULT_CHUNK + 1, 5), "", date(5))),
    ("A", append("INBOX", exact(SPOOL_ABOVE + 1, 6), "", date(6))),
    ("A", ("APPEND INBOX ", plus(exact(SPOOL_ABOVE // 2, 7)), " ",
           plus(exact(SPOOL_ABOVE // 2, 8)), " ", plus(exact(SPOOL_ABOVE // 2, 9)))),
    *s("A", "EXAMINE INBOX", "FETCH 1:* RFC822.SIZE", "FETCH 1 BODY.PEEK[]", "FETCH 2 BODY[]",
       "FETCH 1 BODY.PEEK[TEXT]", "FETCH 1 RFC822", "FETCH 3:5 BODY.PEEK[]",
       f"FETCH 4 BODY.PEEK[]<{DEFAULT_CHUNK - 10}.20>",
       f"FETCH 5 BODY.PEEK[]<{DEFAULT_CHUNK - 1}.{DEFAULT_CHUNK + 2}>",
       f"FETCH 5 BODY.PEEK[TEXT]<{DEFAULT_CHUNK}.1>",
       f"FETCH 6 BODY.PEEK[]<0.{STREAM_ABOVE}>", f"FETCH 6 BODY.PEEK[]<1.{STREAM_ABOVE}>",
       f"FETCH 6 BODY.PEEK[]<{STREAM_ABOVE}.10>", "FETCH 7:9 BODY.PEEK[]",
       "FETCH 1:* BODY.PEEK[HEADER.FIELDS (Message-ID)]", "SEARCH BODY 0000006",
       f"SEARCH LARGER {STREAM_ABOVE - 1}"),
])


def many(count: int, flags_every: int = 3) -> list:
    """MULTIAPPEND of ``count`` small messages in one command (some flagged)."""
    parts: list = ["APPEND INBOX"]
    for n in range(1, count + 1):
        flags = "(\\Flagged) " if n % flags_every == 0 else ""
        parts += [f" {flags}", plus(message(n))]
    return [("A", tuple(parts))]


script("fetch-batches", [
    *many(BATCH + 1),
    *s("A", "EXAMINE INBOX", "FETCH 1:* (UID FLAGS)", f"FETCH {BATCH}:* (UID RFC822.SIZE)",
       f"UID FETCH 1:{BATCH + 1} FLAGS", "SEARCH FLAGGED",
       f"FETCH 1:{CONTENT_BATCH + 1} BODY.PEEK[HEADER.FIELDS (SUBJECT)]",
       f"FETCH {CONTENT_BATCH}:{2 * CONTENT_BATCH + 1} (BODY.PEEK[] ENVELOPE)",
       f"UID FETCH 1:{CONTENT_BATCH + 1} RFC822.TEXT"),
    *s("B", "SELECT INBOX", "STORE 1:* +FLAGS.SILENT (\\Seen)"),
    *s("A", "NOOP"),
], deliberate=("unsolicited-fetch-uid",))

# -- odd octets --------------------------------------------------------------------------------

LF_ONLY = b"From: lf@example.com\nSubject: bare LF\n\nline one\nline two\n"
MIXED = b"From: mixed@example.com\r\nSubject: mixed\nX-A: 1\r\n\r\none\ntwo\r\nthree"
EIGHT_BIT = "From: Jörg <j@example.de>\r\nSubject: Grüße\r\n\r\nÄÖÜ é\r\n".encode("latin-1")
NUL = b"From: nul@example.com\r\nSubject: nul\r\n\r\nbefore\x00after\r\n"

# Bare LF (1, 2): sizes, partials and BODYSTRUCTURE counts differ by design ("bare-lf-kept");
# their structure is compared by test_imap_render_dovecot.py.
script("odd-octets", [
    *[("A", append("INBOX", raw, "", date(n)))
      for n, raw in enumerate((LF_ONLY, MIXED, EIGHT_BIT, NUL), 1)],
    *s("A", "EXAMINE INBOX", "FETCH 1:* (RFC822.SIZE BODY.PEEK[])",
       "FETCH 1:* BODY.PEEK[HEADER]", "FETCH 1:* BODY.PEEK[TEXT]", "FETCH 1:* ENVELOPE",
       "FETCH 3:4 BODYSTRUCTURE", "FETCH 3:4 BODY.PEEK[]<3.30>", "SEARCH BODY two",
       "SEARCH SUBJECT bare", "SEARCH BODY after", "SEARCH TEXT ÄÖÜ", "SEARCH HEADER Subject nul"),
], deliberate=("bare-lf-kept",))


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_script(differential, script):
    """Our answers equal Dovecot's, after normalising what RFC 3501 leaves to the server."""
    differential.run(script)


def test_script_names_are_unique():
    names = [s.name for s in SCRIPTS]
    assert len(names) == len(set(names))


def test_parser_keeps_literals_exactly():
    """A literal's octets come through unchanged (CRLF, NUL, brackets), and FETCH item
    order, UIDVALIDITY and string form are normalised (RFC 3501 4.3, 7.4.2)."""
    from differential import normalise

    a = normalise(parse_response(
        b'* 1 FETCH (UID 7 BODY[HEADER.FIELDS (A B)]<0> {7}\r\n(a)\r\n\x00] FLAGS (\\Seen))'),
        {})
    b = normalise(parse_response(
        b'* 1 FETCH (FLAGS (\\Seen) BODY[HEADER.FIELDS (A B)]<0> "(a)\\r\\n\x00]" UID 7)'),
        {})
    assert render(a)[0] == '* 1 FETCH (BODY[HEADER.FIELDS (A B)]<0> {7} FLAGS (\\Seen) UID 7)'
    assert render(a)[1:] == ["    | (a)\\r\\n", "    | \\x00]"]
    assert render(b)[0] != render(a)[0]  # quoted "\r\n" is not CRLF: a real difference
    seen: dict = {}
    one = normalise(parse_response(b"* OK [UIDVALIDITY 1234] x"), seen)
    two = normalise(parse_response(b"t1 OK [APPENDUID 1234 5] done"), seen)
    assert render(one) == ["* OK [UIDVALIDITY <uidvalidity-1>]"]
    assert render(two) == ["t1 OK [APPENDUID <uidvalidity-1> 5]"]


def test_docs_table_lists_every_deliberate_difference():
    """docs/differential.md documents each entry of DELIBERATE, and nothing else."""
    import pathlib
    import re

    doc = (pathlib.Path(__file__).parent.parent / "docs" / "differential.md").read_text()
    section = doc.split("## Deliberate differences")[1].split("\n## ")[0]
    table = set(re.findall(r"^\| `([a-z0-9-]+)` \|", section, re.M))
    assert table == set(DELIBERATE)


def test_every_deliberate_difference_is_used():
    """No entry of DELIBERATE is left that no script names (here or in another
    test_differential_*.py module, or that applies to all)."""
    import importlib
    import pathlib

    from differential import ALWAYS

    scripts = list(SCRIPTS)
    for path in pathlib.Path(__file__).parent.glob("test_differential_*.py"):
        scripts += getattr(importlib.import_module(path.stem), "SCRIPTS", [])
    used = {name for s in scripts for name in s.deliberate}
    used |= set(ALWAYS)  # applied to every script
    assert used == set(DELIBERATE)


def test_compare_fails_on_any_other_difference():
    """The runner's verdict: equal after normalising passes; one octet in a literal, a
    missing response or another status fails with a diff naming both sides."""
    from differential import Differential, Event

    def events(*lines: bytes) -> list:
        return [Event("A", "A1 FETCH 1 BODY[]", [parse_response(x) for x in lines])]

    judge = Differential(None, None)
    plain = Script("t", [])
    same = events(b"* 1 FETCH (UID 1 BODY[] {3}\r\nabc)", b"A1 OK done")
    judge.compare(plain, same, events(b'* 1 FETCH (BODY[] "abc" UID 1)', b"A1 OK Completed."))
    for other in (events(b"* 1 FETCH (UID 1 BODY[] {3}\r\nabd)", b"A1 OK"),
                  events(b"A1 OK"), events(b"* 1 FETCH (UID 1 BODY[] {3}\r\nabc)", b"A1 NO")):
        with pytest.raises(AssertionError, match="--- dovecot"):
            judge.compare(plain, same, other)


def test_dovecot_advertises_what_we_do(differential):
    """Every capability we advertise after login, Dovecot advertises too (APPENDLIMIT aside,
    RFC 7889: its value is ours; and those tests/test_differential_quota.py judges or says
    why it cannot), so the scripts above have a judge for each extension; a capability added
    without one fails here."""
    from differential import Session

    def capabilities(port: int, user: str) -> set[str]:
        session = Session("A", port)
        session.conn.read_response()
        session.play(f"LOGIN {user} {PASSWORD}")
        event = session.play("CAPABILITY")
        session.conn.close()
        line = next(r for r in event.responses if r.kind == "data")
        return {word.decode().split("=")[0] if word.startswith(b"APPENDLIMIT") else
                word.decode() for word in line.data[1:]}

    differential.ours.add_user("capabilities", PASSWORD)
    differential.dovecot.add_user("capabilities", PASSWORD)
    ours = capabilities(differential.ours.port, "capabilities")
    theirs = capabilities(differential.dovecot.port, "capabilities")
    assert "IMAP4rev1" in ours
    # OBJECTID (RFC 8474): Debian's Dovecot 2.3.19 does not implement it (BAD to EMAILID and
    # STATUS MAILBOXID), so it has no judge here; tests/test_imap_objectid.py checks it.
    from test_differential_acl import CAPABILITIES_JUDGED_HERE as ACL_JUDGED  # acl plugins
    from test_differential_catenate import CAPABILITIES_JUDGED_HERE as CATENATE_JUDGED
    from test_differential_compress import CAPABILITIES_JUDGED_HERE as COMPRESS_JUDGED
    from test_differential_metadata import CAPABILITIES_JUDGED_HERE as METADATA_JUDGED
    from test_differential_quota import CAPABILITIES_JUDGED_HERE  # QUOTA needs its plugins

    # IMAP4rev2, UTF8=ACCEPT: Dovecot 2.3 has neither; tests/test_differential_rev2.py says how
    # they are judged instead.
    from test_differential_rev2 import CAPABILITIES_JUDGED_HERE as REV2_JUDGED
    # CONTEXT=SORT (RFC 5267): Dovecot 2.3 does not advertise it (its UPDATE answers carry no
    # sort positions); tests/test_imap_context_sort.py checks it against the RFC's examples.
    # METADATA (RFC 5464) needs Dovecot's imap_metadata and an attribute dict: judged in
    # tests/test_differential_metadata.py.
    # REPLACE (RFC 8508): Dovecot 2.3 lacks it; tests/test_differential_replace.py has it
    # judge REPLACE's outcome against the commands it stands for.
    assert ours - theirs == {"APPENDLIMIT", "OBJECTID", "CONTEXT=SORT", "REPLACE",
                             *CAPABILITIES_JUDGED_HERE, *COMPRESS_JUDGED, *METADATA_JUDGED,
                             # URLAUTH needs imap_urlauth_host: that Dovecot is the one of
                             # tests/test_differential_catenate.py.
                             *CATENATE_JUDGED, *ACL_JUDGED, *REV2_JUDGED}


def test_expunges_first_is_the_common_order():
    """RFC 3501 7.4.1, 5.2: a flag change reported before an expunge (Dovecot's order) and
    after it (ours) are the same state; the normaliser puts the FETCH after the EXPUNGEs,
    renumbered, and drops a FETCH of the expunged message itself."""
    from differential import expunges_first

    def lines(*raw: bytes) -> list[str]:
        return [render(r)[0] for r in expunges_first([parse_response(x) for x in raw])]

    theirs = lines(b"* 2 FETCH (FLAGS (\\Seen))", b"* 4 FETCH (FLAGS ())",
                   b"* 5 FETCH (FLAGS ())", b"* 3 EXPUNGE", b"* 3 EXPUNGE", b"* 3 EXISTS",
                   b"A1 OK")
    ours = lines(b"* 3 EXPUNGE", b"* 3 EXPUNGE", b"* 2 FETCH (FLAGS (\\Seen))",
                 b"* 3 FETCH (FLAGS ())", b"* 3 EXISTS", b"A1 OK")
    assert theirs == ours
    assert lines(b"* 1 FETCH (FLAGS ())", b"A1 OK") == ["* 1 FETCH (FLAGS ())", "A1 OK"]
