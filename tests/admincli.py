"""Helpers for the mailadmin tests: run the real console script, generate mbox files and
Maildir trees on disk (written here by hand, not by the code under test)."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field


def mailadmin_cmd() -> list[str]:
    script = shutil.which("mailadmin", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "mailstore.admin.cli"]


def run(*args: str, data_dir: str | None, stdin: str | None = None,
        extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    where = ("--data-dir", data_dir) if data_dir else ()
    return subprocess.run([*mailadmin_cmd(), *args, *where, *extra], input=stdin,
                          capture_output=True, text=True, timeout=300)


@dataclass
class Generated:
    """One generated message: its content as in the file, flags and internal date."""

    content: bytes
    flags: set[str] = field(default_factory=set)
    date: int = 0

    @property
    def stored(self) -> bytes:
        """The content as the store keeps it: bare LFs made CRLF."""
        return re.sub(rb"(?<!\r)\n", b"\r\n", self.content)


BODIES = [
    b"Plain body.\n",
    b"From the start of a line, unquoted in mboxrd\n>From quoted once\n>>From twice\n",
    b"Line one\n\nFrom: not a header here\n\n\n",
    b"8-bit: \xc3\xa9t\xc3\xa9 \xe2\x82\xac\n",
    b"no final newline",
]


def make_message(n: int, rng: random.Random, crlf: bool = False, size: int = 0) -> bytes:
    nl = b"\r\n" if crlf else b"\n"
    head = nl.join([b"Return-Path: <sender%d@example.org>" % n,
                    b"From: Sender %d <sender%d@example.org>" % (n, n),
                    b"To: bob@example.com", b"Subject: message %d" % n,
                    b"Message-ID: <gen%d@example.org>" % n,
                    b"Date: Sat, 21 Nov 2026 12:00:00 +0000"]) + nl
    body = rng.choice(BODIES)
    if crlf:
        body = body.replace(b"\n", b"\r\n")
    if size > len(head) + len(body):
        body += (b"x" * 76 + nl) * ((size - len(head) - len(body)) // (76 + len(nl)))
    return head + nl + body


FLAG_SETS = [set(), {"\\Seen"}, {"\\Seen", "\\Answered"}, {"\\Flagged"},
             {"\\Seen", "\\Draft", "$Label1"}, {"\\Deleted", "\\Seen", "work", "$Label1"}]


def generate(count: int, seed: int = 1, big: int | None = None,
             crlf: bool = False) -> list[Generated]:
    """Messages with LF line ends (as mbox and Maildir files have them), or CRLF."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        size = 2 * 1024 * 1024 if big is not None and n == big else 0
        content = make_message(n, rng, crlf=crlf, size=size)
        out.append(Generated(content, set(rng.choice(FLAG_SETS)),
                             1_600_000_000 + n * 86_400 + rng.randrange(86_400)))
    return out


def mbox_bytes(messages: list[Generated]) -> bytes:
    """An mboxrd file in the conventions export writes: Return-Path sender, asctime in UTC,
    Status/X-Status/X-Keywords just before the blank line that ends the header."""
    out = bytearray()
    for m in messages:
        sender = re.search(rb"Return-Path: <([^>]*)>", m.content).group(1)
        out += b"From " + sender + b" " + time.asctime(time.gmtime(m.date)).encode() + b"\n"
        nl = b"\r\n" if b"\r\n\r\n" in m.content else b"\n"
        head, body = m.content.split(nl + nl, 1)
        meta = b""
        if "\\Seen" in m.flags:
            meta += b"Status: RO" + nl
        x = "".join(c for c, f in (("A", "\\Answered"), ("F", "\\Flagged"), ("T", "\\Draft"),
                                   ("D", "\\Deleted")) if f in m.flags)
        if x:
            meta += b"X-Status: " + x.encode() + nl
        keywords = sorted(f for f in m.flags if not f.startswith("\\"))
        if keywords:
            meta += b"X-Keywords: " + " ".join(keywords).encode() + nl
        text = head + nl + meta + nl + body
        text = re.sub(rb"(?m)^(>*From )", rb">\1", text)
        out += text
        if not text.endswith(b"\n"):
            out += b"\n"
        out += b"\n"
    return bytes(out)


LETTERS = {"\\Draft": "D", "\\Flagged": "F", "$Forwarded": "P", "\\Answered": "R",
           "\\Seen": "S", "\\Deleted": "T"}


def write_maildir(folder: str, messages: list[Generated], keywords: list[str]) -> None:
    """A Maildir folder by hand: files in cur/ with :2, flags (keywords as dovecot-keywords
    letters), mtime = internal date; unflagged messages in new/."""
    for sub in ("cur", "new", "tmp"):
        os.makedirs(os.path.join(folder, sub), exist_ok=True)
    with open(os.path.join(folder, "dovecot-keywords"), "w") as f:
        f.writelines(f"{i} {k}\n" for i, k in enumerate(keywords))
    for i, m in enumerate(messages):
        letters = sorted(LETTERS[f] for f in m.flags if f in LETTERS)
        letters += sorted(chr(97 + keywords.index(f)) for f in m.flags if f in keywords)
        base = f"{m.date}.M{i}P1.gen"
        name = os.path.join(folder, "cur", f"{base}:2,{''.join(letters)}") if m.flags \
            else os.path.join(folder, "new", base)
        with open(name, "wb") as f:
            f.write(m.content)
        os.utime(name, (m.date, m.date))
