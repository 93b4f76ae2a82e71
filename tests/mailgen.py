"""Small generated messages for tests (no fixtures on disk to keep in sync)."""

from __future__ import annotations


def message(n: int = 0, size: int = 0, subject: str | None = None, body: bytes | None = None,
            sender: str = "Alice <alice@example.com>", to: str = "bob@example.com") -> bytes:
    """An RFC 5322 message with a unique Message-ID; ``size`` pads the body to about that."""
    head = (f"From: {sender}\r\nTo: {to}\r\nSubject: {subject or f'message {n}'}\r\n"
            f"Message-ID: <m{n}@test>\r\nDate: Sat, 21 Nov 2026 12:00:00 +0000\r\n"
            "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=us-ascii\r\n\r\n").encode()
    if body is None:
        body = f"Body of message {n}.\r\n".encode()
        if size > len(head) + len(body):
            line = b"x" * 76 + b"\r\n"
            body += line * ((size - len(head) - len(body)) // len(line))
    return head + body
