"""The two IMAP servers bench/imap_bench.py compares, their mail, and what /proc says of them.

* :class:`OurServer` runs ``python -m imapserver.main`` over an embedded store directory that
  :func:`fill_ours` filled beforehand through the store API (content ingested once, then one
  message row per copy: far faster than APPEND over the wire).
* :class:`Dovecot` runs Debian's ``dovecot -F`` with a throwaway configuration: IMAP only, on a
  loopback port, maildir under a temporary directory, a passwd-file of the bench's users whose
  passwords are yescrypt hashes -- what Debian 12 writes to /etc/shadow, so a login costs what
  it costs under the stock PAM setup.  Everything else is Dovecot's default (``mail_fsync =
  optimized``, one ``imap`` process per connection, ``imap-login`` in its high-security mode).
  ``Dovecot(users, tuned=True)`` is its documented high-performance mode instead, the
  yardstick of issue 14: ``imap-login`` and ``imap`` processes that live on
  (``service_count = 0``) and are started ahead (``process_min_avail``, one per core), an
  auth cache (``auth_cache_size``), and salted SHA-512 (``{SSHA512}``) password hashes, a
  fast scheme, instead of yescrypt.
  :func:`fill_maildir` writes the same messages as Maildir files (``cur/``, unique names,
  ``S=``/``W=`` sizes as Dovecot's own deliveries write them); Dovecot indexes them on the first
  SELECT.
* :class:`Mail` is the mail both get: per user, which corpus message goes where, with which flags.

Dovecot gives no mail access to UID 0 and its login processes do not run as root, so as root
the mail belongs to ``nobody`` and the login user is ``dovenull`` (as in tests/dovecot.py).
"""

from __future__ import annotations

import base64
import ctypes
import ctypes.util
import hashlib
import os
import pwd
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mailstore.backends.embedded import EmbeddedBackend  # noqa: E402
from mailstore.store import MailStore  # noqa: E402
from mailstore.testing.daemons import find_daemon  # noqa: E402

PASSWORD = "secret"
START_TIMEOUT = 60.0


# -- the mail -------------------------------------------------------------------------------------

def message(n: int, size: int) -> bytes:
    """Corpus message ``n``: a plain-text message of about ``size`` octets (CRLF lines).

    Its Subject carries ``topic <n % 100>``, its From ``sender<n % 97>``, and its body the word
    ``needle<n>``, so that the bench's searches match a known share of a mailbox.
    """
    head = (f"From: Sender {n % 97} <sender{n % 97}@example.org>\r\n"
            f"To: Bench User <user@example.com>\r\n"
            f"Subject: topic {n % 100} report number {n}\r\n"
            f"Date: Sat, 21 Nov 2026 {n % 24:02d}:{n % 60:02d}:00 +0000\r\n"
            f"Message-ID: <corpus-{n}@bench.example.org>\r\n"
            "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n")
    words = ("the quick brown fox jumps over the lazy dog while the mail server keeps "
             f"every message safe needle{n} and answers quickly ").split()
    lines, line, total = [], [], len(head)
    i = 0
    while total < size:
        word = words[i % len(words)]
        i += 1
        line.append(word)
        if len(line) == 12:
            text = " ".join(line) + "\r\n"
            lines.append(text)
            total += len(text)
            line = []
    return (head + "".join(lines)).encode()


@dataclass
class Mailbox:
    """One user's INBOX: ``count`` messages, message i being corpus[i % len(corpus)]; every
    message whose index is not a multiple of ``unseen_every`` is \\Seen (0: none is)."""

    count: int = 0
    corpus: list[bytes] = field(default_factory=list)
    unseen_every: int = 0

    def seen(self, i: int) -> bool:
        return bool(self.unseen_every) and i % self.unseen_every != 0


@dataclass
class Mail:
    """Users (all with password :data:`PASSWORD`) and what their INBOX holds."""

    users: dict[str, Mailbox]


def fill_ours(data_dir: str, mail: Mail) -> None:
    """Create the users and their messages in an embedded store, straight through MailStore."""
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    # scrypt (~50 ms a user) releases the GIL: two threads for two cores.
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda u: store.create_user(u, PASSWORD, default_folders=False),
                      mail.users))
    # Content is stored once per distinct corpus message, with a reference per copy.
    refs: dict[int, int] = {}
    for box in mail.users.values():
        for i in range(box.count):
            key = id(box.corpus[i % len(box.corpus)])
            refs[key] = refs.get(key, 0) + 1
    stored: dict[int, object] = {}
    for box in mail.users.values():
        for msg in box.corpus:
            if id(msg) in refs and id(msg) not in stored:
                stored[id(msg)] = store.ingest(msg, refs=refs[id(msg)])
    for user, box in mail.users.items():
        inbox = store.mailbox(user, "INBOX")
        seen, unseen = ["\\Seen"], []
        for i in range(box.count):
            msg = box.corpus[i % len(box.corpus)]
            store.add_stored(inbox, stored[id(msg)], seen if box.seen(i) else unseen,
                             1_700_000_000.0 + i)
        # As `mailadmin import` does at its end: the index checkpoint (docs/decisions/0009).
        store.open_index(inbox)
    store.backend.sync()
    store.close()


def fill_maildir(mail_root: Path, mail: Mail, uid: int, gid: int) -> None:
    """Write every user's INBOX as a Maildir (LF line endings, as Dovecot stores mail)."""
    stamp = int(time.time())
    for user, box in mail.users.items():
        maildir = mail_root / user / "Maildir"
        for sub in ("cur", "new", "tmp"):
            (maildir / sub).mkdir(parents=True, exist_ok=True)
        lf = [m.replace(b"\r\n", b"\n") for m in box.corpus]
        cur = str(maildir / "cur")
        for i in range(box.count):
            body = lf[i % len(lf)]
            vsize = len(box.corpus[i % len(box.corpus)])
            flags = "S" if box.seen(i) else ""
            name = f"{stamp}.M{i}P{os.getpid()}.bench,S={len(body)},W={vsize}:2,{flags}"
            path = os.path.join(cur, name)
            with open(path, "wb") as f:
                f.write(body)
            os.chown(path, uid, gid)
            os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
        for dirpath, _dirs, _files in os.walk(mail_root / user):
            os.chown(dirpath, uid, gid)


# -- /proc -----------------------------------------------------------------------------------------

def status_kib(pid: int, key: str) -> int:
    """A ``Vm*`` line of /proc/<pid>/status in KiB (0 if the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


def pss_kib(pid: int) -> int:
    """Proportional set size: shared pages divided among the processes sharing them."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def reset_hwm(pid: int) -> bool:
    """Reset VmHWM to the current RSS (``clear_refs`` 5); False where that is not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm may hold spaces; fields after it are space-separated.
    return [text[:text.index(" ")], text[text.index("(") + 1:text.rindex(")")]] + \
        text[text.rindex(")") + 2:].split()


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int, children: bool = False) -> float:
    """User + system CPU of a process (plus that of its reaped children, if asked)."""
    st = _stat(pid)
    if st is None:
        return 0.0
    # After pid and comm: state(2) ppid(3) ... utime(13) stime(14) cutime(15) cstime(16).
    ticks = int(st[13]) + int(st[14])
    if children:
        ticks += int(st[15]) + int(st[16])
    return ticks / _TICK


def process_tree(root: int) -> list[tuple[int, str]]:
    """(pid, comm) of ``root``'s descendants, root excluded."""
    parent: dict[int, int] = {}
    comm: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = _stat(int(entry))
        if st is None:
            continue
        parent[int(entry)] = int(st[3])
        comm[int(entry)] = st[1]
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for child, ppid in parent.items():
            if ppid == p:
                out.append((child, comm[child]))
                todo.append(child)
    return out


def socket_owner(server_port: int, client_port: int) -> int | None:
    """The pid holding the server end of the loopback TCP connection to ``client_port``."""
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    cols = line.split()
                    local, remote = cols[1], cols[2]
                    if int(local.split(":")[1], 16) == server_port and \
                            int(remote.split(":")[1], 16) == client_port:
                        inode = cols[9]
        except FileNotFoundError:
            continue
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{entry}/fd"):
                if os.readlink(f"/proc/{entry}/fd/{fd}") == target:
                    return int(entry)
        except OSError:
            continue
    return None


class Sampler:
    """Samples a memory figure every ``interval`` seconds in a thread; keeps the peak."""

    def __init__(self, read, interval: float = 0.005):
        self.read = read
        self.interval = interval
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self.peak = self.read()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self.read())

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.read())


# -- the servers -----------------------------------------------------------------------------------

def stop_process(proc: subprocess.Popen | None) -> None:
    """Terminate a server process if it runs (SIGKILL if it ignores that for 30 s)."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_greeting(port: int, proc: subprocess.Popen, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                if sock.recv(200).startswith(b"* OK"):
                    return True
        except OSError:
            time.sleep(0.05)
    return False


class OurServer:
    """``imapserver`` over ``data_dir`` with its default configuration, IMAP on a port the
    kernel picks (read back from its ``imap listening on`` line), other listeners off."""

    name = "ours"

    def __init__(self, data_dir: str, log_path: str, env: dict[str, str] | None = None,
                 workers: str = "1", root: str | None = None):
        self.data_dir = data_dir
        # Another checkout's code (a before/after comparison in one run), else this one's.
        self.root = root or str(ROOT)
        self.log_path = log_path
        self.env = env or {}
        # One process unless asked: the figures in bench/RESULTS.md (memory and py-spy of
        # one pid included) were taken so; CPU sums the workers when there are several.
        self.workers = workers
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self) -> OurServer:
        log = open(self.log_path, "ab")
        offset = log.tell()  # a restart appends: read only what this run writes
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "imapserver.main", "--data-dir", self.data_dir,
             "--imap-port", "auto", "--imaps-port", "0", "--smtp-port", "0", "--lmtp-port", "0",
             "--sieve-port", "0",
             "--workers", self.workers],
            cwd=self.root, stdout=log, stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1", **self.env,
                     **({"PYTHONPATH": self.root} if root_differs(self.root) else {})))
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and self.proc.poll() is None:
            m = re.search(r"imap listening on \S+:(\d+)",
                          Path(self.log_path).read_bytes()[offset:].decode(errors="replace"))
            if m:
                self.port = int(m.group(1))
                if wait_greeting(self.port, self.proc, START_TIMEOUT):
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("imapserver did not start:\n" + self.log())

    def log(self) -> str:
        return Path(self.log_path).read_text(errors="replace")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_kib(self) -> int:
        return status_kib(self.pid, "VmRSS")

    def cpu(self) -> float:
        return cpu_seconds(self.pid) + sum(cpu_seconds(p) for p, _ in process_tree(self.pid))

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None


def root_differs(root: str) -> bool:
    return Path(root).resolve() != ROOT


def yescrypt(password: str) -> str:
    """A yescrypt hash at libxcrypt's default cost (Debian 12's /etc/shadow), or SHA512-CRYPT
    where this libcrypt has no yescrypt."""
    lib = ctypes.CDLL(ctypes.util.find_library("crypt") or "libcrypt.so.1")
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    for prefix in (b"$y$", b"$6$"):
        setting = lib.crypt_gensalt(prefix, 0, None, 0)
        if setting:
            hashed = lib.crypt(password.encode(), setting)
            if hashed and hashed.startswith(prefix):
                return hashed.decode()
    raise RuntimeError("libcrypt can make neither yescrypt nor SHA512-CRYPT hashes")


def ssha512(password: str) -> str:
    """Dovecot's ``{SSHA512}`` scheme: base64(SHA-512(password + salt) + salt), one hash."""
    salt = os.urandom(8)
    digest = hashlib.sha512(password.encode() + salt).digest()
    return "{SSHA512}" + base64.b64encode(digest + salt).decode()


TUNED_SERVICES = """\
# The high-performance mode (doc.dovecot.org, "Login processes" and "Service
# configuration"): login processes that serve many connections and stay, imap processes
# reused for the next session, both started before the first client, and an auth cache.
auth_cache_size = 10M
auth_cache_ttl = 1 hour
service imap-login {{
  service_count = 0
  process_min_avail = {cores}
  vsz_limit = 1G
}}
service imap {{
  service_count = 0
  process_min_avail = {cores}
}}
"""


class Dovecot:
    """Debian's Dovecot, IMAP only, on a loopback port, over maildirs in ``self.dir``; stock
    settings, or its high-performance mode with ``tuned``."""

    name = "dovecot"

    def __init__(self, users: list[str], tuned: bool = False):
        self.tuned = tuned
        if tuned:
            self.name = "tuned"
        self.dir = Path(tempfile.mkdtemp(prefix="dovecot-imap-bench-"))
        os.chmod(self.dir, 0o755)
        self.mail = self.dir / "mail"
        self.mail.mkdir()
        if os.getuid() == 0:
            owner = pwd.getpwnam("nobody")
            self.uid, self.gid = owner.pw_uid, owner.pw_gid
            self._users_conf = ("default_login_user = dovenull\n"
                                "default_internal_user = dovecot\n")
            # The auth processes read the passwd-file as root; nothing else needs to.
            self._services = "service auth {\n  user = root\n}\n" \
                             "service auth-worker {\n  user = root\n}\n"
        else:
            self.uid, self.gid = os.getuid(), os.getgid()
            me = pwd.getpwuid(self.uid).pw_name
            self._users_conf = (f"default_login_user = {me}\ndefault_internal_user = {me}\n"
                                f"default_internal_group = {me}\n")
            self._services = ""
        os.chown(self.mail, self.uid, self.gid)
        if tuned:
            hashed, self.scheme = ssha512(PASSWORD), "SSHA512"
        else:
            hashed = "{CRYPT}" + yescrypt(PASSWORD)
            self.scheme = "yescrypt" if hashed.startswith("{CRYPT}$y$") else "SHA512-CRYPT"
        (self.dir / "passwd").write_text("".join(
            f"{u}:{hashed}:{self.uid}:{self.gid}::{self.mail}/{u}::\n" for u in users))
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def _configure(self) -> Path:
        d = self.dir
        conf = d / "dovecot.conf"
        conf.write_text(f"""\
protocols = imap
listen = 127.0.0.1
base_dir = {d}/base
state_dir = {d}/state
log_path = {d}/dovecot.log
ssl = no
# Plain LOGIN over loopback, as imapserver's default plaintext_auth = loopback allows.
disable_plaintext_auth = no
{self._users_conf}mail_location = maildir:~/Maildir
passdb {{
  driver = passwd-file
  args = {d}/passwd
}}
userdb {{
  driver = passwd-file
  args = {d}/passwd
}}
service imap-login {{
  inet_listener imap {{
    port = {self.port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
{self._services}{TUNED_SERVICES.format(cores=os.cpu_count() or 1) if self.tuned else ""}""")
        return conf

    def start(self) -> Dovecot:
        for _attempt in range(5):
            self.port = free_port()
            conf = self._configure()
            # TZ: Dovecot writes INTERNALDATE in its local time zone; make that UTC like ours.
            self.proc = subprocess.Popen([find_daemon("dovecot"), "-F", "-c", str(conf)],
                                         env={**os.environ, "TZ": "UTC"},
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if wait_greeting(self.port, self.proc, START_TIMEOUT):
                return self
            self.stop()  # most likely the port was taken in between; try another
        raise RuntimeError("dovecot did not start:\n" + self.log())

    def log(self) -> str:
        path = self.dir / "dovecot.log"
        return path.read_text(errors="replace") if path.exists() else ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def imap_pids(self) -> list[int]:
        return [p for p, comm in process_tree(self.pid) if comm == "imap"]

    def rss_kib(self) -> int:
        """RSS summed over the master and all its processes (shared pages counted in each)."""
        return status_kib(self.pid, "VmRSS") + sum(status_kib(p, "VmRSS")
                                                    for p, _ in process_tree(self.pid))

    def cpu(self) -> float:
        """CPU of the whole tree: the master, its live children and those it has reaped."""
        return cpu_seconds(self.pid, children=True) + sum(
            cpu_seconds(p) for p, _ in process_tree(self.pid))

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc = None
