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


def normal_extended(items: list) -> list:
    """An mbox-list-extended list (tag, data, tag, data...) with its tags as octets."""
    return [astring(x) if isinstance(x, tuple) else x for x in items]


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


def transcript(port: int, script: list[tuple[bytes, bool]], drop=frozenset()) -> list:
    """Play ``(command, compare_untagged)`` pairs on one connection: each command's status
    word, and its untagged responses parsed when ``compare_untagged`` (LIST/LSUB attributes
    in ``drop`` left out, extended data items' tags as octets)."""
    client = connect(port)
    out = []
    try:
        for command, compare_untagged in script:
            untagged, tagged = client.run(command)
            responses = [parsed(r) for r in untagged] if compare_untagged else None
            for r in responses or ():
                if isinstance(r, list) and r[0][1].upper() in (b"LIST", b"LSUB"):
                    r[1] = [a for a in r[1] if a[1] not in drop]
                    r[4:] = [normal_extended(e) for e in r[4:]]
            if responses and command.split()[0].upper() in (b"LIST", b"LSUB"):
                responses.sort(key=repr)  # RFC 3501 6.3.8 prescribes no order
            out.append((command, status(tagged), responses))
    finally:
        client.close()
    return out


def assert_same(script, ours_port, dovecot_port, drop=frozenset()) -> None:
    mine = transcript(ours_port, script, drop)
    theirs = transcript(dovecot_port, script, drop)
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


def test_keywords_stay_atoms(server):
    """RFC 3501 section 9: flag-keyword is an atom, so ``]`` (which the tokenizer now lets
    through, for astrings), ``%`` and ``*`` make STORE and APPEND fail with NO [CANNOT], as in
    Dovecot; ``[`` is an ATOM-CHAR and makes a valid keyword."""
    client = connect(server)
    try:
        client.command(b"CREATE k5")
        client.command(b"APPEND k5", b"Subject: k\r\n\r\nbody\r\n")
        client.command(b"SELECT k5")
        for keyword in (b"a]b", b"a%b", b"a*b"):
            untagged, tagged = client.run(b"STORE 1 +FLAGS (%s)" % keyword)
            assert tagged.split(b" ", 3)[1:3] == [b"NO", b"[CANNOT]"], (keyword, tagged)
            untagged, tagged = client.run(b"APPEND k5 (%s) {1+}\r\nx" % keyword)
            assert tagged.split(b" ", 3)[1:3] == [b"NO", b"[CANNOT]"], (keyword, tagged)
        untagged, tagged = client.run(b"STORE 1 +FLAGS (a[b)")
        assert status(tagged) == b"OK" and any(b"a[b" in r for r in untagged), untagged
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


# -- LIST (SUBSCRIBED RECURSIVEMATCH) with several patterns (item 8) -------------------------

CHILD_ATTRS = {b"\\HasChildren", b"\\HasNoChildren"}
"""Left out of comparisons: RFC 5258 section 4 lets a server send them unasked, and ours does."""


def recursive_list(client: RawImap, patterns: bytes) -> dict[bytes, tuple]:
    """``LIST (SUBSCRIBED RECURSIVEMATCH) "" patterns``: {name: (attributes, extended data)}."""
    out = {}
    for r in map(parsed, client.command(b'LIST (SUBSCRIBED RECURSIVEMATCH) "" ' + patterns)):
        attrs = {a[1] for a in r[1]} - CHILD_ATTRS
        out[r[3]] = (b" ".join(sorted(attrs)), r[4:])
    return out


CHILDINFO = [[b"CHILDINFO", [b"SUBSCRIBED"]]]
"""``("CHILDINFO" ("SUBSCRIBED"))`` as parsed (Dovecot sends the tag as an atom, we quote it)."""


def test_recursivematch_childinfo_only_for_unanswered_children(server):
    """RFC 5258 sections 3.5 and 4 (example 9): CHILDINFO ("SUBSCRIBED") tells that a
    subscribed descendant is not answered itself.  With several patterns, a parent whose
    subscribed children match one of the patterns is not listed for them; the nearest parent
    that does match a pattern carries it; a subscribed mailbox with subscribed children has
    it too (eps2 in the example)."""
    client = connect(server)
    try:
        # Parents created too: Dovecot's maildir does not create them (RFC 3501 6.3.3 SHOULD)
        for name in (b"R8/F", b"R8/F/B", b"R8/F/B/c", b"R8/G", b"R8/G/h", b"R8/H", b"R8/H/i",
                     b"R8/K"):
            client.command(b"CREATE " + name)
        for name in (b"R8/F/B/c", b"R8/G/h", b"R8/H", b"R8/H/i"):
            client.command(b"SUBSCRIBE " + name)

        def listed(patterns: bytes) -> dict[bytes, tuple]:
            return {name: (attrs, [normal_extended(e) for e in extended])
                    for name, (attrs, extended) in recursive_list(client, patterns).items()}
        sub, parent = (b"\\Subscribed", []), (b"", CHILDINFO)
        assert listed(b"(R8/G R8/G/h)") == {b"R8/G/h": sub}
        assert listed(b"(R8/G/h R8/G)") == {b"R8/G/h": sub}
        assert listed(b"(R8/F R8/F/*)") == {b"R8/F/B/c": sub}
        assert listed(b"(R8/F R8/F/%)") == {b"R8/F/B": parent}
        assert listed(b"(R8/F R8/F/B)") == {b"R8/F/B": parent}
        assert listed(b"R8/%") == {b"R8/F": parent, b"R8/G": parent,
                                   b"R8/H": (b"\\Subscribed", CHILDINFO)}
        assert listed(b"(R8/H R8/H/i)") == {b"R8/H": (b"\\Subscribed", CHILDINFO),
                                            b"R8/H/i": sub}
    finally:
        client.close()


def test_recursivematch_same_as_dovecot(ours, dovecot):
    """RFC 5258 sections 3.5 and 4: LIST (SUBSCRIBED RECURSIVEMATCH) with one and several
    patterns over a few layouts answers the same names, \\Subscribed and CHILDINFO as
    Dovecot (RFC 5258 example 9's layout among them)."""
    # Parents first: our store creates them with the child, Dovecot's maildir does not.
    script = [(b"CREATE " + n, False) for n in (
        b"X8/qux2", b"X8/a", b"X8/a/b", b"X8/a/b/c", b"X8/foo2", b"X8/foo2/bar1",
        b"X8/foo2/bar2", b"X8/baz2", b"X8/baz2/bar2", b"X8/baz2/bar22", b"X8/baz2/bar222",
        b"X8/eps2", b"X8/eps2/mamba", b"X8/qux2/bar2", b"X8/a/b/c/d", b"X8/a/e")]
    script += [(b"SUBSCRIBE " + n, False) for n in (
        b"X8/foo2/bar1", b"X8/foo2/bar2", b"X8/baz2/bar2", b"X8/baz2/bar22",
        b"X8/baz2/bar222", b"X8/eps2", b"X8/eps2/mamba", b"X8/qux2/bar2", b"X8/a/b/c/d")]
    for patterns in (b"X8/*2", b"X8/%", b"X8/*", b"(X8/% X8/*2)", b"(X8/baz2 X8/baz2/%)",
                     b"(X8/foo2 X8/foo2/bar2)", b"(X8/eps2 X8/eps2/%)", b"(X8/a X8/a/b)",
                     b"(X8/a/b/% X8/a)", b"(X8/a/% X8/a/b/c/d)", b"(X8/%/% X8/%)",
                     b"(X8/a/b X8/a/b/c X8/a)", b"(X8/nothing X8/q%)"):
        script.append((b'LIST (SUBSCRIBED RECURSIVEMATCH) "" ' + patterns, True))
    assert_same(script, ours, dovecot, drop=CHILD_ATTRS)


# -- SEARCH FROM/TO/CC/BCC on addresses with comments (item 9) -------------------------------

SEARCH_MESSAGES = [
    b"From: <user-from (comment)@ (comment) domain.org>\r\nTo: x@y\r\nSubject: 1\r\n\r\nb\r\n",
    b"From: Joe Q (the man) <joe (c1).q @ (c2) example\r\n .com>\r\nCc: a@x\r\nCC: b@x\r\n"
    b"cc: c@x\r\nSubject: 2\r\n\r\nb\r\n",
    b"From: \"Smith, J\" <js@ex.com>, undisclosed:;\r\nTo: =?utf-8?q?J=C3=B6rg?= <jo@ex.com>\r\n"
    b"Bcc: grp: m1@a.b, m2@c.d;\r\nSubject: 3\r\n\r\nb\r\n",
    b"From: old@style.org (Old Style)\r\nTo: \"quoted local\"@q.org\r\nSubject: 4\r\n\r\nb\r\n",
    b"From: <@route.example:r@x.org>\r\nTo: Plain <p@x.org>\r\nSubject: 5\r\n\r\nb\r\n",
]
SEARCH_CRITERIA = [
    b"FROM user-from@domain.org", b'FROM "<user-from@domain.org>"', b"FROM joe.q@example.com",
    b'FROM "Joe Q"', b"CC b@x", b"CC c@x", b'FROM "Smith, J"', b'FROM "\\"Smith"',
    b"FROM undisclosed", b'FROM "undisclosed:;"', b"TO jo@ex.com", b'TO "=?utf-8"',
    b"BCC grp", b"BCC m2@c.d", b'BCC "grp:"', b'BCC "grp: <m1@a.b>"', b'FROM "Old Style"',
    b'FROM "\\"Old Style\\" <old@style.org>"', b'TO "\\"quoted local\\"@q.org"',
    b'FROM ""', b'FROM "@"', b'FROM "<"', b'TO "<x@y>"', b"FROM r@x.org",
    b'TO "Plain <p@x.org>"', b"HEADER FROM user-from@domain.org", b"HEADER FROM comment",
    b"OR FROM js@ex.com TO p@x.org", b"NOT CC b@x",
]
ALSO_AS_WRITTEN = {
    b"FROM comment": [1], b'FROM "the man"': [2], b"FROM c1": [2],
    b'FROM "(comment)@"': [1], b'FROM "old@style.org (Old"': [4],
}
"""Deliberately more than Dovecot, which matches FROM/TO/CC/BCC only against the addresses it
re-writes: we match the field as written too (search_eval's docstring), so comments and the
original spelling are found; Dovecot answers nothing for these."""


def test_address_search_same_as_dovecot(ours, dovecot):
    """RFC 3501 6.4.4: SEARCH FROM/TO/CC/BCC over addresses with comments, folding, groups,
    quoted names and local parts, encoded words, routes and repeated fields finds what
    Dovecot finds, plus the text as written (ALSO_AS_WRITTEN)."""
    script = [(b"CREATE S9", False)]
    script += [(b"APPEND S9 {%d+}\r\n" % len(m) + m, False) for m in SEARCH_MESSAGES]
    script += [(b"EXAMINE S9", False)]
    script += [(b"SEARCH " + c, True) for c in SEARCH_CRITERIA + list(ALSO_AS_WRITTEN)]
    mine, theirs = transcript(ours, script), transcript(dovecot, script)
    for (command, *got), (_, *want) in zip(mine, theirs, strict=True):
        criteria = command.split(b" ", 1)[1]
        if criteria in ALSO_AS_WRITTEN:
            assert want == [b"OK", [[("atom", b"SEARCH")]]], (command, want)
            numbers = [("atom", b"%d" % n) for n in ALSO_AS_WRITTEN[criteria]]
            want = [b"OK", [[("atom", b"SEARCH"), *numbers]]]
        assert got == want, command


def test_wildcards_match_inbox_in_any_case():
    """RFC 3501 5.1 and 6.3.8: INBOX is case-insensitive, also where a wildcard matches it
    (Dovecot lists INBOX for ``*box``, ``in%``, ``%NBOX``); other names stay case-sensitive,
    and a pattern starting with INBOX in any case reaches INBOX's children."""
    from imapserver.imap.names import pattern_regex

    for pattern in ("*box", "*BOX", "in%", "%NBOX", "i*x", "inbox", "*", "%"):
        assert pattern_regex("", pattern).match("INBOX"), pattern
    assert not pattern_regex("", "*box").match("OUTBOX")
    assert pattern_regex("", "inbox/%").match("INBOX/Sub")
    assert not pattern_regex("", "*/sub").match("INBOX/Sub")
    assert not pattern_regex("", "in%").match("Inbound")
