"""Fuzzing the live server: generated and mutated IMAP, SMTP and LMTP input (issue 11).

RFC 3501 section 9 / RFC 9051 section 9 (formal syntax) is the grammar the IMAP commands are
built from (tests/fuzzgen.py); RFC 5321 section 4.1 and RFC 2033 for SMTP and LMTP.  Whatever
arrives, the server must answer with a clear BAD/NO (RFC 3501 7.1, RFC 5321 4.2): it never dies,
never leaves a session without an answer for more than 5 s, never logs a traceback, and another
logged-in session keeps being served (tests/fuzzrun.py judges this after every example).

Bounded for ``make test``: examples are derandomized (the same ones every run) and counted so
that IMAP takes ~15-20 s and SMTP/LMTP ~5-10 s on the 2-core machine.  ``bench/fuzz_imap.py``
runs the same strategies for minutes with fresh randomness.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from tests.fuzzgen import imap_example, smtp_example
from tests.fuzzrun import FuzzServer

FAST = settings(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    fuzz = FuzzServer(tmp_path_factory.mktemp("fuzz")).start()
    yield fuzz
    fuzz.stop()


@pytest.fixture
def live(server):
    """The server, restarted if an earlier test left it dead (that test has failed)."""
    server.restart_if_dead()
    return server


@pytest.mark.slow  # ~15 s; the COMPRESS fuzz run below always runs
def test_imap_fuzz(live):
    """Generated and mutated IMAP commands in every state (RFC 3501 section 9)."""

    @settings(FAST, max_examples=350)
    @given(imap_example())
    def run(example):
        live.restart_if_dead()
        state, commands = example
        findings = live.imap(state, commands)
        assert not findings, "\n".join(findings)

    run()


def test_imap_fuzz_goes_on_through_compress(live):
    """RFC 4978 3: the sender, like a client, waits for COMPRESS DEFLATE's answer and deflates
    after an OK, so the commands after it are fuzzed through compression (not turned into a
    corrupt DEFLATE stream the server can only close), and judged the same way."""
    commands = [b"T COMPRESS DEFLATE", b"T NOOP", b"T SELECT INBOX", b"T FETCH 1:* (FLAGS",
                b"T COMPRESS DEFLATE", b"T IDLE", b"DONE"]
    assert not live.imap("auth", commands)
    seen = live.last_seen
    assert b"T0 OK DEFLATE active" in seen and b"T1 OK NOOP completed" in seen, seen
    assert any(line.startswith(b"T4 NO [COMPRESSIONACTIVE]") for line in seen), seen
    assert any(line.startswith(b"zp0 OK") for line in seen), seen  # the probe, compressed


@pytest.mark.parametrize("protocol", ["smtp", "lmtp"])
def test_delivery_fuzz(live, protocol):
    """Generated and mutated SMTP (RFC 5321 4.1) and LMTP (RFC 2033) sessions."""

    @settings(FAST, max_examples=400)
    @given(smtp_example(protocol == "lmtp"))
    def run(data):
        live.restart_if_dead()
        findings = live.delivery(protocol, data)
        assert not findings, "\n".join(findings)

    run()
