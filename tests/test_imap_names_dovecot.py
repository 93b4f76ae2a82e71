"""Command answers compared with Dovecot's: atoms, mailbox names, LIST/LSUB over subscriptions,
SEARCH on addresses.

Every test runs against both servers (the ``server`` fixture is parametrised): ours, and a real
Dovecot (``tests/dovecot.py``) set up with the same hierarchy delimiter ``/``.  A test asserts
what the RFC asks for on each, so the expectation is checked against an implementation we did
not write; the ``*_same_as_dovecot`` tests also play a whole script on both and compare every
response, parsed (quoting and literals are each server's choice, RFC 3501 section 4.3) and with
the text after the status word dropped.
"""

from __future__ import annotations

import re

import pytest
from dovecot import PASSWORD, USER, Dovecot, RawImap, parse_value, split_fetch
from imapproc import ServerProcess, make_users


class SlashDovecot(Dovecot):
    """Dovecot with ``/`` as its hierarchy delimiter, as ours (maildir's default is ``.``)."""

    def _configure(self):
        conf = super()._configure()
        with open(conf, "a") as f:
            f.write("namespace inbox {\n  inbox = yes\n  separator = /\n}\n")
        return conf


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("imap") / "store")
    make_users(data_dir, (USER, PASSWORD))
    with ServerProcess(data_dir) as proc:
        yield proc.port


@pytest.fixture(scope="module")
def dovecot(tmp_path_factory):
    with SlashDovecot(tmp_path_factory.mktemp("dovecot")) as server:
        yield server.port


@pytest.fixture(params=["ours", "dovecot"])
def server(request):
    """The port of one of the two servers."""
    return request.getfixturevalue(request.param)


def connect(port: int) -> RawImap:
    client = RawImap(port)
    client.login()
    return client


def status(tagged: bytes) -> bytes:
    """The status word of a tagged response (OK, NO or BAD)."""
    return tagged.split(b" ", 2)[1]


def astring(value) -> bytes:
    """An astring's octets, whether it was sent as an atom or as a string."""
    return value[1] if isinstance(value, tuple) else value


def parsed(response: bytes):
    """An untagged response as data: values parsed, FETCH attributes as (name, value) pairs,
    and the mailbox name of LIST/LSUB/STATUS as octets (atom or string alike)."""
    m = re.match(rb"\* (\d+) FETCH ", response)
    if m:
        return (int(m.group(1)), "FETCH",
                [(name.upper(), parse_value(value)[0]) for name, value in split_fetch(response)])
    values, i, data = [], 2, response.rstrip(b"\r\n")
    while i < len(data):
        if data[i:i + 1] == b" ":
            i += 1
            continue
        value, i = parse_value(data, i)
        values.append(value)
    verb = values[0][1].upper() if values and isinstance(values[0], tuple) else b""
    where = {b"LIST": 3, b"LSUB": 3, b"STATUS": 1}.get(verb)
    if where is not None and len(values) > where:
        values[where] = astring(values[where])
    return values


def transcript(port: int, script: list[tuple[bytes, bool]]) -> list:
    """Play ``(command, compare_untagged)`` pairs on one connection: each command's status
    word, and its untagged responses parsed when ``compare_untagged``."""
    client = connect(port)
    out = []
    try:
        for command, compare_untagged in script:
            untagged, tagged = client.run(command)
            responses = [parsed(r) for r in untagged] if compare_untagged else None
            if responses and command.split()[0].upper() in (b"LIST", b"LSUB"):
                responses.sort(key=repr)  # RFC 3501 6.3.8 prescribes no order
            out.append((command, status(tagged), responses))
    finally:
        client.close()
    return out


def assert_same(script, ours_port, dovecot_port) -> None:
    mine, theirs = transcript(ours_port, script), transcript(dovecot_port, script)
    for got, want in zip(mine, theirs, strict=True):
        assert got == want, f"\n  ours:    {got}\n  dovecot: {want}"


# -- '[' in atoms (item 5 of issue 11) -------------------------------------------------------

ATOM_CHARS = b"!#$&'+,-.0123456789:;<=>?@^_`|[}"
"""Every ATOM-CHAR that is not a letter, '[' included (RFC 3501 section 9)."""


def test_bracket_is_an_atom_char(server):
    """RFC 3501 section 9: atom-specials are ``( ) { SP CTL % * " \\ ]``; ``[`` is not one, so
    an atom holding it is a mailbox name like any other.  This one is not a mailbox (nor valid
    modified UTF-7): SELECT fails with NO, never BAD; as a LIST pattern it matches nothing."""
    client = connect(server)
    try:
        untagged, tagged = client.run(b"SELECT " + ATOM_CHARS)
        assert status(tagged) == b"NO", tagged
        untagged, tagged = client.run(b'LIST "" ' + ATOM_CHARS + b"%*")
        assert status(tagged) == b"OK" and untagged == [], (untagged, tagged)
        untagged, tagged = client.run(b"LSUB " + ATOM_CHARS + b" *")
        assert status(tagged) == b"OK", tagged
    finally:
        client.close()


def test_brackets_name_mailboxes(server):
    """RFC 3501 section 9: ``[`` is an ATOM-CHAR and ``]`` an ASTRING-CHAR (resp-specials), so
    ``a5[b`` and ``a5]c`` are mailbox names as atoms; ``BODY[`` alone is one too, while FETCH's
    ``BODY.PEEK[HEADER.FIELDS (A B)]`` keeps its section (spaces included) in one item."""
    client = connect(server)
    try:
        client.command(b"CREATE a5[b")
        client.command(b"CREATE a5]c")
        listed = [parsed(r)[-1] for r in client.command(b'LIST "" a5*')]
        assert sorted(listed) == [b"a5[b", b"a5]c"], listed
        client.command(b"APPEND a5[b", b"A: 1\r\nB: 2\r\nC: 3\r\n\r\nbody\r\n")
        client.command(b"SELECT a5[b")
        fetched = client.fetch(1, b"BODY.PEEK[HEADER.FIELDS (A B)] BODY.PEEK[]<0.4>")
        assert [(name, parse_value(v)[0]) for name, v in fetched] == [
            (b"BODY[HEADER.FIELDS (A B)]", b"A: 1\r\nB: 2\r\n\r\n"), (b"BODY[]<0>", b"A: 1")]
        assert status(client.run(b"SELECT body[")[1]) == b"NO"
    finally:
        client.close()


def test_atoms_same_as_dovecot(ours, dovecot):
    """RFC 3501 section 9 (atom, ASTRING-CHAR, fetch-att): the same commands with ``[`` and
    ``]`` in atoms get the same answers from both servers."""
    script = [
        (b"SELECT " + ATOM_CHARS, False),
        (b'LIST "" ' + ATOM_CHARS + b"%*", True),
        (b"CREATE s5[x", True), (b"CREATE s5]y", True), (b"CREATE s5[z]", True),
        (b'LIST "" s5*', True), (b'LIST "" s5[*', True), (b'LIST "" s5]%', True),
        (b"STATUS s5[x (MESSAGES)", True), (b"SUBSCRIBE s5[z]", True), (b'LSUB "" s5*', True),
        (b"SELECT s5[x", False), (b"SELECT body[", False), (b"SELECT s5[x", False),
        (b"FETCH 1:* (BODY.PEEK[HEADER.FIELDS (A B)])", True),
        (b"RENAME s5[z] s5[w", True), (b"DELETE s5]y", True), (b'LIST "" s5*', True),
        (b"CREATE a&b[", False), (b'LIST "" a&b[*', True),
    ]
    assert_same(script, ours, dovecot)


# -- LSUB and the parents of subscribed names (item 7) ---------------------------------------

def lsub(client: RawImap, reference: bytes, pattern: bytes) -> set[tuple[bytes, bytes]]:
    """LSUB's answer as a set of (attributes, name)."""
    return {(b" ".join(a[1] for a in r[1]), r[3])
            for r in map(parsed, client.command(b"LSUB %s %s" % (reference, pattern)))}


def test_lsub_percent_shows_unsubscribed_parents(server):
    """RFC 3501 6.3.9: "foo/bar" subscribed and "foo" not, ``LSUB "" %`` must return foo,
    flagged \\Noselect, not foo/bar.  A subscribed parent is listed as itself, once; a pattern
    whose ``%`` does not reach past a subscribed name's parent (no wildcard, ``*``, a ``%``
    before the last level) adds no parents."""
    client = connect(server)
    try:
        for name in (b"L7/A/x", b"L7/B", b"L7/B/deep", b"L7/C/y/z"):
            client.command(b"CREATE " + name)
        for name in (b"L7/A/x", b"L7/B", b"L7/B/deep", b"L7/C/y/z"):
            client.command(b"SUBSCRIBE " + name)
        level = {(b"\\Noselect", b"L7/A"), (b"", b"L7/B"), (b"\\Noselect", b"L7/C")}
        assert lsub(client, b'""', b"L7/%") == level
        assert lsub(client, b"L7/", b"%") == level
        assert lsub(client, b'""', b"L7%") == {(b"\\Noselect", b"L7")}
        assert lsub(client, b'""', b"L7/%/%") == {(b"", b"L7/A/x"), (b"", b"L7/B/deep"),
                                                  (b"\\Noselect", b"L7/C/y")}
        assert lsub(client, b'""', b"L7/*") == {(b"", b"L7/A/x"), (b"", b"L7/B"),
                                                (b"", b"L7/B/deep"), (b"", b"L7/C/y/z")}
        assert lsub(client, b'""', b"L7/A") == set()
        assert lsub(client, b'""', b"L7*A") == set()
        assert lsub(client, b'""', b"%/A") == set()
    finally:
        client.close()


def test_lsub_same_as_dovecot(ours, dovecot):
    """RFC 3501 6.3.9: LSUB answers, parents flagged \\Noselect, agree with Dovecot's for
    patterns with ``%`` and ``*`` at every level and with a reference."""
    script = [(b"CREATE " + n, False)
              for n in (b"S7/a/b/c", b"S7/a/d", b"S7/e", b"S7/f", b"S7/f/g")]
    script += [(b"SUBSCRIBE " + n, False) for n in (b"S7/a/b/c", b"S7/e", b"S7/f/g", b"S7/f")]
    for reference, pattern in ((b'""', b"S7"), (b'""', b"S7%"), (b'""', b"S7/%"),
                               (b'""', b"S7/%/%"), (b'""', b"S7/%/%/%"), (b'""', b"S7/*"),
                               (b'""', b"S7/a%"), (b'""', b"S7/a/%"), (b"S7/", b"%"),
                               (b"S7/a", b"%"), (b"S7/a/", b"*"), (b'""', b"S7/%/b"),
                               (b'""', b"S7*b"), (b'""', b"S7/%b%"), (b'""', b"S7/a%%"),
                               (b'""', b"s7/%")):
        script.append((b"LSUB %s %s" % (reference, pattern), True))
    assert_same(script, ours, dovecot)
