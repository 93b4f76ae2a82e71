"""URLAUTH (RFC 4467): URLs that carry their own authorization to parts of a user's mail.

    genurlauth      = "GENURLAUTH" 1*(SP url-rump SP mechanism)       ; RFC 4467 7.2, 9
    genurlauth-data = "*" SP "GENURLAUTH" 1*(SP url-full)
    resetkey        = "RESETKEY" [SP mailbox *(SP mechanism)]          ; 7.1
    urlfetch        = "URLFETCH" 1*(SP url-full)                      ; 7.3
    urlfetch-data   = "*" SP "URLFETCH" 1*(SP url-full SP nstring)
    url-rump        = astring   ; an absolute IMAP URL ending ";URLAUTH=" access
    url-full        = astring   ; url-rump ":" mechanism ":" verifier
    mechanism       = "INTERNAL" / 1*(ALPHA / DIGIT / "-" / ".")
    resp-text-code  =/ "URLMECH" SP "INTERNAL"

Only the ``INTERNAL`` mechanism exists (RFC 4467 3.4.1: HMAC-SHA1 of the rump under the user's key
for the mailbox, :mod:`mailstore.urlauth`).  Answers follow Dovecot 2.3 where RFC 4467 leaves
them open: a rump that is malformed, relative, another user's, or names a mailbox, UIDVALIDITY
or message that is not there is BAD; GENURLAUTH answers all its URLs in one untagged response;
URLFETCH answers each URL in its own untagged response, ``NIL`` for one that does not verify
(7.3: no error for the command); RESETKEY of a mailbox says ``[URLMECH INTERNAL]``.  Who may
fetch what is :mod:`imapserver.imap.urlparts`.
"""

from __future__ import annotations

import itertools

from twisted.internet import defer

from mailstore import sharing
from mailstore.errors import InvalidName, NotFound, PermissionDenied
from mailstore.urlauth import internal_verifier

from ..context import AUTH, SELECTED, Bad, No, command
from ..imapurl import UrlError, parse_url
from ..names import decode_name
from ..rev2 import utf8_names
from ..urlparts import BadUrl, expired, open_url
from ..wire import Atom, as_text, astring
from .fetch import STREAM_ABOVE, STREAM_HOP, _next_pieces

MECHANISM = "INTERNAL"


def _url_text(token) -> str:
    if not isinstance(token, (Atom, bytes)):
        raise Bad("expected a URL")
    return as_text(token, "URL")


@command("GENURLAUTH", AUTH, SELECTED)
@defer.inlineCallbacks
def genurlauth(ctx):
    """RFC 4467 7.2: a verifier for each rump, made with the user's key for its mailbox (the
    key is made on first use)."""
    args = ctx.args
    if not args or len(args) % 2:
        raise Bad("GENURLAUTH takes pairs of URL and mechanism")
    user = ctx.session.user
    rumps = []
    for rump_token, mech in zip(args[0::2], args[1::2], strict=True):
        if not isinstance(mech, Atom) or mech.upper() != MECHANISM:
            raise Bad(f"Unsupported URLAUTH mechanism: {mech!s}")
        text = _url_text(rump_token)
        try:
            url = parse_url(text)
        except UrlError as exc:
            raise Bad(f"Invalid URL: {exc}") from None
        if not url.absolute:
            raise Bad("Invalid URL: Relative URL not allowed")
        if not url.has_urlauth or url.verifier is not None:
            raise Bad("Invalid URL: Must be an URLAUTH rump URL")
        if (url.user or "").lower() != user:
            raise Bad(f"Not permitted to generate URLAUTH for user {url.user}")
        rumps.append(url)
    now = ctx.store.clock()

    def run():
        out = []
        for url in rumps:
            if url.expire is not None and expired(url.expire, now):
                raise Bad("URLAUTH has already expired")
            try:
                # RFC 4467 7.2 with RFC 4314 4: only for a mailbox the user may read; one
                # hidden or unreadable answers as one that does not exist (RFC 4314 6).
                mailbox, _ = sharing.open_mailbox(ctx.store, user, url.mailbox or "", "r")
            except (NotFound, PermissionDenied, InvalidName):
                raise Bad(f"Invalid URL: Mailbox doesn't exist: {url.mailbox}") from None
            if url.uidvalidity is not None and url.uidvalidity != mailbox.uidvalidity:
                raise Bad("Invalid URL: Invalid UIDVALIDITY")
            if not [v for v in ctx.store.fetch(mailbox, [url.uid]) if v.uid == url.uid]:
                raise Bad("Invalid URL: Message not found")
            key = ctx.store.urlauth_key(user, mailbox, create=True)
            out.append(f"{url.rump}:internal:{internal_verifier(key, url.rump)}")
        return out
    fulls = yield ctx.call(run)
    ctx.untagged(b"GENURLAUTH " + b" ".join(astring(f) for f in fulls))
    ctx.finish(b"OK", "GENURLAUTH completed")


@command("RESETKEY", AUTH, SELECTED)
@defer.inlineCallbacks
def resetkey(ctx):
    """RFC 4467 7.1: without arguments every key of the user goes; with a mailbox, its key is
    replaced.  Either way the URLs made with the old keys stop working."""
    name = None
    if ctx.args:
        name = decode_name(ctx.args[0], utf8_names(ctx.session))
        for mech in ctx.args[1:]:
            if not isinstance(mech, Atom) or mech.upper() != MECHANISM:
                raise No("Unsupported URLAUTH mechanism")
    user = ctx.session.user

    def run():
        try:
            ctx.store.reset_urlauth_keys(user, name)
        except (NotFound, InvalidName):
            # Hidden or missing alike (RFC 4314 6); seen without r: NO [NOPERM].
            raise No(f"Mailbox doesn't exist: {name}") from None
    yield ctx.call(run)
    if name is None:
        ctx.finish(b"OK", "All keys removed")
    else:
        ctx.finish(b"OK", "Key reset", f"URLMECH {MECHANISM}")


@command("URLFETCH", AUTH, SELECTED)
@defer.inlineCallbacks
def urlfetch(ctx):
    """RFC 4467 7.3: the data of each URLAUTH-authorized URL, ``NIL`` where the URL does
    not verify for this user (expired, revoked key, wrong access identifier, gone)."""
    if not ctx.args:
        raise Bad("URLFETCH takes URLs")
    texts = [_url_text(token) for token in ctx.args]
    user = ctx.session.user
    submit_users = ctx.server.cfg["imap"]["urlauth_submit_users"]
    now = ctx.store.clock()

    def run():
        out = []
        for text in texts:
            try:
                url = parse_url(text)
                part = open_url(ctx.store, url, user, submit_users, now, plain_allowed=False)
            except (UrlError, BadUrl):
                out.append((text, None, None))
                continue
            chunks = part.chunks(raw=False)  # NUL as 0x80: this is a literal (RFC 3501 4.3)
            if part.length <= STREAM_ABOVE:
                out.append((text, part.length, b"".join(chunks)))
            else:
                # Read as it is sent, a chunk at a time, as FETCH streams big sections.  The
                # first chunk now: content gone is found while the command can still say so.
                first = next(chunks, None)
                out.append((text, part.length,
                            itertools.chain(() if first is None else (first,), chunks)))
        return out
    results = yield ctx.call(run)
    for text, length, data in results:
        head = b"URLFETCH " + astring(text) + b" "
        if length is None:
            ctx.untagged(head + b"NIL")
        elif isinstance(data, bytes):
            ctx.untagged(head + b"{%d}\r\n" % length + data)
        else:
            yield _stream(ctx, b"* " + head + b"{%d}\r\n" % length, length, data)
    ctx.finish(b"OK", "URLFETCH completed")



@defer.inlineCallbacks
def _stream(ctx, head: bytes, length: int, chunks):
    """One URLFETCH literal over FETCH's streaming threshold, written as it is read; waits
    for the client to read between chunks.  A literal cut short cuts the connection (as
    FETCH's _stream explains: its octet count is already promised)."""
    conn = ctx.conn
    ctx.flush()
    try:
        conn.write_raw([head])
        conn.streaming = True
        sent = 0
        while sent < length:
            pieces = yield ctx.call(_next_pieces, chunks, STREAM_HOP)
            if not pieces:
                raise OSError("message ended early")
            if conn.closed or conn.closing:
                return
            conn.write_raw(pieces)
            sent += sum(map(len, pieces))
            yield conn.wait_writable()
        conn.streaming = False
        conn.write_raw([b"\r\n"])
    except Exception as exc:
        conn.cut(f"URLFETCH literal cut short: {exc}")
        raise
