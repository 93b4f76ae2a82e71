"""Differential tests: our Sieve interpreter against Pigeonhole's ``sieve-test`` (Dovecot's
Sieve, the reference most users compare with).

Every script of tests/sieve_corpus/scripts runs on every message of
tests/sieve_corpus/messages, with the envelope of envelopes.json, on both; the results are
reduced to the same normal form (tests/sievediff.py) and must be equal: stores (mailbox and
flags, implicit keep included), discard, reject text, redirects, runtime failure.  Scripts
with ``vacation`` also run with ``sieve-test -e``, where Pigeonhole decides whether the reply
goes out; the decision and the reply's To, From, Subject, In-Reply-To, References and
Auto-Submitted must be equal.

Scripts in tests/sieve_corpus/invalid must be refused by both, on the same line (two on a
neighbouring line, listed in LINE_DIFFERS).

Deliberate differences (documented in docs/sieve.md), so not in the corpus:

* ``ereject`` (RFC 5429): Pigeonhole 0.5.19 does not implement it; unit tests cover it.
* A null envelope sender: ``sieve-test -f`` refuses ``<>``/""; unit tests cover the vacation
  and envelope rules for it (RFC 5228 5.4, RFC 5230 4.5).
* ``fileinto`` a missing mailbox without ``:create``: the dry run lists the store; at
  delivery both Pigeonhole and we fall back to INBOX (the store fails).  Tested end to end.
* ``include`` of an existing script and global scripts: sieve-test has no script storage of
  ours; unit tests cover RFC 6609 with a script source.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mailstore.sieve import SUPPORTED, validate
from tests import sievediff

CORPUS = Path(__file__).parent / "sieve_corpus"
SCRIPTS = sorted((CORPUS / "scripts").glob("*.sieve"))
MESSAGES = sorted((CORPUS / "messages").glob("*.eml"))
ENVELOPES = json.loads((CORPUS / "envelopes.json").read_text())

# Extensions the corpus deliberately leaves out, and why (see the module docstring).
NOT_IN_CORPUS = {"ereject": "not in Pigeonhole 0.5.19",
                 "comparator-i;octet": "always available, never required",
                 "comparator-i;ascii-casemap": "always available, never required"}

@pytest.fixture(scope="module")
def pigeonhole():
    runner = sievediff.PigeonholeRunner()
    yield runner
    runner.close()


def test_corpus_covers_every_extension():
    """Each capability we announce (RFC 5228 3.2 require) appears in some corpus script."""
    text = "\n".join(p.read_text() for p in SCRIPTS)
    missing = [c for c in SUPPORTED if f'"{c}"' not in text and c not in NOT_IN_CORPUS]
    assert missing == []
    assert len(MESSAGES) >= 7 and len(SCRIPTS) >= 60


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_script_matches_pigeonhole(pigeonhole, script):
    """RFC 5228 and its extensions: the same actions as Pigeonhole, on every message."""
    text = script.read_text()
    differences = []
    for message in MESSAGES:
        raw = message.read_bytes()
        envelope = tuple(ENVELOPES[message.name])
        result = sievediff.run_ours(text, raw, envelope)
        theirs = sievediff.normalise_pigeonhole(pigeonhole.run(text, raw, envelope))
        ours = sievediff.normalise_ours(result)
        # In a dry run Pigeonhole lists a vacation action before deciding to send it; the
        # decision is compared below with -e.
        theirs.pop("vacation")
        ours.pop("vacation")
        if theirs != ours:
            differences.append((message.name, "actions", theirs, ours, result.error))
        if "vacation" in text:
            sent = sievediff.vacation_pigeonhole(
                pigeonhole.run(text, raw, envelope, execute=True))
            mine = sievediff.vacation_ours(result)
            if sent != mine:
                differences.append((message.name, "vacation", sent, mine, result.notes))
    assert differences == []


INVALID = sorted((CORPUS / "invalid").glob("*.sieve"))
# sievelib names the line of the token it could not take, Pigeonhole the line of the command
# it was reading (a missing ";" before the next line's command) or the end of the script
# (an unterminated string): the same error, on a neighbouring line.
LINE_DIFFERS = {"missing_semicolon": (2, 3), "unterminated_string": (3, 2)}


@pytest.mark.parametrize("script", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_script_is_refused_on_the_same_line(pigeonhole, script):
    """RFC 5228 8 grammar, 3.2 require, 2.7.3 comparators, RFC 5231 relations, 5.1 address
    headers: a script Pigeonhole refuses to compile is refused by validate() (what
    ManageSieve's PUTSCRIPT runs, RFC 5804 2.6), with the error on the same line."""
    import re

    text = script.read_text()
    out = pigeonhole.run(text, MESSAGES[0].read_bytes(), ("a@example.org", "u@example.com"))
    assert "failed to compile sieve script" in out, out
    theirs = min(int(n) for n in re.findall(r"script: line (\d+): error", out))
    errors = validate(text)
    assert errors, text
    ours = int(re.match(r"line (\d+): ", errors[0]).group(1))
    assert (theirs, ours) == LINE_DIFFERS.get(script.stem, (theirs, theirs)), errors
