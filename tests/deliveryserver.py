"""Running the delivery listeners for tests: in this process, or as a real ``imapserver``.

``InProcess`` runs :func:`imapserver.delivery.start` on an asyncio loop in a thread, over a
store the test holds (so a test can hand it a failing backend).  ``ServerProcess`` starts
``python -m imapserver.main`` with IMAP disabled and SMTP/LMTP on ports the kernel picks
(``--smtp-port auto``), and learns them from the ``<name> listening on host:port`` lines.
Both poll with timeouts; nothing sleeps for a fixed time.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import time

from mailstore import config as configmod

START_TIMEOUT = 30.0


def config(**delivery) -> configmod.Config:
    """The default configuration with ``[delivery]`` overrides; both listeners on ``auto``."""
    max_size = delivery.pop("max_message_size", None)
    values = {"smtp_port": "auto", "lmtp_port": "auto", "domains": ["example.com", "localhost"]}
    values.update(delivery)
    return configmod.load(None, {"delivery": values,
                                 "store": {"max_message_size": max_size}})


class InProcess:
    """The delivery listeners over ``store`` on a private event loop; a context manager."""

    def __init__(self, store, cfg: configmod.Config | None = None):
        self.store = store
        self.cfg = cfg or config(max_message_size=store.max_message_size)
        self.ports: dict[str, int] = {}
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.listeners: list = []

    def __enter__(self) -> InProcess:
        from imapserver import delivery

        self.thread.start()

        async def start():
            return delivery.start(self.store, self.cfg, None, self.loop,
                                  lambda name, host, port: self.ports.__setitem__(name, port))

        self.listeners = asyncio.run_coroutine_threadsafe(start(), self.loop).result(
            START_TIMEOUT)
        return self

    def __exit__(self, *exc) -> None:
        async def stop():
            for listener in self.listeners:
                await listener.stop()
            # Worker threads of asyncio.to_thread, then the loop's own resources.
            await self.loop.shutdown_default_executor()

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(START_TIMEOUT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(START_TIMEOUT)
        self.loop.close()


class ServerProcess:
    """``python -m imapserver.main`` on ``data_dir`` with only SMTP and LMTP; a context manager.

    ``ports`` maps "smtp"/"lmtp" to the bound ports once started.  ``kill()`` sends SIGKILL.
    """

    def __init__(self, data_dir: str, *extra: str, config_file: str | None = None):
        self.argv = [sys.executable, "-m", "imapserver.main", "--data-dir", data_dir,
                     "--imap-port", "0", "--imaps-port", "0",
                     "--smtp-port", "auto", "--lmtp-port", "auto", "--sieve-port", "0",
                     # One process: kill() is a crash of the process that delivers.
                     *([] if "--workers" in extra else ["--workers", "1"]), *extra]
        if config_file:
            self.argv += ["--config", config_file]
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen | None = None
        self.errors = None

    def start(self) -> ServerProcess:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # stderr to a file: a pipe nobody reads could fill up and stall the server.
        self.errors = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=self.errors,
                                     env=env)
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT
        buffer = b""
        try:
            # Extra listeners (``--imap-port auto``) are announced before SMTP and LMTP.
            while not {"smtp", "lmtp"} <= set(self.ports):
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"imapserver did not start: {self.stderr()}")
                if not sel.select(timeout=0.5):
                    continue
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    words = line.decode().split()
                    if len(words) == 4 and words[1:3] == ["listening", "on"]:
                        self.ports[words[0]] = int(words[3].rsplit(":", 1)[1])
        finally:
            sel.close()
        return self

    def stderr(self) -> str:
        """What the server wrote to stderr so far."""
        if isinstance(self.errors, str):
            return self.errors
        self.errors.seek(0)
        return self.errors.read().decode(errors="replace")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        self._reap()

    def stop(self) -> int | None:
        """SIGTERM and wait: the server stops its listeners and exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(START_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        return self._reap()

    def _reap(self) -> int | None:
        if self.proc is None:
            return None
        code = self.proc.wait()
        if not self.proc.stdout.closed:
            self.proc.stdout.close()
        if not isinstance(self.errors, str):
            text = self.stderr()
            self.errors.close()
            self.errors = text
        return code

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


# -- client side ------------------------------------------------------------------------------

def lmtp_send(client, sender: str, recipients: list[str], data: bytes
              ) -> tuple[list[tuple[int, bytes]], list[tuple[int, bytes]]]:
    """One LMTP transaction on a connected ``smtplib.LMTP``: (RCPT replies, DATA replies).

    ``smtplib.LMTP.sendmail`` reads a single reply after DATA; LMTP sends one per accepted
    recipient (RFC 2033 4.2), so they are read here one by one.  ``data`` is sent as given
    (dot-stuffed by smtplib).
    """
    client.ehlo_or_helo_if_needed()
    code, text = client.mail(sender)
    assert code == 250, (code, text)
    rcpt = [client.rcpt(r) for r in recipients]
    accepted = sum(1 for code, _ in rcpt if code == 250)
    if not accepted:
        client.rset()
        return rcpt, []
    answers = [client.data(data)]
    answers += [client.getreply() for _ in range(accepted - 1)]
    return rcpt, answers


def raw_session(port: int, lines: list[bytes | int]) -> list[bytes]:
    """Send each item of ``lines`` as it is and collect the replies, line by line.

    A CRLF-terminated item is answered by one reply (all the lines of a multi-line one after
    EHLO/LHLO); an int is a number of further reply lines to read (pipelined commands, LMTP's
    per-recipient DATA replies); other items (part of a line) get no reply of their own.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock, \
            sock.makefile("rb") as reader:
        replies = [reader.readline()]
        for item in lines:
            if isinstance(item, int):
                replies += [reader.readline() for _ in range(item)]
                continue
            sock.sendall(item)
            if not item.endswith(b"\r\n"):
                continue
            reply = reader.readline()
            while reply[3:4] == b"-":
                replies.append(reply)
                reply = reader.readline()
            replies.append(reply)
        return replies


def stored(store, user: str, mailbox: str = "INBOX") -> list[bytes]:
    """The messages of a mailbox as stored, oldest first."""
    box = store.mailbox(user, mailbox)
    return [store.read_message(v) for v in store.fetch(box, store.uids(box))]


def body_of(message: bytes) -> bytes:
    """What follows the trace fields a delivery adds (Return-Path, Delivered-To, Received)."""
    lines = message.split(b"\r\n")
    i = 0
    while lines[i].startswith((b"Return-Path:", b"Delivered-To:", b"Received:", b"\t")):
        i += 1
    return b"\r\n".join(lines[i:])
