"""A throwaway Dovecot IMAP server for differential tests, and a byte-exact IMAP client.

:class:`Dovecot` writes a minimal configuration (maildir, a passwd-file with one user, no
TLS, base and state directories of its own, a log file), runs ``dovecot -F`` on a free
loopback port and stops it again.  :class:`RawImap` speaks just enough IMAP over a socket to
APPEND messages and FETCH them, returning each response exactly as sent -- literals included
-- so that tests can compare octets rather than what a client library makes of them.

Dovecot will not give mail access to UID 0 and its login processes will not run as root, so
when the tests run as root the mail user is ``nobody`` and the login user ``dovenull`` (the
``dovecot-core`` package creates it).  ``nobody`` cannot reach into pytest's ``tmp_path``
(mode 0700 all the way up), so then the server's directory is a fresh ``mkdtemp`` made
traversable; otherwise everything runs as the current user inside the given directory.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from mailstore.testing.daemons import find_daemon

USER, PASSWORD = "test", "secret"
_LITERAL = re.compile(rb"\{(\d+)\+?\}\r\n$")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The folders ``MailStore.create_user`` gives every account (mailstore/mailboxes.py
# DEFAULT_FOLDERS), as Dovecot namespace settings: created, subscribed, with their SPECIAL-USE.
SPECIAL_USE_FOLDERS = "".join(
    f"  mailbox {name} {{\n    special_use = \\{name}\n    auto = subscribe\n  }}\n"
    for name in ("Drafts", "Sent", "Trash", "Junk", "Archive"))


class Dovecot:
    """``with Dovecot(tmp_path) as server: RawImap(server.port)`` -- a running Dovecot.

    By default it is the minimal server described above (maildir, one user ``test``, Dovecot's
    own hierarchy separator).  ``like_ours=True`` makes it look like a fresh account of ours
    for differential tests: ``/`` as separator with no name restrictions (sdbox), INBOX plus
    the default special-use folders, subscribed; and a short ``auth_failure_delay``.  Add
    accounts while it runs with :meth:`add_user` (one passwd-file per user).  ``extra_config``
    is appended to the configuration (plugins and settings an extension's tests need).
    """

    def __init__(self, workdir: Path, timeout: float = 15.0, like_ours: bool = False,
                 extra_config: str = ""):
        self.timeout = timeout
        self.like_ours = like_ours
        self.extra_config = extra_config  # e.g. mail_plugins for an extension's scripts
        self._own_dir = os.getuid() == 0
        self.dir = Path(tempfile.mkdtemp(prefix="dovecot-")) if self._own_dir else workdir
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._uid = self._gid = -1

    def add_user(self, name: str, password: str) -> None:
        """A fresh, empty account ``name`` with its own home directory."""
        home = self.dir / "homes" / name
        home.mkdir(parents=True)
        os.chown(home, self._uid, self._gid)
        # One passwd-file per user (``args = users/%u``): a file Dovecot has not read yet
        # cannot be a stale cached copy, however quickly users are added.
        (self.dir / "users" / name).write_text(
            f"{name}:{{PLAIN}}{password}:{self._uid}:{self._gid}::{home}::\n")

    def _configure(self) -> Path:
        d = self.dir
        mail = d / "mail"
        mail.mkdir(parents=True, exist_ok=True)
        if self._own_dir:
            os.chmod(d, 0o755)
            nobody = pwd.getpwnam("nobody")
            uid, gid = nobody.pw_uid, nobody.pw_gid
            os.chown(mail, uid, gid)
            users = "default_login_user = dovenull\ndefault_internal_user = dovecot\n"
            # The auth processes read the passwd-file as root; nothing else needs to.
            services = "service auth {\n  user = root\n}\nservice auth-worker {\n  user = root\n}\n"
            login_chroot = ""
        else:
            uid, gid = os.getuid(), os.getgid()
            me, group = pwd.getpwuid(uid).pw_name, grp.getgrgid(gid).gr_name
            users = (f"default_login_user = {me}\ndefault_internal_user = {me}\n"
                     f"default_internal_group = {group}\n")
            # Without root there is no chroot(); these two services chroot by default.
            services = "service anvil {\n  chroot =\n}\n"
            login_chroot = "  chroot =\n"
        self._uid, self._gid = uid, gid
        homes = d / "homes"
        homes.mkdir(exist_ok=True)
        os.chown(homes, uid, gid)
        if self.like_ours:
            location = "sdbox:~/sdbox"
            extra = ("auth_failure_delay = 0\n"
                     "namespace inbox {\n  inbox = yes\n  separator = /\n  prefix =\n"
                     "  mailbox INBOX {\n    auto = subscribe\n  }\n"
                     + SPECIAL_USE_FOLDERS + "}\n")
        else:
            location, extra = f"maildir:{mail}/Maildir", ""
        (d / "users").mkdir(exist_ok=True)
        (d / "users" / USER).write_text(f"{USER}:{{PLAIN}}{PASSWORD}:{uid}:{gid}::{mail}::\n")
        conf = d / "dovecot.conf"
        conf.write_text(f"""\
protocols = imap
listen = 127.0.0.1
base_dir = {d}/base
state_dir = {d}/state
log_path = {d}/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain
{users}mail_location = {location}
{extra}{self.extra_config}passdb {{
  driver = passwd-file
  args = {d}/users/%u
}}
userdb {{
  driver = passwd-file
  args = {d}/users/%u
}}
service imap-login {{
  inet_listener imap {{
    port = {self.port}
  }}
  inet_listener imaps {{
    port = 0
  }}
{login_chroot}}}
{services}""")
        return conf

    def __enter__(self) -> Dovecot:
        for _attempt in range(5):
            self.port = _free_port()
            conf = self._configure()
            # TZ: Dovecot writes INTERNALDATE in its local time zone; make that UTC.
            self.proc = subprocess.Popen([find_daemon("dovecot"), "-F", "-c", str(conf)],
                                         env={**os.environ, "TZ": "UTC"},
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_ready():
                return self
            self._stop()  # most likely the port was taken in between; try another
        raise RuntimeError("dovecot did not start:\n" + self.log())

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    if sock.recv(100).startswith(b"* OK"):
                        return True
            except OSError:
                time.sleep(0.05)
        return False

    def log(self) -> str:
        path = self.dir / "dovecot.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(self.timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def __exit__(self, *exc) -> None:
        self._stop()
        if self._own_dir:
            shutil.rmtree(self.dir, ignore_errors=True)


class RawImap:
    """A minimal IMAP client that returns responses as the exact octets the server sent."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.file = self.sock.makefile("rb")
        self.counter = 0
        greeting = self.file.readline()
        assert greeting.startswith(b"* OK"), greeting

    def close(self) -> None:
        try:
            self.command(b"LOGOUT")
        finally:
            self.file.close()
            self.sock.close()

    def _response(self) -> bytes:
        """One response: a line, and when it announces a literal, the literal and the rest."""
        out = bytearray()
        while True:
            line = self.file.readline()
            if not line:
                raise ConnectionError("server closed the connection")
            out += line
            m = _LITERAL.search(line)
            if m is None:
                return bytes(out)
            out += self.file.read(int(m.group(1)))

    def command(self, text: bytes, literal: bytes | None = None) -> list[bytes]:
        """Send a command (with one LITERAL+ literal appended, if given); return the untagged
        responses.  Raises AssertionError unless the tagged response is OK."""
        untagged, tagged = self.run(text, literal)
        assert tagged.split(b" ", 2)[1] == b"OK", tagged
        return untagged

    def run(self, text: bytes, literal: bytes | None = None) -> tuple[list[bytes], bytes]:
        """Send a command; return its untagged responses and its tagged response line."""
        self.counter += 1
        tag = b"t%d" % self.counter
        line = tag + b" " + text
        if literal is not None:
            line += b" {%d+}\r\n" % len(literal) + literal
        self.sock.sendall(line + b"\r\n")
        untagged = []
        while True:
            response = self._response()
            if response.startswith(tag + b" "):
                return untagged, response
            untagged.append(response)

    def login(self) -> None:
        self.command(b"LOGIN %s %s" % (USER.encode(), PASSWORD.encode()))

    def fetch(self, seq: int, items: bytes) -> list[tuple[bytes, bytes]]:
        """``FETCH seq (items)``; the attributes of the FETCH response as (name, value)."""
        responses = [r for r in self.command(b"FETCH %d (%s)" % (seq, items))
                     if re.match(rb"\* %d FETCH " % seq, r)]
        assert len(responses) == 1, responses
        return split_fetch(responses[0])


# -- reading responses -------------------------------------------------------------------------

def _skip_value(data: bytes, i: int) -> int:
    """Index just past the value (atom, string, literal or list) starting at ``data[i]``."""
    c = data[i:i + 1]
    if c == b'"':
        i += 1
        while data[i:i + 1] != b'"':
            i += 2 if data[i:i + 1] == b"\\" else 1
        return i + 1
    if c == b"{":
        end = data.index(b"}\r\n", i)
        return end + 3 + int(data[i + 1:end].rstrip(b"+"))
    if c == b"(":
        i += 1
        while data[i:i + 1] != b")":
            if data[i:i + 1] == b" ":
                i += 1
            else:
                i = _skip_value(data, i)
        return i + 1
    m = re.compile(rb"[^ ()\r\n]+").match(data, i)
    return m.end()


def _skip_name(data: bytes, i: int) -> int:
    """Index past a FETCH attribute name such as ``BODY[HEADER.FIELDS (A B)]<0>``."""
    depth = 0
    while True:
        c = data[i]
        if c == 0x5B:
            depth += 1
        elif c == 0x5D:
            depth -= 1
        elif c == 0x20 and depth == 0:
            return i
        i += 1


def split_fetch(response: bytes) -> list[tuple[bytes, bytes]]:
    """The ``(name, value)`` pairs of ``* n FETCH (...)``, values as the exact octets sent."""
    i = response.index(b"(") + 1
    pairs = []
    while response[i:i + 1] != b")":
        if response[i:i + 1] == b" ":
            i += 1
            continue
        end = _skip_name(response, i)
        name = response[i:end]
        start = end + 1
        i = _skip_value(response, start)
        pairs.append((name, response[start:i]))
    return pairs


def parse_value(data: bytes, i: int = 0):
    """The value at ``data[i]`` as Python data -- ``None`` for NIL, ``bytes`` for strings,
    ``("atom", text)`` for other atoms, lists for lists -- and the index past it."""
    c = data[i:i + 1]
    if c == b'"':
        out = bytearray()
        i += 1
        while data[i:i + 1] != b'"':
            if data[i:i + 1] == b"\\":
                i += 1
            out += data[i:i + 1]
            i += 1
        return bytes(out), i + 1
    if c == b"{":
        end = data.index(b"}\r\n", i)
        n = int(data[i + 1:end].rstrip(b"+"))
        return data[end + 3:end + 3 + n], end + 3 + n
    if c == b"(":
        items = []
        i += 1
        while data[i:i + 1] != b")":
            if data[i:i + 1] == b" ":
                i += 1
                continue
            item, i = parse_value(data, i)
            items.append(item)
        return items, i + 1
    end = _skip_value(data, i)
    atom = data[i:end]
    return (None if atom.upper() == b"NIL" else ("atom", atom)), end
