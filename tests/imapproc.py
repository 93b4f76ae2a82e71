"""A real ``imapserver`` subprocess for IMAP tests, and a raw transcript client.

The server listens on ports the kernel picks (``--imap-port auto``); the test learns them from
the ``<name> listening on host:port`` lines.  Users are created beforehand through the store on
the same data directory (the embedded store is shared by processes).
"""

from __future__ import annotations

import os
import re
import selectors
import socket
import subprocess
import sys
import threading
import time

from mailstore.backends.embedded import EmbeddedBackend
from mailstore.store import MailStore

START_TIMEOUT = 30.0


class ServerProcess:
    def __init__(self, data_dir: str, *extra: str, config: str | None = None,
                 umask: int = -1, wrapper: list[str] | tuple[str, ...] = ()):
        self.data_dir = data_dir
        self.extra = list(extra)
        self.config = config
        self.umask = umask  # the server's umask (-1: inherit the test's)
        self.wrapper = list(wrapper)  # a command the server runs under (setpriv, ...)
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen | None = None
        self.output: list[str] = []

    def __enter__(self) -> ServerProcess:
        return self.start()

    def start(self) -> ServerProcess:
        # One process unless a test asks for workers: the tests that read the server's PID
        # (memory, signals) or SIGKILL it as a crash mean that process (tests/test_workers.py
        # covers the supervisor).
        workers = [] if "--workers" in self.extra else ["--workers", "1"]
        cmd = [*self.wrapper, sys.executable, "-m", "imapserver.main",
               "--data-dir", self.data_dir, "--imap-port", "auto", "--imaps-port", "0",
               "--smtp-port", "0", "--lmtp-port", "0", "--sieve-port", "0", *workers,
               *self.extra]
        if self.config:
            cmd += ["--config", self.config]
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     env=env, umask=self.umask)
        wanted = {"imap"} | {n for n in ("smtp", "lmtp", "imaps") if f"--{n}-port" in
                            self.extra and self.extra[self.extra.index(f"--{n}-port") + 1] != "0"}
        if "--sieve-port" in self.extra and \
                self.extra[self.extra.index("--sieve-port") + 1] != "0":
            wanted.add("managesieve")
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT
        buffer = b""
        while not wanted <= set(self.ports):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("imapserver did not start:\n" + "\n".join(self.output)
                                   + buffer.decode(errors="replace"))
            if not sel.select(timeout=0.5):
                continue
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                text = line.decode(errors="replace")
                self.output.append(text)
                m = re.match(r"(\w+) listening on (\S+):(\d+)", text)
                if m:
                    self.ports[m.group(1)] = int(m.group(3))
        sel.close()
        # Keep draining the server's output: it logs a few lines per connection, and a full
        # pipe would block the server.  What it writes stays readable via wait_output().
        self.captured = bytearray(buffer)
        self._captured_lock = threading.Lock()
        self._drain = threading.Thread(target=self._drain_output, args=(self.proc.stdout,),
                                       daemon=True)
        self._drain.start()
        return self

    def _drain_output(self, stream) -> None:
        fd = stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self._captured_lock:
                self.captured += chunk

    def wait_output(self, pattern: bytes, timeout: float = 5.0) -> bytes:
        """The server's output once ``pattern`` (a regex) appears in it (or the timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._captured_lock:
                seen = bytes(self.captured)
            if re.search(pattern, seen) or time.monotonic() > deadline:
                return seen
            time.sleep(0.02)

    @property
    def port(self) -> int:
        return self.ports["imap"]

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        drain = getattr(self, "_drain", None)
        if drain is not None:
            drain.join(timeout=10)
        self.proc.stdout.close()
        code = self.proc.returncode
        self.proc = None
        return code

    def __exit__(self, *exc) -> None:
        self.stop()


def make_users(data_dir: str, *users: tuple[str, str]) -> None:
    store = MailStore(EmbeddedBackend(data_dir, synchronous="NORMAL"))
    for name, password in users:
        store.create_user(name, password)
    store.close()


class Client:
    """A raw IMAP connection for transcript tests: send bytes, read responses exactly."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0,
                 recv_buffer: int | None = None):
        if recv_buffer is None:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        else:
            # Set before connecting, so the kernel cannot grow it: a client that stops reading
            # then holds the server back after about this many octets (plus the server's own
            # send buffer), as a slow client on a real network does.
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
            self.sock.settimeout(timeout)
            self.sock.connect((host, port))
        self.buffer = b""
        self.greeting = self.read_line()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode()
        self.sock.sendall(data)

    def read_line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"connection closed; buffer: {self.buffer!r}")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def read_response_line(self) -> bytes:
        """One response line with any literals it announces folded in."""
        line = self.read_line()
        while True:
            m = re.search(rb"\{(\d+)\}$", line)
            if not m:
                return line
            size = int(m.group(1))
            while len(self.buffer) < size:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError("closed inside a literal")
                self.buffer += chunk
            line += b"\r\n" + self.buffer[:size]
            self.buffer = self.buffer[size:]
            line += self.read_line()

    def until_tagged(self, tag: str) -> list[bytes]:
        """Read response lines up to and including the one tagged ``tag``."""
        lines = []
        while True:
            line = self.read_response_line()
            lines.append(line)
            if line.startswith(tag.encode() + b" "):
                return lines

    def cmd(self, tag: str, text: str) -> list[bytes]:
        self.send(f"{tag} {text}\r\n")
        return self.until_tagged(tag)

    def closed_by_peer(self, timeout: float = 5.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except OSError:
            return True
