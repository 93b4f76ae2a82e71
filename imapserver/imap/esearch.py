"""The ESEARCH response (RFC 4731 section 4, RFC 4466 section 2.6.2), and nothing else.

    esearch-response  = "ESEARCH" [search-correlator] [SP "UID"]
                        *(SP search-return-data)
    search-correlator = SP "(" "TAG" SP tag-string ")"
    search-return-data = "MIN" SP nz-number / "MAX" SP nz-number /
                         "ALL" SP sequence-set / "COUNT" SP number      ; RFC 4731
                       / "PARTIAL" SP "(" partial-range SP partial-results ")"
                       / "ADDTO" SP "(" context-position SP sequence-set ... ")"
                       / "REMOVEFROM" SP "(" context-position SP sequence-set ... ")"
                                                                        ; RFC 5267, RFC 9394

Kept small and free of the search machinery on purpose: SEARCH, its UPDATE notifications
(RFC 5267 4.3) and ESORT/SORT RETURN all answer in this form, so every one of them renders
through :func:`esearch_line` and :func:`sequence_set`.
"""

from __future__ import annotations

from collections.abc import Iterable


def sequence_set(numbers: Iterable[int], *, ordered: bool = True) -> str:
    """``numbers`` as a compact sequence-set, e.g. ``2,10:11`` (RFC 4731 3.1, ALL).

    With ``ordered`` (the default) the numbers are sorted first and repeats dropped: the
    shortest form for a SEARCH result (mailbox order).  Without it they stay in the order given
    and only ascending runs are joined (RFC 5267 3.2: an ESORT result keeps its sort order, and
    a range is written low:high only).  Empty input gives ``""``; callers leave the item out.
    """
    values = sorted(set(numbers)) if ordered else list(numbers)
    out: list[str] = []
    start = prev = None
    for n in values:
        if start is not None and n == prev + 1:
            prev = n
            continue
        if start is not None:
            out.append(f"{start}" if start == prev else f"{start}:{prev}")
        start = prev = n
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}:{prev}")
    return ",".join(out)


def esearch_line(tag: str | None, uid: bool, items: Iterable[tuple[str, str]]) -> bytes:
    """One untagged ESEARCH response (without the leading ``* ``).

    ``tag`` is the tag of the command it answers (the correlator; None for none), ``uid``
    whether the numbers are UIDs.  ``items`` are ``(name, value)`` pairs already in wire form,
    in the order to send: ``("MIN", "2")``, ``("ALL", "1:3")``, ``("ADDTO", "(0 5)")``...
    The tag is sent as a quoted string; a tag never holds ``"`` or ``\\`` (RFC 3501 9: tag
    characters are ASTRING-CHAR), but they are escaped all the same.
    """
    line = "ESEARCH"
    if tag is not None:
        quoted = tag.replace("\\", "\\\\").replace('"', '\\"')
        line += f' (TAG "{quoted}")'
    if uid:
        line += " UID"
    for name, value in items:
        line += f" {name} {value}"
    return line.encode()


def result_items(numbers: list[int], *, want_min: bool = False, want_max: bool = False,
                 want_all: bool = False, want_count: bool = False,
                 partial: tuple[str, list[int]] | None = None, sorted_result: bool = False
                 ) -> list[tuple[str, str]]:
    """The return data of a SEARCH (RFC 4731 3.1, RFC 5267 4.4) over ``numbers`` (message
    numbers or UIDs, ascending), in the order Dovecot sends them: MIN MAX ALL PARTIAL COUNT.

    MIN, MAX and ALL are left out when nothing matched; COUNT is always there (RFC 4731 3.1).
    ``partial`` is the requested range as it is to be echoed and the numbers in it (PARTIAL
    with NIL when there are none).  ``sorted_result``: ``numbers`` are an ESORT result in sort
    order (RFC 5267 3.2): MIN and MAX are its first and last, ALL and PARTIAL keep the order.
    """
    items: list[tuple[str, str]] = []
    ordered = not sorted_result
    if want_min and numbers:
        items.append(("MIN", str(numbers[0])))
    if want_max and numbers:
        items.append(("MAX", str(numbers[-1])))
    if want_all and numbers:
        items.append(("ALL", sequence_set(numbers, ordered=ordered)))
    if partial is not None:
        label, chosen = partial
        shown = sequence_set(chosen, ordered=ordered) if chosen else "NIL"
        items.append(("PARTIAL", f"({label} {shown})"))
    if want_count:
        items.append(("COUNT", str(len(numbers))))
    return items


def update_items(removed: list[int], added: list[int]) -> list[tuple[str, str]]:
    """RFC 5267 4.3.3/4.3.4: REMOVEFROM then ADDTO, context position 0 (a SEARCH result is in
    mailbox order, so the client places them itself), each left out when empty."""
    items = []
    if removed:
        items.append(("REMOVEFROM", f"(0 {sequence_set(removed)})"))
    if added:
        items.append(("ADDTO", f"(0 {sequence_set(added)})"))
    return items


__all__ = ["esearch_line", "result_items", "sequence_set", "update_items"]
