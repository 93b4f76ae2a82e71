"""Memory of idle COMPRESS=DEFLATE connections (RFC 4978, issue 13) against uncompressed ones.

    PYTHONPATH=. .venv/bin/python bench/compress_bench.py [--connections 200] [--tls]

For each variant a fresh ``imapserver`` (embedded store) is started and one warm-up session
does the whole exchange below and logs out; then ``--connections`` sessions each LOGIN,
(COMPRESS DEFLATE), SELECT INBOX, FETCH a 40 KB text message (so the compressor and the
decompressor have really run) and stay in IDLE.  The figure is the growth of the server's
VmRSS from just before the first of them to 2 s after the last is idle, divided by their
number.  Variants:

* ``plain``: no COMPRESS;
* ``deflate``: COMPRESS with the server's compressor (8 KiB window, memLevel 6: compress.py);
* ``deflate-zlib-defaults``: the same server with zlib's defaults patched in (32 KiB window,
  memLevel 8, what Dovecot uses), to show what the smaller window saves.

``--tls`` runs every session over implicit TLS (compression above TLS, as in production).
Prints a Markdown table for bench/RESULTS.md.  Figures, never assertions.
"""

from __future__ import annotations

import argparse
import socket
import ssl
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.imapproc import ServerProcess, make_users  # noqa: E402
from tests.mailgen import message  # noqa: E402
from tests.tlscert import make_cert  # noqa: E402

USER, PASSWORD = "bench", "bench-password"
DEFAULTS_PATCH = (
    "import runpy, sys\n"
    "import imapserver.imap.compress as c\n"
    "c.COMPRESS_WBITS, c.COMPRESS_MEMLEVEL = 15, 8\n"
    "sys.argv = ['imapserver.main'] + sys.argv[4:]\n"
    "runpy.run_module('imapserver.main', run_name='__main__', alter_sys=True)\n")


class Session:
    """A raw client that can switch to DEFLATE (wbits -15, Z_SYNC_FLUSH per send)."""

    def __init__(self, port: int, context: ssl.SSLContext | None):
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.sock = context.wrap_socket(sock, server_hostname="localhost") if context else sock
        self.buffer = b""
        self.deflate = self.inflate = None
        self.read_until(b"\r\n")  # the greeting

    def send(self, data: bytes) -> None:
        if self.deflate is not None:
            data = self.deflate.compress(data) + self.deflate.flush(zlib.Z_SYNC_FLUSH)
        self.sock.sendall(data)

    def read_until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError(self.buffer[-200:])
            if self.inflate is not None:
                chunk = self.inflate.decompress(chunk)
            self.buffer += chunk
        head, _, self.buffer = self.buffer.partition(marker)
        return head

    def cmd(self, tag: bytes, text: bytes) -> None:
        """Send a command, read up to its tagged answer (no message line starts with the
        one-letter tags used here), fail unless it is OK."""
        self.send(tag + b" " + text + b"\r\n")
        while True:
            line = self.read_until(b"\r\n")
            if line.startswith(tag + b" "):
                if not line.startswith(tag + b" OK"):
                    raise RuntimeError(f"{text!r}: {line!r}")
                return

    def session(self, compress: bool) -> None:
        self.cmd(b"l", b"LOGIN " + USER.encode() + b" " + PASSWORD.encode())
        if compress:
            self.cmd(b"c", b"COMPRESS DEFLATE")
            self.deflate = zlib.compressobj(6, zlib.DEFLATED, -15)
            self.inflate = zlib.decompressobj(-15)
        self.cmd(b"s", b"SELECT INBOX")
        self.cmd(b"f", b"FETCH 1 BODY.PEEK[]")
        self.send(b"i IDLE\r\n")
        while not self.read_until(b"\r\n").startswith(b"+ "):
            pass


def vmrss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def measure(variant: str, count: int, tls: bool, base: Path, certs) -> dict:
    (base / variant).mkdir(mode=0o700)
    data_dir = base / variant / "store"
    make_users(str(data_dir), (USER, PASSWORD))
    from mailstore.backends.embedded import EmbeddedBackend
    from mailstore.store import MailStore
    store = MailStore(EmbeddedBackend(str(data_dir), synchronous="NORMAL"))
    body = b"".join(b"Line %05d of the body of a bench message, text as mail is.\r\n" % i
                    for i in range(650))
    store.append(USER, "INBOX", message(1, body=body))
    store.close()
    conf = base / variant / "imapserver.conf"
    conf.write_text(f"[imap]\nmax_connections_per_user = {count + 10}\n"
                    f"tls_cert = {certs[0]}\ntls_key = {certs[1]}\nplaintext_auth = yes\n")
    wrapper = [sys.executable, "-c", DEFAULTS_PATCH] if variant == "deflate-zlib-defaults" \
        else []
    compress = variant != "plain"
    context = ssl.create_default_context(cafile=certs[0]) if tls else None
    with ServerProcess(str(data_dir), "--imaps-port", "auto", config=str(conf),
                       wrapper=wrapper) as server:
        port = server.ports["imaps" if tls else "imap"]
        warm = Session(port, context)
        warm.session(compress)
        warm.send(b"DONE\r\n")
        warm.sock.close()
        time.sleep(1.0)
        before = vmrss_kib(server.proc.pid)
        sessions = []
        started = time.monotonic()
        for _ in range(count):
            s = Session(port, context)
            s.session(compress)
            sessions.append(s)
        setup = time.monotonic() - started
        time.sleep(2.0)
        after = vmrss_kib(server.proc.pid)
        for s in sessions:
            s.sock.close()
    return {"before": before, "after": after, "per_conn": (after - before) / count,
            "setup": setup}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--tls", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        certs = make_cert(str(base))
        results = {v: measure(v, args.connections, args.tls, base, certs)
                   for v in ("plain", "deflate", "deflate-zlib-defaults")}
    plain = results["plain"]["per_conn"]
    print(f"| variant ({args.connections} idle connections"
          f"{', implicit TLS' if args.tls else ''}) | RSS before | RSS after "
          "| per connection | vs plain |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['before'] / 1024:.1f} MiB | {r['after'] / 1024:.1f} MiB "
              f"| {r['per_conn']:.0f} KiB | {r['per_conn'] - plain:+.0f} KiB |")


if __name__ == "__main__":
    main()
