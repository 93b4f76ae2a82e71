"""FETCH rendering compared with Dovecot's, octet for octet.

The corpus of ``tests/corpus.py`` is APPENDed to a real Dovecot (Debian's ``dovecot-imapd``,
which ``make`` installs; see ``tests/dovecot.py``) and every FETCH item of :func:`requests` is
compared with what :mod:`imapserver.imap.render` and :mod:`imapserver.imap.sections` make of
:func:`mailstore.mime.parse_bytes` and the raw octets.  Values are compared as parsed data
(NIL, string octets, numbers, lists), so the only freedom left is whether a string is quoted or
a literal (RFC 3501 section 4.3: each server's choice).  Every other difference is listed, with
its reason, in :data:`KNOWN_DIFFERENCES`, :data:`BARE_LF` and :data:`LIBERAL_DOVECOT`; the
stored structure itself is compared as the parser made it.
"""

from __future__ import annotations

import io
import json
import re
import time

import pytest
from corpus import SAMPLES, Sample, crlf
from dovecot import Dovecot, RawImap, parse_value

from imapserver.imap.render import (
    bodystructure,
    envelope,
    internaldate,
    parse_fetch_item,
    rfc822_size,
)
from imapserver.imap.sections import iter_section, resolve
from mailstore.mime import parse_bytes


def info_of(raw: bytes) -> dict:
    """What the store keeps for a message: the parser's result, through JSON as in a cell."""
    return json.loads(json.dumps(parse_bytes(raw).to_json()))


BASE_TS = 1769914800  # 01-Feb-2026 03:00:00 UTC: single-digit days for the first samples

ALWAYS = ("ENVELOPE", "BODY", "BODYSTRUCTURE", "RFC822.SIZE", "INTERNALDATE", "RFC822.HEADER",
          "RFC822.TEXT", "RFC822", "BODY.PEEK[]", "BODY.PEEK[HEADER]", "BODY.PEEK[TEXT]",
          "BODY.PEEK[TEXT]<3.7>", "BODY.PEEK[1]<1.4>", "BODY.PEEK[1.MIME]<2.3>")


def requests(sample: Sample) -> list[str]:
    """The FETCH items compared for a sample, without repeats."""
    fields = " ".join(sample.fields)
    items = list(ALWAYS) + [f"BODY.PEEK[{s}]" for s in sample.sections]
    items += [f"BODY.PEEK[]<{o}.{n}>" for o, n in sample.partials]
    items += [f"BODY.PEEK[HEADER.FIELDS ({fields})]", f"BODY.PEEK[HEADER.FIELDS.NOT ({fields})]"]
    return list(dict.fromkeys(items))


def batches(items: list[str]) -> list[list[str]]:
    """Split items so that no FETCH gets two with the same response name."""
    out: list[list[str]] = []
    for item in items:
        name = parse_fetch_item(item).name
        for batch in out:
            if all(parse_fetch_item(other).name != name for other in batch):
                batch.append(item)
                break
        else:
            out.append([item])
    return out


@pytest.fixture(scope="module")
def dovecot(tmp_path_factory):
    """One Dovecot for the module's differential tests."""
    with Dovecot(tmp_path_factory.mktemp("dovecot")) as server:
        yield server


@pytest.fixture(scope="module")
def dovecot_responses(dovecot):
    """Dovecot's FETCH answers for the whole corpus: {sample name: {request: value}}, the value
    being what follows the response name we expect (missing if Dovecot used another name)."""
    answers: dict[str, dict[str, bytes | None]] = {}
    client = RawImap(dovecot.port)
    try:
        client.login()
        for n, sample in enumerate(SAMPLES):
            # The APPEND date is written independently of internaldate(), and in +0100.
            when = time.strftime("%d-%b-%Y %H:%M:%S +0100",
                                 time.gmtime(BASE_TS + n * 86461 + 3600))
            client.command(b'APPEND INBOX "%s"' % when.encode(), sample.raw)
        client.command(b"SELECT INBOX")
        for n, sample in enumerate(SAMPLES, 1):
            got: dict[str, bytes | None] = {}
            for batch in batches(requests(sample)):
                response = dict(client.fetch(n, " ".join(batch).encode()))
                for request in batch:
                    got[request] = response.get(parse_fetch_item(request).name.encode())
            answers[sample.name] = got
    finally:
        client.close()
    return answers


def drop_final_crlf(value: bytes) -> bytes:
    """A literal without its last CRLF (length adjusted)."""
    data = parse_value(value)[0]
    assert data.endswith(b"\r\n")
    return b"{%d}\r\n" % (len(data) - 2) + data[:-2]


# Where Dovecot's answer and ours differ for a reason, the patch that turns Dovecot's value into
# ours, keyed by (sample, response name).  Each patch must change Dovecot's value (else it is
# stale and the test says so).  Most of these are about the *stored* structure, which comes
# from mailstore.mime's parser, not about rendering.
KNOWN_DIFFERENCES = {
    ("groups-and-routes", b"ENVELOPE"): (
        "An address without a domain: Dovecot invents the host MISSING_DOMAIN; we return the "
        "empty string (the parser never uses NIL there, RFC 3501 reserves it for groups).",
        lambda v: v.replace(b'"MISSING_DOMAIN"', b'""')),
    ("empty-and-odd-fields", b"ENVELOPE"): (
        "Same MISSING_DOMAIN host; 'Cc: ,,' holds no address, where Dovecot makes up two "
        "(MISSING_MAILBOX@MISSING_DOMAIN); and Dovecot keeps the white space after a "
        "Message-ID while we trim it as for every other envelope field.",
        lambda v: v.replace(b'"MISSING_DOMAIN"', b'""').replace(
            b'((NIL NIL "MISSING_MAILBOX" "")(NIL NIL "MISSING_MAILBOX" ""))', b"NIL").replace(
            b'"<spaces@example.com>   "', b'"<spaces@example.com>"')),
    **{("malformed-params", name): (
        "Dovecot's parameter parser recovers differently from broken Content-Type values: "
        "after 'charset;' (no '=') it also drops the next parameter, keeps '=novalue' with "
        "an empty name, cuts name=report(1).pdf at the '(' and drops an unterminated quoted "
        "string; ours skips only the broken parameter and keeps values as written.",
        lambda v: v.replace(b'("" "novalue" "name" "report" ',
                            b'("format" "flowed" "name" "report(1).pdf" ').replace(
            b'"octet-stream" NIL', b'"octet-stream" ("name" "unterminated")'))
       for name in (b"BODY", b"BODYSTRUCTURE")},
    **{("deep", name): (
        "RFC 2046 section 5.1.1: the CRLF before a boundary belongs to the boundary, so a "
        "nested multipart whose close delimiter is directly followed by its parent's next "
        "boundary ends right after '--L4--'; Dovecot counts that CRLF into the nested part.",
        drop_final_crlf) for name in (b"BODY[1]", b"BODY[1.1]", b"BODY[1.1.2]")},
    **{("rfc822-base64", name): (
        "A base64 message/rfc822 cannot be parsed in place, so we keep it opaque; Dovecot "
        "parses the base64 text as a header-only message and counts the CRLF before the "
        "boundary into it (2 octets, 1 line more), and its 1.HEADER is that base64 line.",
        patch) for name, patch in (
            (b"BODY", lambda v: v.replace(b'"base64" 70', b'"base64" 68').replace(
                b' 0 0) 1) "mixed"', b' 0 0) 0) "mixed"')),
            (b"BODYSTRUCTURE", lambda v: v.replace(b'"base64" 70', b'"base64" 68').replace(
                b' NIL NIL NIL NIL) 1 NIL', b' NIL NIL NIL NIL) 0 NIL')),
            (b"BODY[1]", drop_final_crlf),
            (b"BODY[1.HEADER]", lambda v: b"{0}\r\n"))},
    ("repeated-address-fields", b"ENVELOPE"): (
        "Repeated address fields are merged as in Dovecot, but of a repeated Date, Subject, "
        "In-Reply-To or Message-ID we keep the first (the Date SENTON reads), Dovecot the last.",
        lambda v: v.replace(b'"Tue, 3 Feb', b'"Mon, 2 Feb').replace(
            b'"second subject"', b'"first subject"').replace(
            b'"<irt2@example.com>" "<second@example.com>"',
            b'"<irt1@example.com>" "<first@example.com>"')),
    ("header-only", b"BODY[HEADER.FIELDS (SUBJECT)]"): (
        "RFC 3501 section 6.4.5: the blank line is included in header fetches 'except in the "
        "case of a message which has no body and no blank line'; Dovecot adds one anyway for "
        "HEADER.FIELDS (not for HEADER or HEADER.FIELDS.NOT).",
        drop_final_crlf),
}
BARE_LF = "bare-lf"
"""Dovecot turns bare LF into CRLF on output (and counts sizes that way); we send the stored
octets.  For that sample, sections are compared after the same conversion of ours, octet
counts in BODY/BODYSTRUCTURE/RFC822.SIZE are not compared, and partial fetches (whose
offsets shift) are skipped."""


def ours(request: str, sample: Sample, info: dict, ts: float) -> tuple[bytes, bytes]:
    """Our response name and value for one FETCH item."""
    item = parse_fetch_item(request)
    raw = sample.raw
    if item.kind == "ENVELOPE":
        value = envelope(info["envelope"])
    elif item.kind in ("BODY", "BODYSTRUCTURE"):
        value = bodystructure(info["body"], item.kind == "BODYSTRUCTURE")
    elif item.kind == "RFC822.SIZE":
        value = rfc822_size(len(raw))
    elif item.kind == "INTERNALDATE":
        value = internaldate(ts)
    else:
        hs = info["header_size"]
        plan = resolve(item.section, info["body"], raw[:hs], len(raw), hs)
        total, chunks = iter_section(plan, io.BytesIO(raw), item.partial, chunk=5)
        data = b"".join(chunks)
        assert len(data) == total
        if sample.name == BARE_LF:
            data = re.sub(rb"(?<!\r)\n", b"\r\n", data)
        value = b"{%d}\r\n" % len(data) + data
    return item.name.encode(), value


def mask_numbers(tree):
    if isinstance(tree, list):
        return [mask_numbers(t) for t in tree]
    if isinstance(tree, tuple) and tree[1].isdigit():
        return ("atom", b"#")
    return tree


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.name for s in SAMPLES])
def test_same_fetch_responses_as_dovecot(sample, dovecot_responses):
    """Every FETCH item of :func:`requests`, for each corpus message: same response name and
    same value as Dovecot's -- compared as parsed data (NIL, string octets, numbers, lists), so
    only the quoted-or-literal choice may differ -- after the patches in KNOWN_DIFFERENCES."""
    theirs = dovecot_responses[sample.name]
    n = SAMPLES.index(sample)
    ts = BASE_TS + n * 86461
    info = info_of(sample.raw)
    compared = 0
    for request in requests(sample):
        item = parse_fetch_item(request)
        if sample.name == BARE_LF and item.partial is not None:
            continue
        name, value = ours(request, sample, info, ts)
        expected = theirs[request]
        assert expected is not None, f"{request}: Dovecot's answer has no {name!r}"
        known = KNOWN_DIFFERENCES.get((sample.name, name))
        if known is not None:
            patched = known[1](expected)
            assert patched != expected, f"stale known difference for {name!r}: {known[0]}"
            expected = patched
        want, got = parse_value(expected)[0], parse_value(value)[0]
        if sample.name == BARE_LF and item.kind in ("BODY", "BODYSTRUCTURE", "RFC822.SIZE"):
            want, got = mask_numbers(want), mask_numbers(got)
        assert got == want, f"{request}:\n  dovecot: {expected!r}\n  ours:    {value!r}"
        compared += 1
    assert compared >= len(ALWAYS)


SECTION_SYNTAX = [
    "", "1", "1.2.3", "header", "TEXT", "1.mime", "2.HEADER", "3.TEXT",
    "HEADER.FIELDS (FROM)", "header.fields.not (from to)", '1.HEADER.FIELDS ("a b" "")',
    "HEADER.FIELDS  (FROM  TO)", "HEADER.FIELDS (F:OM)",
    "MIME", "1.", ".1", "1..2", "1.TEXT.MIME", "TEXT.MIME", "HEADER.FIELDS", "HEADER.FIELDS ()",
    "HEADER.FIELDS(FROM)", "HEADER.FIELDS (FROM)X", "HEADERX", "2.MIME.HEADER", "X",
    'HEADER.FIELDS (FR"OM)',
]
PARTIAL_SYNTAX = ["<0.1>", "<7.100>", "<5.>", "<0.0>", "<.5>"]
LIBERAL_DOVECOT = {
    "0", "01", "1.0",   # RFC 3501 section-part is nz-number; Dovecot accepts 0 and 01
    "<1.4294967296>",   # RFC 3501 number is 32-bit; Dovecot accepts larger
    "<5>",              # RFC 3501 wants <origin.length>; Dovecot takes <origin> alone
}


def test_section_syntax_agrees_with_dovecot(dovecot):
    """A section or partial that Dovecot refuses with BAD we refuse too, and the other way
    round -- except where Dovecot accepts what RFC 3501's grammar does not (LIBERAL_DOVECOT);
    accepted ones get the same response name."""
    message = crlf("From: a@b.test\nSubject: s\n\nbody\n")
    liberal = sorted(LIBERAL_DOVECOT)
    cases = [(f"BODY.PEEK[{s}]", s in LIBERAL_DOVECOT)
             for s in SECTION_SYNTAX + liberal if not s.startswith("<")]
    cases += [(f"BODY.PEEK[]{p}", p in LIBERAL_DOVECOT)
              for p in PARTIAL_SYNTAX + liberal if p.startswith("<")]
    client = RawImap(dovecot.port)
    try:
        client.login()
        client.command(b"CREATE syntax")
        client.command(b"APPEND syntax", message)
        client.command(b"SELECT syntax")
        for case, only_dovecot_accepts in cases:
            untagged, tagged = client.run(b"FETCH 1 (%s)" % case.encode())
            dovecot_ok = tagged.split(b" ", 2)[1] == b"OK"
            try:
                name = parse_fetch_item(case).name
            except ValueError:
                name = None
            if only_dovecot_accepts:
                assert dovecot_ok and name is None, case
                continue
            assert dovecot_ok == (name is not None), f"{case}: Dovecot said {tagged!r}"
            if dovecot_ok:
                assert untagged[0].split(b" (", 1)[1].startswith(name.encode() + b" "), case
    finally:
        client.close()
