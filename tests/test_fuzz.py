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
