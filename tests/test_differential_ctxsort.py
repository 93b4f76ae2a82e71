"""Differential scripts for ESORT's PARTIAL (RFC 5267 3 and 4.4) and SAVE/``$`` (RFC 5182) with
SORT against Dovecot.

Dovecot 2.3 advertises ESORT and CONTEXT=SEARCH but not CONTEXT=SORT; it answers
``SORT RETURN (PARTIAL m:n)`` all the same, and those answers are compared here.  What it
cannot judge -- ``SORT RETURN (UPDATE)`` with positioned ADDTO/REMOVEFROM (RFC 5267 4.3.3,
4.3.4), CANCELUPDATE of a sort context, and RFC 9394's negative ranges, which Dovecot 2.3
predates -- is tested by RFC-cited transcripts in tests/test_imap_context_sort.py.
"""

from __future__ import annotations

import pytest
from differential import Script, servers
from test_differential_sort import seed_keyed


@pytest.fixture(scope="module")
def differential(tmp_path_factory):
    with servers(tmp_path_factory.mktemp("differential-ctxsort")) as pair:
        yield pair


SCRIPTS = [
    Script("esort-partial", [
        *seed_keyed(), ("A", "EXAMINE INBOX"),
        ("A", "SORT RETURN (PARTIAL 2:4) (SUBJECT) UTF-8 ALL"),
        ("A", "UID SORT RETURN (PARTIAL 6:3) (REVERSE DATE) UTF-8 ALL"),
        ("A", "SORT RETURN (PARTIAL 1:3 COUNT MIN MAX) (SIZE) UTF-8 ALL"),
        ("A", "UID SORT RETURN (PARTIAL 7:100) (FROM) UTF-8 ALL"),
        ("A", "SORT RETURN (PARTIAL 20:30) (ARRIVAL) UTF-8 ALL"),
        ("A", "SORT RETURN (PARTIAL 1:5) (DATE) UTF-8 NOT ALL"),
    ], doc="RFC 5267 4.4 on ESORT: the range picks positions of the sorted result, echoed "
           "low:high, short or NIL past the end; its set keeps the sort order (3.2)."),
    Script("esort-partial-errors", [
        *seed_keyed()[:2], ("A", "EXAMINE INBOX"),
        ("A", "SORT RETURN (PARTIAL 0:5) (DATE) UTF-8 ALL"),
        ("A", "SORT RETURN (PARTIAL 1:*) (DATE) UTF-8 ALL"),
        ("A", "SORT RETURN (PARTIAL 1:2 ALL) (DATE) UTF-8 ALL"),
        ("A", "SORT RETURN (PARTIAL) (DATE) UTF-8 ALL"),
    ], doc="RFC 5267 4.4: no 0, no *, not with ALL, a range required: BAD."),
    Script("esort-save", [
        *seed_keyed(), ("A", "SELECT INBOX"),
        ("A", "UID SORT RETURN (SAVE MIN) (SUBJECT) UTF-8 ALL"), ("A", "UID FETCH $ UID"),
        ("A", "UID SORT RETURN (SAVE PARTIAL 2:3) (SUBJECT) UTF-8 ALL"),
        ("A", "UID FETCH $ UID"),
        ("A", "UID SORT RETURN (SAVE ALL) (SUBJECT) UTF-8 5:7"), ("A", "UID FETCH $ UID"),
        ("A", "UID SORT (SUBJECT) UTF-8 $"),
        ("A", "SORT RETURN (ALL) (REVERSE SUBJECT) UTF-8 $"),
        ("A", "SORT RETURN (SAVE) (DATE) UTF-8 UNSEEN"), ("A", "UID FETCH $ UID"),
        ("A", "SORT RETURN (SAVE) (SUBJECT) UTF-8 NOSUCH"), ("A", "UID FETCH $ UID"),
        ("A", "SORT RETURN (SAVE MAX COUNT) (REVERSE DATE) UTF-8 2:6"),
        ("A", "UID FETCH $ UID"),
        ("A", "THREAD REFERENCES UTF-8 $"),
    ], doc="RFC 5182 2.1 with ESORT, as Dovecot: SAVE alone answers nothing; MIN/MAX/PARTIAL "
           "save what they pick from the sorted result, ALL/COUNT everything; a BAD keeps "
           "the saved result; $ as SORT's and THREAD's search key."),
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda s: s.name)
def test_esort_partial_like_dovecot(differential, script):
    """RFC 5267 4.4: our ESORT PARTIAL answers equal Dovecot's."""
    differential.run(script)
