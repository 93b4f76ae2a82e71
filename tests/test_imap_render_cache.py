"""The cache of rendered ENVELOPE and BODY/BODYSTRUCTURE (imapserver/imap/render.py).

RFC 3501 7.4.2: ENVELOPE and BODYSTRUCTURE are computed from the message, which never
changes; rendered once per content id, they must be the same octets as rendering them again,
and the cache must stay within its bound.
"""

from __future__ import annotations

from imapserver.imap.render import (
    Rendered,
    bodystructure,
    cached_bodystructure,
    cached_envelope,
    envelope,
)

ENV = {"date": "Sat, 21 Nov 2026 10:00:00 +0000", "subject": "Hello\r\n  world",
       "from": [["Ann", None, "ann", "example.org"]], "sender": [["Ann", None, "ann",
                                                                 "example.org"]],
       "reply_to": None, "to": [[None, None, "bob", "example.com"]], "cc": None, "bcc": None,
       "in_reply_to": None, "message_id": "<1@example.org>"}
BODY = {"type": "text", "subtype": "plain", "params": [["charset", "us-ascii"]], "id": None,
        "description": None, "encoding": "7bit", "size": 10, "lines": 1, "md5": None,
        "disposition": None, "language": None, "location": None}


def test_cached_renderings_equal_fresh_ones():
    """RFC 3501 7.4.2: the cached ENVELOPE, BODY and BODYSTRUCTURE are the octets rendering
    gives, on the first call and on later ones, BODY and BODYSTRUCTURE kept apart."""
    content = b"content-id-for-this-test"
    for _ in range(2):
        assert cached_envelope(content, ENV) == envelope(ENV)
        assert cached_bodystructure(content, BODY, False) == bodystructure(BODY, False)
        assert cached_bodystructure(content, BODY, True) == bodystructure(BODY, True)
    assert bodystructure(BODY, False) != bodystructure(BODY, True)


def test_cache_keeps_at_most_its_limit_dropping_the_oldest():
    """The cache is bounded: past ``limit`` entries the oldest goes, and a dropped entry is
    rendered again when asked for (RFC 3501 7.4.2 data, whatever the cache holds)."""
    cache = Rendered(limit=3)
    calls = []

    def render(n):
        calls.append(n)
        return b"%d" % n
    for n in range(5):
        assert cache.get((n,), render, n) == b"%d" % n
    assert len(cache._items) == 3
    assert cache.get((4,), render, 4) == b"4" and calls == [0, 1, 2, 3, 4]
    assert cache.get((0,), render, 0) == b"0" and calls[-1] == 0
