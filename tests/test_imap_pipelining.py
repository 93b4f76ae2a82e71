"""Pipelined commands get their responses without waiting for the client's delayed ACK.

RFC 3501 5.5 lets a client send several commands without waiting for each result.  The
server writes each command's responses in one call; with Nagle's algorithm on (RFC 1122
4.2.3.4), a write made while an earlier one is still unacknowledged is held until the ACK
comes -- and a client waiting for more data delays its ACK (40 ms on Linux).  So each
pipelined command after the first cost 40 ms (bench/imap_standard.py, issue 14).
"""

from __future__ import annotations

import socket
import statistics
import time

import pytest

from tests.imapproc import Client, ServerProcess, make_users


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("pipelining"))
    make_users(data_dir, ("alice", "wonderland"))
    with ServerProcess(data_dir) as proc:
        yield proc


def test_pipelined_commands_are_not_held_by_nagle(server):
    """RFC 3501 5.5: ten rounds of four pipelined STATUS commands sent in one segment (each
    a store call in a worker thread, so each response is its own write); the median
    round takes far less than the 40 ms a delayed ACK costs (a few ms, even on a busy
    machine), where with Nagle's algorithm on the server each round took 40 ms or more."""
    client = Client(server.port)
    client.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    client.send(b"a LOGIN alice wonderland\r\n")
    client.until_tagged("a")
    client.send(b"b SELECT INBOX\r\n")
    client.until_tagged("b")
    rounds = []
    for i in range(10):
        tags = [f"r{i}x{j}" for j in range(4)]
        started = time.perf_counter()
        client.send(b"".join(f"{t} STATUS INBOX (MESSAGES)\r\n".encode() for t in tags))
        for tag in tags:
            assert client.until_tagged(tag)[-1].startswith(f"{tag} OK".encode())
        rounds.append(time.perf_counter() - started)
    client.close()
    assert statistics.median(rounds) < 0.030, [round(r * 1000, 1) for r in rounds]
