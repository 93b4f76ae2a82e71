"""What the fuzz test (tests/test_fuzz.py) found in the IMAP server, as plain transcripts.

Each test replays the smallest input that showed the defect, against a real ``imapserver``
process, and checks the answer the RFC asks for: a clear tagged BAD or NO (RFC 3501 7.1),
never "Internal server error", and no traceback in the server's output.
"""

from __future__ import annotations

import pytest

from tests.imapproc import Client, ServerProcess, make_users


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    base = tmp_path_factory.mktemp("fuzzfound")
    conf = base / "imapserver.conf"
    conf.write_text("[imap]\nauth_failure_delay = 0\n")
    data_dir = str(base / "store")
    make_users(data_dir, ("alice", "wonderland"))
    with ServerProcess(data_dir, config=str(conf)) as proc:
        yield proc


@pytest.fixture
def client(server):
    c = Client(server.port)
    yield c
    c.close()


def no_traceback(server) -> None:
    # Written before the answer, so already in the output once the answer is read.
    output = server.wait_output(rb"Traceback", timeout=0.2)
    assert b"Traceback" not in output, output.decode(errors="replace")[-3000:]


def test_login_with_a_name_that_is_not_utf8_is_bad(server, client):
    """RFC 3501 6.2.3 / 7.1.3: ``LOGIN "\\xff" x``: a user name that is not UTF-8 cannot be
    read; the answer is a tagged BAD, not ``NO Internal server error`` and a traceback."""
    client.send(b'a LOGIN "\xff" wrong\r\n')
    assert client.until_tagged("a")[-1] == b"a BAD user name is not valid UTF-8"
    client.send(b'b LOGIN alice "\xff"\r\n')
    assert client.until_tagged("b")[-1] == b"b BAD password is not valid UTF-8"
    assert client.cmd("c", "LOGIN alice wonderland")[-1].startswith(b"c OK")
    no_traceback(server)
