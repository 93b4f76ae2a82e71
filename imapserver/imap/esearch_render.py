"""The ESEARCH response (RFC 4731 3.1, RFC 5267 3.2 for ESORT), written out.

    esearch-response = "ESEARCH" [search-correlator] [SP "UID"] *(SP search-return-data)
    search-correlator = SP "(" "TAG" SP tag-string ")"
    search-return-data = "MIN" SP nz-number / "MAX" SP nz-number / "ALL" SP sequence-set /
                         "COUNT" SP number

Note for merging: this small module is ESORT's own.  The ``esearch`` branch (ESEARCH and
CONTEXT=SEARCH for SEARCH) writes the same response; when both are merged, one of the two
renderers should go, keeping :func:`sequence_set`'s rule that ranges follow the order given
(ESORT's ALL lists numbers in sort order, so only ascending runs become ``a:b``).
"""

from __future__ import annotations

from collections.abc import Sequence

RETURN_OPTIONS = ("MIN", "MAX", "ALL", "COUNT")


def sequence_set(numbers: Sequence[int]) -> bytes:
    """``numbers`` in their order, each run of consecutive ascending numbers as ``a:b``."""
    out: list[bytes] = []
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        out.append(b"%d" % numbers[i] if i == j else b"%d:%d" % (numbers[i], numbers[j]))
        i = j + 1
    return b",".join(out)


def esearch(tag: str, uid_mode: bool, options: Sequence[str], numbers: Sequence[int]) -> bytes:
    """The untagged ESEARCH data for the ``numbers`` found (in the order to report, the sort
    order for ESORT), answering the RETURN ``options`` (none means ALL, RFC 4731 3.1)."""
    return correlated(tag, returned_data(uid_mode, options, numbers))


def correlated(tag: str, data: bytes) -> bytes:
    """``ESEARCH (TAG "tag")`` followed by :func:`returned_data`'s ``data``."""
    return b'ESEARCH (TAG "' + tag.encode() + b'")' + data


def returned_data(uid_mode: bool, options: Sequence[str], numbers: Sequence[int]) -> bytes:
    """What follows the correlator: `` UID`` and the options' data.  MIN, MAX and ALL are left
    out when nothing matched (RFC 4731 3.1); COUNT is always given when asked for."""
    wanted = set(options) or {"ALL"}
    line = b" UID" if uid_mode else b""
    if numbers:
        if "MIN" in wanted:
            line += b" MIN %d" % numbers[0]
        if "MAX" in wanted:
            line += b" MAX %d" % numbers[-1]
    # ALL before COUNT, in Dovecot's order (RFC 4731 leaves it open).
    if numbers and "ALL" in wanted:
        line += b" ALL " + sequence_set(numbers)
    if "COUNT" in wanted:
        line += b" COUNT %d" % len(numbers)
    return line
