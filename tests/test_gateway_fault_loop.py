"""The random-fault loop, bounded: the Thrift gateway SIGKILLed and restarted at random moments
while IMAP sessions APPEND (RFC 3501 6.3.11), STORE, UID MOVE (RFC 6851 3.1) and UID EXPUNGE
(RFC 4315 2.1) and LMTP delivers (RFC 2033 4.2) to three users (tests/faultloop.py).  Every
acknowledged operation holds afterwards, no UID is handed out twice (RFC 3501 2.3.1.1), STATUS
and the counters equal the rows, and fsck finds only safe leftovers, none after repair.

A few faults here (``FAULT_LOOP_FAULTS``, default 6, and on until an APPEND and a delivery
were acknowledged, within ``FAULT_LOOP_SECONDS``, default 120: a cap for a machine so busy
that a gateway restart takes seconds; a number of faults, not of seconds, so that a loaded
machine does not make fewer); bench/gateway_fault_loop.py is the long run (figures in
bench/RESULTS.md).
"""

from __future__ import annotations

import os
import time

import pytest

from tests.faultloop import run_loop
from tests.gatewayproc import EXTERNAL_SKIP

pytestmark = EXTERNAL_SKIP


@pytest.mark.slow  # a loop of kills; tests/test_backend_faults.py's single faults always run
def test_random_gateway_kills_lose_and_duplicate_nothing(tmp_path):
    seed = int(os.environ.get("FAULT_LOOP_SEED", time.time()))
    figures = run_loop(str(tmp_path), faults=int(os.environ.get("FAULT_LOOP_FAULTS", "6")),
                       seconds=float(os.environ.get("FAULT_LOOP_SECONDS", "120")), seed=seed,
                       clients=3, busy=True)
    assert figures.faults >= 3, figures.as_dict()
    assert figures.appends > 0 and figures.deliveries > 0, figures.as_dict()
    assert not figures.failures(), (seed, figures.as_dict())
