"""A real ``imapserver`` SIGKILLed at random moments during MOVEs of sets of 1-100 messages
(issue 16 part 4; RFC 6851 3.3, RFC 3501 6.3.10; docs/decisions/0003, 0004).

After every restart STATUS MESSAGES/UNSEEN and the size counter equal the rows and every
acknowledged message is in exactly one place; at the end ``mailadmin fsck`` finds nothing,
without any repair ever having run.  ``CRASH_LOOP_KILLS`` kills (default 5, and on until a
MOVE was acknowledged; about 20 s in all) here, within ``CRASH_LOOP_SECONDS`` (default 120, a
cap for a machine so busy that a restart takes many seconds: a number of kills, not of
seconds, so that a loaded machine does not make fewer); ``CRASH_LOOP_KILLS=300
CRASH_LOOP_SECONDS=3600`` (or bench/move_crash_loop.py) is the long run.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.moveloop import run_loop


@pytest.mark.slow  # a SIGKILL loop; test_crash_counters' MOVE cut at every write always runs
def test_sigkill_during_moves_leaves_status_exact_and_fsck_clean(tmp_path):
    seed = int(os.environ.get("CRASH_SEED", time.time()))
    figures = run_loop(str(tmp_path / "store"),
                       kills=int(os.environ.get("CRASH_LOOP_KILLS", "5")),
                       seconds=float(os.environ.get("CRASH_LOOP_SECONDS", "120")), seed=seed,
                       min_moves=1)
    assert figures.kills >= 3, figures.as_dict()
    assert figures.moves > 0, figures.as_dict()
    assert not figures.mismatches, (seed, figures.mismatches)
    assert figures.fsck["ok"], (seed, figures.fsck["problems"])
