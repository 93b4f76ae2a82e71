"""Claimed commit records (decision 0003) beside the save date tail (RFC 8514, decision 0012).

A move or expunge claims a row by rewriting its commit record as ``M``/``D`` followed by the
16-byte id of its intent; the save date that APPEND, COPY and MOVE put after the record's
fields must survive the claim and its undoing, and an owner must never be read as a date.
"""

from __future__ import annotations

import os

import pytest

from mailstore.records import (
    COMMITTED,
    DELETING,
    MOVING,
    MessageRecord,
    claimed_by,
    owner_of,
    state_of,
    unclaimed,
)


def _record(save_date: float | None) -> MessageRecord:
    return MessageRecord(uid=7, content=os.urandom(16), size=1234, internal_date=1.7e9,
                         modseq=42, header_size=100, lines=20, chunk_size=262144,
                         save_date=save_date)


@pytest.mark.parametrize("save_date", [1_764_000_000.25, None])
@pytest.mark.parametrize("state", [MOVING, DELETING])
def test_claim_keeps_save_date_and_names_owner(save_date, state):
    """RFC 8514 3: SAVEDATE of a message claimed by a move in progress (still visible) is the
    date it was saved, not the claim's owner read as a date; unclaiming restores the record."""
    record = _record(save_date)
    raw = record.encode()
    owner = os.urandom(16)
    claimed = claimed_by(raw, state, owner)
    assert state_of(claimed) == state
    assert owner_of(claimed) == owner
    assert MessageRecord.decode(claimed) == record
    assert owner_of(raw) is None
    back = unclaimed(claimed)
    assert back == raw and state_of(back) == COMMITTED
    # A second claim (a retry claiming a row left to it) replaces the owner, not stacks it.
    again = claimed_by(claimed, state, b"\x01" * 16)
    assert owner_of(again) == b"\x01" * 16
    assert MessageRecord.decode(again) == record
