"""Delivery rate over LMTP: this store's ``imapserver`` beside Dovecot's LMTP, same run.

    .venv/bin/python bench/delivery_bench.py [--messages N] [--connections C ...]

Both servers run on this machine at the same time, each with its own temporary directory:
``imapserver`` over the embedded store (``synchronous = FULL``: every acknowledged message
is fsynced) and ``dovecot -F`` with only LMTP, maildir, a passwd-file userdb (Dovecot's own
default ``mail_fsync = optimized`` also syncs every delivered message).  The same client
(stdlib ``smtplib.LMTP``, one thread per connection, one transaction per message) delivers N
messages of 10 KiB to 1 and to 10 recipients, first to one server then to the other, and
prints messages per second and our/Dovecot ratio.  Each configuration is measured ``--rounds``
times alternating the servers; the best round of each counts (least disturbed by the rest
of the machine).
"""

from __future__ import annotations

import argparse
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mailstore.backends.embedded import EmbeddedBackend  # noqa: E402
from mailstore.store import MailStore  # noqa: E402
from mailstore.testing.daemons import find_daemon  # noqa: E402

USERS = [f"user{i}" for i in range(10)]
MESSAGE_SIZE = 10 * 1024


def message(n: int) -> bytes:
    head = (f"From: Bench <bench@example.org>\r\nTo: users@localhost\r\n"
            f"Subject: bench {n}\r\nMessage-ID: <bench-{n}-{time.time_ns()}@example.org>\r\n"
            "Date: Sat, 21 Nov 2026 12:00:00 +0000\r\nMIME-Version: 1.0\r\n"
            "Content-Type: text/plain; charset=us-ascii\r\n\r\n").encode()
    line = b"0123456789abcdefghijklmnopqrstuvwxyz" * 2 + b"\r\n"
    body = line * ((MESSAGE_SIZE - len(head)) // len(line))
    return head + body + b"x" * (MESSAGE_SIZE - len(head) - len(body) - 2) + b"\r\n"


# -- servers ------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_banner(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
                if sock.recv(100).startswith(b"220"):
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("server did not answer in time")


class OurServer:
    def __init__(self, workdir: Path, extra: list[str] = ()):
        self.dir = workdir / "ours"
        store = MailStore(EmbeddedBackend(str(self.dir)))
        for user in USERS:
            store.create_user(user, None, default_folders=False)
        store.close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "imapserver.main", "--data-dir", str(self.dir),
             "--imap-port", "0", "--imaps-port", "0", "--smtp-port", "0",
             "--lmtp-port", "auto", "--sieve-port", "0", *extra], cwd=ROOT,
            stdout=subprocess.PIPE)
        line = self.proc.stdout.readline().decode()
        if not line.startswith("lmtp listening on "):
            raise RuntimeError(f"imapserver did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])
        wait_banner(self.port, self.proc)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.proc.stdout.close()


class Dovecot:
    """Dovecot's LMTP alone, on a loopback port, delivering into maildirs under a temp dir.

    Dovecot gives no mail access to UID 0, so as root the mail belongs to ``nobody`` and the
    directory is made traversable for it.
    """

    def __init__(self, workdir: Path):
        self.dir = Path(tempfile.mkdtemp(prefix="dovecot-bench-"))
        os.chmod(self.dir, 0o755)
        mail = self.dir / "mail"
        mail.mkdir()
        if os.getuid() == 0:
            owner = pwd.getpwnam("nobody")
            uid, gid = owner.pw_uid, owner.pw_gid
            os.chown(mail, uid, gid)
            users = "default_login_user = dovenull\ndefault_internal_user = dovecot\n"
            services = "service auth {\n  user = root\n}\nservice auth-worker {\n  user = root\n}\n"
        else:
            uid, gid = os.getuid(), os.getgid()
            me = pwd.getpwuid(uid).pw_name
            users = (f"default_login_user = {me}\ndefault_internal_user = {me}\n"
                     f"default_internal_group = {me}\n")
            services = ""
        (self.dir / "passwd").write_text("".join(
            f"{u}::{uid}:{gid}::{mail}/{u}::\n" for u in USERS))
        self.port = free_port()
        conf = self.dir / "dovecot.conf"
        conf.write_text(f"""\
protocols = lmtp
listen = 127.0.0.1
base_dir = {self.dir}/base
state_dir = {self.dir}/state
log_path = {self.dir}/dovecot.log
ssl = no
{users}mail_location = maildir:~/Maildir
auth_username_format = %Ln
recipient_delimiter = +
lmtp_save_to_detail_mailbox = yes
passdb {{
  driver = passwd-file
  args = {self.dir}/passwd
}}
userdb {{
  driver = passwd-file
  args = {self.dir}/passwd
}}
service lmtp {{
  inet_listener lmtp {{
    address = 127.0.0.1
    port = {self.port}
  }}
}}
{services}""")
        self.proc = subprocess.Popen([find_daemon("dovecot"), "-F", "-c", str(conf)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_banner(self.port, self.proc)
        except RuntimeError:
            log = self.dir / "dovecot.log"
            raise RuntimeError(log.read_text() if log.exists() else "dovecot failed") from None

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


# -- client -------------------------------------------------------------------------------------

def deliver(port: int, count: int, recipients: int, connections: int) -> float:
    """Deliver ``count`` messages over ``connections`` LMTP sessions; messages per second."""
    import smtplib

    rcpts = [f"{u}@localhost" for u in USERS[:recipients]]
    data = [message(n) for n in range(count)]
    errors: list[str] = []

    def worker(part: list[bytes]) -> None:
        try:
            with smtplib.LMTP("127.0.0.1", port, timeout=60) as client:
                client.ehlo()
                for msg in part:
                    client.mail("bench@example.org")
                    for r in rcpts:
                        code, text = client.rcpt(r)
                        if code != 250:
                            raise RuntimeError(f"RCPT {r}: {code} {text!r}")
                    replies = [client.data(msg)] + [client.getreply() for _ in rcpts[1:]]
                    bad = [r for r in replies if r[0] != 250]
                    if bad:
                        raise RuntimeError(f"DATA: {bad}")
        except Exception as exc:  # reported after the run
            errors.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(data[i::connections],))
               for i in range(connections)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"delivery failed: {errors[:3]}")
    return count / elapsed


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=300, help="messages per measurement")
    p.add_argument("--connections", type=int, nargs="+", default=[1, 4],
                   help="concurrent LMTP sessions (each value is measured)")
    p.add_argument("--rounds", type=int, default=2, help="measurements per configuration")
    p.add_argument("--recipients", type=int, nargs="+", default=[1, 10],
                   help="recipients per message (each value is measured)")
    p.add_argument("--server-args", default="",
                   help="more imapserver arguments, space-separated (e.g. --workers 1)")
    args = p.parse_args()

    work = Path(tempfile.mkdtemp(prefix="delivery-bench-"))
    ours = dovecot = None
    try:
        ours = OurServer(work, args.server_args.split())
        dovecot = Dovecot(work)
        deliver(ours.port, 20, 1, 1)  # warm both up: imports, caches, first files
        deliver(dovecot.port, 20, 1, 1)
        print(f"{'recipients':>10} {'conns':>5} {'ours msg/s':>11} {'dovecot msg/s':>14} "
              f"{'ratio':>6}")
        rows = []
        for recipients in args.recipients:
            for connections in args.connections:
                best = {"ours": 0.0, "dovecot": 0.0}
                for _ in range(args.rounds):
                    for name, server in (("ours", ours), ("dovecot", dovecot)):
                        rate = deliver(server.port, args.messages, recipients, connections)
                        best[name] = max(best[name], rate)
                ratio = best["ours"] / best["dovecot"]
                rows.append((recipients, connections, best["ours"], best["dovecot"], ratio))
                print(f"{recipients:>10} {connections:>5} {best['ours']:>11.1f} "
                      f"{best['dovecot']:>14.1f} {ratio:>6.2f}", flush=True)
    finally:
        for server in (ours, dovecot):
            if server is not None:
                server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
