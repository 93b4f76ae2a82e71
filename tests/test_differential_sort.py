"""Differential scripts for SORT, THREAD, SORT=DISPLAY and ESORT (issue 12) against Dovecot.

Dovecot 2.3 implements RFC 5256 (SORT, THREAD=ORDEREDSUBJECT, THREAD=REFERENCES), RFC 5957
(SORT=DISPLAY) and RFC 5267 (ESORT); each script seeds the same messages in both servers and
compares every answer.
"""

from __future__ import annotations

import os
import random

import pytest
from differential import Script, append, date, servers


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-sort")) as pair:
        yield pair


def mail(headers: dict[str, str], body: str = "body\n") -> bytes:
    head = "".join(f"{k}: {v}\n" for k, v in headers.items())
    return (head + "\n" + body).replace("\n", "\r\n").encode()


# Varied keys: first addresses differ from later ones, a group, a missing field, dates in
# several zones, a Date that does not parse (falls back to INTERNALDATE), sizes.
KEYED = [
    {"From": "Zed <zed@b.example>, aaron@a.example", "To": "mary@x.example",
     "Cc": "carl@c.example", "Date": "Mon, 2 Feb 2026 10:00:00 +0000", "Subject": "Lunch"},
    {"From": "\"Adams, Ann\" <Ann@a.example>", "To": "Bob <bob@x.example>",
     "Date": "Mon, 2 Feb 2026 09:00:00 -0300", "Subject": "Re: lunch"},
    {"From": "bert@b.example", "To": "undisclosed-recipients:;",
     "Cc": "Ann <ann@c.example>, zoe@c.example",
     "Date": "Mon, 2 Feb 2026 11:30:00 +0100", "Subject": "[list] Fwd: Budget"},
    {"From": "=?utf-8?q?=C3=89mile?= <emile@e.example>", "To": "zack@x.example",
     "Date": "garbage date", "Subject": "budget (fwd)"},
    {"From": "<alice@a.example>", "Cc": "Bob <bob@c.example>",
     "Date": "Sun, 1 Feb 2026 23:59:59 -0800", "Subject": "=?utf-8?b?UmU6IMOpdMOp?="},
    {"To": "Mary <mary@x.example>", "Date": "Mon, 2 Feb 2026 10:00:00 +0000",
     "Subject": "   "},
    {"From": "Alice Smith <alice@a.example>", "To": "alice@x.example",
     "Date": "Tue, 3 Feb 2026 08:00:00 +0000", "Subject": "[fwd: Lunch]"},
    {"From": "Bob <bob@b.example>", "To": "group: Ann <ann@x.example>, a@x.example;",
     "Date": "Mon, 2 Feb 2026 10:00:00 +0000", "Subject": "re: [blob] RE: lunch"},
]


def seed_keyed() -> list:
    steps = []
    for n, headers in enumerate(KEYED, 1):
        steps.append(("A", append("INBOX", mail(headers, "x" * (97 * n % 500) + "\n"), "",
                                  date(len(KEYED) - n))))
    return steps


SORT_COMMANDS = [
    "SORT (ARRIVAL) UTF-8 ALL", "SORT (REVERSE ARRIVAL) UTF-8 ALL", "SORT (DATE) UTF-8 ALL",
    "SORT (REVERSE DATE) UTF-8 ALL", "SORT (FROM) UTF-8 ALL", "SORT (REVERSE FROM) US-ASCII ALL",
    "SORT (TO) UTF-8 ALL", "SORT (CC) UTF-8 ALL", "SORT (SIZE) UTF-8 ALL",
    "SORT (REVERSE SIZE) UTF-8 ALL", "SORT (SUBJECT) UTF-8 ALL",
    "SORT (REVERSE SUBJECT) UTF-8 ALL", "SORT (SUBJECT DATE) UTF-8 ALL",
    "SORT (SUBJECT REVERSE DATE) UTF-8 ALL", "SORT (CC REVERSE FROM) UTF-8 ALL",
    "SORT (DISPLAYFROM) UTF-8 ALL", "SORT (REVERSE DISPLAYFROM) UTF-8 ALL",
    "SORT (DISPLAYTO) UTF-8 ALL", "SORT (DATE) UTF-8 2:6", "SORT (SUBJECT) UTF-8 FROM a.example",
    "UID SORT (REVERSE DATE) UTF-8 ALL", "UID SORT (SIZE) UTF-8 UID 3:*",
    "SORT (DATE) UTF-8 SUBJECT lunch", "SORT (ARRIVAL) UTF-8 NOT ALL",
]

THREADED = [
    # 1: a root; 2 replies to it; 3 replies to 2 through References; 4 refers to a message
    # that is not there (a dummy parent) shared with 5; 6 has References that loop; 7 repeats
    # 1's Message-ID; 8 shares a subject with 1 but no references; 9 In-Reply-To only.
    {"Message-ID": "<1@t>", "Subject": "Plans", "Date": "Mon, 2 Feb 2026 10:00:00 +0000"},
    {"Message-ID": "<2@t>", "References": "<1@t>", "Subject": "Re: Plans",
     "Date": "Mon, 2 Feb 2026 11:00:00 +0000"},
    {"Message-ID": "<3@t>", "References": "<1@t> <2@t>", "Subject": "Re: Plans",
     "Date": "Mon, 2 Feb 2026 09:00:00 +0000"},
    {"Message-ID": "<4@t>", "References": "<missing@t>", "Subject": "Re: Ghost",
     "Date": "Mon, 2 Feb 2026 12:00:00 +0000"},
    {"Message-ID": "<5@t>", "References": "<missing@t>", "Subject": "Re: Ghost",
     "Date": "Mon, 2 Feb 2026 08:00:00 +0000"},
    {"Message-ID": "<6@t>", "References": "<a@t> <b@t> <a@t> <6@t>", "Subject": "Loop",
     "Date": "Mon, 2 Feb 2026 13:00:00 +0000"},
    {"Message-ID": "<1@t>", "Subject": "Duplicate id",
     "Date": "Mon, 2 Feb 2026 14:00:00 +0000"},
    {"Message-ID": "<8@t>", "Subject": "Fwd: Plans", "Date": "Mon, 2 Feb 2026 15:00:00 +0000"},
    {"Message-ID": "<9@t>", "In-Reply-To": "<8@t> (comment) <other@t>", "Subject": "Re: Plans",
     "Date": "Mon, 2 Feb 2026 16:00:00 +0000"},
    {"Subject": "No id at all", "Date": "Mon, 2 Feb 2026 07:00:00 +0000"},
    {"Message-ID": "<11@t>", "References": "<x1@t> <x2@t>", "Subject": "Deep",
     "Date": "Mon, 2 Feb 2026 06:00:00 +0000"},
    {"Message-ID": "<12@t>", "References": "<x1@t> <x3@t>", "Subject": "Re: Deep",
     "Date": "Mon, 2 Feb 2026 06:30:00 +0000"},
    {"Message-ID": "<13@t>", "Subject": "Ghost", "Date": "Mon, 2 Feb 2026 05:00:00 +0000"},
]


def seed_threaded() -> list:
    return [("A", append("INBOX", mail(h), "", date(n))) for n, h in enumerate(THREADED, 1)]


THREAD_COMMANDS = [
    "THREAD REFERENCES UTF-8 ALL", "UID THREAD REFERENCES UTF-8 ALL",
    "THREAD ORDEREDSUBJECT UTF-8 ALL", "UID THREAD ORDEREDSUBJECT US-ASCII ALL",
    "THREAD REFERENCES UTF-8 2:9", "THREAD REFERENCES UTF-8 NOT ALL",
    "THREAD ORDEREDSUBJECT UTF-8 SUBJECT plans",
]

EDGE = [
    # 1-3: a References chain later contradicted (1B moves 3 under 1 from under 2).
    {"Message-ID": "<e1@t>", "Subject": "Chain", "Date": "Tue, 3 Feb 2026 10:00:00 +0000"},
    {"Message-ID": "<e2@t>", "References": "<e1@t>", "Subject": "Re: Chain",
     "Date": "Tue, 3 Feb 2026 10:10:00 +0000"},
    {"Message-ID": "<e3@t>", "References": "<e1@t> <e2@t>", "Subject": "Re: Chain",
     "Date": "Tue, 3 Feb 2026 10:20:00 +0000"},
    {"Message-ID": "<e4@t>", "References": "<e2@t> <e3@t> <e1@t>", "Subject": "Re: Chain",
     "Date": "Tue, 3 Feb 2026 10:30:00 +0000"},
    # 5-6: a message referring to itself; two referring to each other.
    {"Message-ID": "<e5@t>", "References": "<e5@t>", "Subject": "Self",
     "Date": "Tue, 3 Feb 2026 09:00:00 +0000"},
    {"Message-ID": "<e6@t>", "References": "<e7@t>", "Subject": "Mutual",
     "Date": "Tue, 3 Feb 2026 08:00:00 +0000"},
    {"Message-ID": "<e7@t>", "References": "<e6@t>", "Subject": "Mutual",
     "Date": "Tue, 3 Feb 2026 08:10:00 +0000"},
    # 8-10: a dummy root with children of different subjects; 11-12 two dummies, one subject.
    {"Message-ID": "<e8@t>", "References": "<gone1@t>", "Subject": "Alpha",
     "Date": "Tue, 3 Feb 2026 07:00:00 +0000"},
    {"Message-ID": "<e9@t>", "References": "<gone1@t>", "Subject": "Beta",
     "Date": "Tue, 3 Feb 2026 07:10:00 +0000"},
    {"Message-ID": "<e10@t>", "References": "<gone1@t> <gone2@t>", "Subject": "Re: Alpha",
     "Date": "Tue, 3 Feb 2026 07:20:00 +0000"},
    {"Message-ID": "<e11@t>", "References": "<gone3@t>", "Subject": "Gamma",
     "Date": "Tue, 3 Feb 2026 06:00:00 +0000"},
    {"Message-ID": "<e12@t>", "References": "<gone3@t>", "Subject": "Re: Gamma",
     "Date": "Tue, 3 Feb 2026 06:10:00 +0000"},
    {"Message-ID": "<e13@t>", "References": "<gone4@t>", "Subject": "Gamma",
     "Date": "Tue, 3 Feb 2026 06:20:00 +0000"},
    {"Message-ID": "<e14@t>", "References": "<gone4@t>", "Subject": "Delta",
     "Date": "Tue, 3 Feb 2026 06:30:00 +0000"},
    # 15-17: a reply seen before its non-reply namesake; two non-replies of one subject.
    {"Message-ID": "<e15@t>", "Subject": "Re: Epsilon", "Date": "Tue, 3 Feb 2026 05:00:00 +0000"},
    {"Message-ID": "<e16@t>", "Subject": "Epsilon", "Date": "Tue, 3 Feb 2026 05:10:00 +0000"},
    {"Message-ID": "<e17@t>", "Subject": "epsilon", "Date": "Tue, 3 Feb 2026 05:20:00 +0000"},
    # 18-19: empty subjects are never gathered; 20: equal dates (sequence order).
    {"Message-ID": "<e18@t>", "Subject": "", "Date": "Tue, 3 Feb 2026 04:00:00 +0000"},
    {"Message-ID": "<e19@t>", "Subject": "Re:", "Date": "Tue, 3 Feb 2026 04:00:00 +0000"},
    {"Message-ID": "<e20@t>", "In-Reply-To": "junk <e18@t>", "Subject": "x",
     "Date": "Tue, 3 Feb 2026 04:00:00 +0000"},
    # 21: ids with white space and comments inside the angle brackets.
    {"Message-ID": "<e21@t>", "References": "<e20@t> (c) <e1@t>",
     "Subject": "=?iso-8859-1?q?R=E9sum=E9?=", "Date": "Tue, 3 Feb 2026 11:00:00 +0000"},
]


def seed_edge() -> list:
    return [("A", append("INBOX", mail(h), "", date(n))) for n, h in enumerate(EDGE, 1)]


def random_mail(rng: random.Random, n: int) -> bytes:
    """Message ``n`` of a seeded random mailbox: subjects with leaders, trailers, blobs and
    encoded words, addresses with and without names, dates in many zones (some unreadable),
    Message-IDs referring to each other (some missing, some repeated)."""
    names = ["Ann", "bob", "\"Cole, Al\"", "=?utf-8?q?=C3=89va?=", "", "zed", "Émile"]
    boxes = ["ann", "Bob", "carl", "dave", "eve", "zoe", "alice", "\"q u\""]
    def address() -> str:
        name, box = rng.choice(names), rng.choice(boxes)
        return f"{name} <{box}@x{rng.randint(1, 3)}.example>" if name else f"{box}@y.example"
    words = ["plans", "Budget", "lunch", "été", "=?iso-8859-1?q?caf=E9?=", "x"]
    subject = rng.choice(words) + (" " + rng.choice(words) if rng.random() < 0.3 else "")
    for _ in range(rng.randint(0, 2)):
        subject = rng.choice(["Re: ", "RE:", "Fwd: ", "fw:", "[list] ", "Re[2]: ", "[x] Re: "]) \
            + subject
    if rng.random() < 0.15:
        subject += " (fwd)"
    if rng.random() < 0.1:
        subject = f"[Fwd: {subject}]"
    headers = {"Subject": subject}
    if rng.random() < 0.9:
        headers["From"] = ", ".join(address() for _ in range(rng.randint(1, 2)))
    if rng.random() < 0.8:
        headers["To"] = address() if rng.random() < 0.85 else \
            rng.choice(["team: ", "Undisclosed recipients:;", "=?utf-8?q?=C3=9Cber?= <u@x>"]) \
            + (address() + ";" if rng.random() < 0.5 else "")
    if rng.random() < 0.4:
        headers["Cc"] = address()
    if rng.random() < 0.9:
        zone = rng.choice(["+0000", "-0800", "+0530", "+1400", "GMT", "EST"])
        headers["Date"] = (f"{rng.randint(1, 28)} {rng.choice(['Jan', 'Feb', 'Mar'])} "
                           f"{rng.choice([2025, 2026])} {rng.randint(0, 23):02d}:"
                           f"{rng.randint(0, 59):02d}:00 {zone}")
    elif rng.random() < 0.5:
        headers["Date"] = "yesterday"
    if rng.random() < 0.9:
        headers["Message-ID"] = f"<r{rng.randint(1, n + 5) if rng.random() < 0.1 else n}@t>"
    if n > 1 and rng.random() < 0.6:
        refs = sorted(rng.sample(range(1, n + 3), min(n + 2, rng.randint(1, 3))))
        if rng.random() < 0.1:
            refs.reverse()
        value = " ".join(f"<r{r}@t>" for r in refs)
        headers["References" if rng.random() < 0.7 else "In-Reply-To"] = value
    return mail(headers, "x" * rng.randint(0, 300) + "\n")


def seed_random(seed: int, count: int) -> list:
    rng = random.Random(seed)
    return [("A", append("INBOX", random_mail(rng, n), "", date(rng.randint(1, 60))))
            for n in range(1, count + 1)]


SEEDS = tuple(int(x) for x in os.environ.get("SORT_DIFF_SEEDS", "1,2,3").split(","))
"""Random mailboxes played (``SORT_DIFF_SEEDS=4,5,6,...`` to try more)."""

RANDOM_COMMANDS = [
    "SORT (SUBJECT) UTF-8 ALL", "SORT (FROM DATE) UTF-8 ALL", "SORT (TO REVERSE SIZE) UTF-8 ALL",
    "SORT (CC ARRIVAL) UTF-8 ALL", "SORT (REVERSE DATE) UTF-8 ALL",
    "SORT (DISPLAYFROM) UTF-8 ALL", "SORT (DISPLAYTO REVERSE SUBJECT) UTF-8 ALL",
    "THREAD REFERENCES UTF-8 ALL", "THREAD ORDEREDSUBJECT UTF-8 ALL",
    "THREAD REFERENCES UTF-8 1:40",
]

SCRIPTS = [
    Script("sort-keys", [*seed_keyed(), ("A", "EXAMINE INBOX"),
                         *[("A", c) for c in SORT_COMMANDS]],
           doc="RFC 5256 3 (every sort key, REVERSE, ties by sequence number) and RFC 5957 3 "
               "(DISPLAYFROM, DISPLAYTO)."),
    Script("thread-algorithms", [*seed_threaded(), ("A", "EXAMINE INBOX"),
                                 *[("A", c) for c in THREAD_COMMANDS],
                                 ("A", "SORT (SUBJECT) UTF-8 ALL")],
           doc="RFC 5256 4: ORDEREDSUBJECT and REFERENCES (dummy parents, loops, duplicate "
               "ids, subject grouping of the roots)."),
    Script("thread-keyed", [*seed_keyed(), ("A", "EXAMINE INBOX"),
                            ("A", "THREAD ORDEREDSUBJECT UTF-8 ALL"),
                            ("A", "THREAD REFERENCES UTF-8 ALL")],
           doc="RFC 5256 4 on the base subjects of RFC 5256 2.1."),
    Script("thread-edges", [*seed_edge(), ("A", "EXAMINE INBOX"),
                            ("A", "THREAD REFERENCES UTF-8 ALL"),
                            ("A", "THREAD ORDEREDSUBJECT UTF-8 ALL"),
                            ("A", "THREAD REFERENCES UTF-8 8:17"),
                            ("A", "SORT (SUBJECT) UTF-8 ALL"), ("A", "SORT (DATE) UTF-8 ALL")],
           doc="RFC 5256 4 REFERENCES: links broken by a later References (1B), loops, "
               "dummy roots kept or promoted (3), subject gathering cases 5B/5C."),
    Script("sort-after-changes", [
        *seed_keyed()[:4], ("A", "SELECT INBOX"), ("A", "SORT (SUBJECT) UTF-8 ALL"),
        ("A", "THREAD REFERENCES UTF-8 ALL"),
        ("B", append("INBOX", mail(KEYED[5]), "", date(20))),
        ("B", append("INBOX", mail(KEYED[6]), "", date(21))),
        ("B", "SELECT INBOX"), ("B", "STORE 2 +FLAGS.SILENT (\\Deleted)"), ("B", "EXPUNGE"),
        ("A", "NOOP"), ("A", "SORT (SUBJECT) UTF-8 ALL"), ("A", "UID SORT (DATE) UTF-8 ALL"),
        ("A", "THREAD ORDEREDSUBJECT UTF-8 ALL"),
        ("A", "STORE 1,3 +FLAGS.SILENT (\\Seen)"), ("A", "SORT (REVERSE ARRIVAL) UTF-8 UNSEEN"),
        ("A", "THREAD REFERENCES UTF-8 SEEN"), ("A", "UID SORT (SUBJECT) UTF-8 NOT SEEN"),
    ],
        doc="RFC 5256 3: SORT answers for the messages the session has, after other "
            "sessions appended and expunged (our per-process key cache stays right)."),
    *[Script(f"random-mailbox-{seed}", [*seed_random(seed, 80), ("A", "EXAMINE INBOX"),
                                         *[("A", c) for c in RANDOM_COMMANDS]],
             doc="RFC 5256 and RFC 5957 on a seeded random mailbox: every key, both "
                 "algorithms.") for seed in SEEDS],
    Script("esort", [*seed_keyed(), ("A", "EXAMINE INBOX"),
                     ("A", "SORT RETURN (MIN MAX COUNT ALL) (DATE) UTF-8 ALL"),
                     ("A", "SORT RETURN () (REVERSE SUBJECT) UTF-8 ALL"),
                     ("A", "UID SORT RETURN (ALL) (ARRIVAL) UTF-8 ALL"),
                     ("A", "UID SORT RETURN (COUNT) (SIZE) UTF-8 NOT ALL"),
                     ("A", "SORT RETURN (MIN MAX) (SIZE) UTF-8 NOT ALL"),
                     ("A", "SORT RETURN (MAX) (REVERSE ARRIVAL) UTF-8 2:5")],
           doc="RFC 5267 3: SORT RETURN answered with ESEARCH, in sort order."),
    Script("sort-errors", [*seed_keyed()[:2], ("A", "EXAMINE INBOX"),
                           ("A", "SORT (NOSUCHKEY) UTF-8 ALL"), ("A", "SORT () UTF-8 ALL"),
                           ("A", "SORT DATE UTF-8 ALL"), ("A", "SORT (DATE) UTF-8"),
                           ("A", "SORT (REVERSE) UTF-8 ALL"), ("A", "THREAD NOSUCH UTF-8 ALL"),
                           ("A", "THREAD REFERENCES UTF-8"), ("A", "SORT (DATE) UTF-8 NOSUCH"),
                           ("A", "UID THREAD"), ("A", "SORT"), ("A", "SORT (DATE) ALL"),
                           ("A", "SORT (DATE) UTF-8 (ALL"), ("A", "SORT RETURN (DATE) UTF-8 ALL"),
                           ("A", "SORT RETURN (BOGUS) (DATE) UTF-8 ALL"),
                           ("A", "SORT (REVERSE REVERSE DATE) UTF-8 ALL")],
           doc="RFC 5256 3 and 4: bad syntax is BAD.  (Charsets other than UTF-8 and "
               "US-ASCII, which Dovecot converts with iconv and we refuse with NO "
               "[BADCHARSET], are tested in tests/test_imap_sort.py.)"),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_sort_thread_like_dovecot(differential, script):
    """RFC 5256 / 5957 / 5267: our SORT and THREAD answers equal Dovecot's."""
    differential.run(script)
