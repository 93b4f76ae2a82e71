"""A raw ManageSieve client for transcript tests (RFC 5804): send bytes, read whole responses.

A response is every line up to and including the final ``OK``/``NO``/``BYE`` line; a literal
``{n}`` the server sends is read whole and kept inside the line list as it arrived, so a test
can compare exactly what the server wrote.
"""

from __future__ import annotations

import base64
import re
import socket
import ssl

_FINAL = re.compile(rb"^(OK|NO|BYE)\b")
_LITERAL = re.compile(rb"\{(\d+)\}$")


class SieveClient:
    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buffer = b""
        self.greeting = self.response()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes | str) -> None:
        self.sock.sendall(data.encode() if isinstance(data, str) else data)

    def _fill(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionError("server closed the connection")
        self.buffer += chunk

    def line(self) -> bytes:
        """One line without CRLF; a literal it announces is appended (with its CRLF)."""
        while b"\r\n" not in self.buffer:
            self._fill()
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        literal = _LITERAL.search(line)
        if literal:
            size = int(literal.group(1))
            while len(self.buffer) < size:
                self._fill()
            line += b"\r\n" + self.buffer[:size]
            self.buffer = self.buffer[size:]
            line += self.line()     # the rest of the line after the literal, up to CRLF
        return line

    def response(self) -> list[bytes]:
        """Lines up to and including the final OK/NO/BYE."""
        lines = []
        while True:
            lines.append(self.line())
            if _FINAL.match(lines[-1]):
                return lines

    def cmd(self, text: bytes | str) -> list[bytes]:
        data = text.encode() if isinstance(text, str) else text
        self.send(data + b"\r\n")
        return self.response()

    def login(self, user: str, password: str) -> list[bytes]:
        token = base64.b64encode(f"\0{user}\0{password}".encode()).decode()
        return self.cmd(f'AUTHENTICATE "PLAIN" "{token}"')

    def starttls(self, cafile: str) -> list[bytes]:
        """STARTTLS, the handshake (verifying the certificate), and the capabilities the
        server sends after it (RFC 5804 2.2)."""
        assert self.cmd("STARTTLS")[-1].startswith(b"OK")
        context = ssl.create_default_context(cafile=cafile)
        self.sock = context.wrap_socket(self.sock, server_hostname="localhost")
        return self.response()

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except (ConnectionError, ssl.SSLError):
            return True


def capabilities(lines: list[bytes]) -> dict[str, str | None]:
    """{NAME: value or None} of a capability listing (RFC 5804 1.7)."""
    caps: dict[str, str | None] = {}
    for line in lines:
        found = re.findall(rb'"((?:[^"\\]|\\.)*)"', line)
        if found:
            caps[found[0].decode().upper()] = found[1].decode() if len(found) > 1 else None
    return caps
