"""ManageSieve's wire format and error mapping, without a server (RFC 5804 1.3, 4)."""

from __future__ import annotations

import pytest

from imapserver.managesieve import wire
from imapserver.managesieve.server import ManageSieveServer
from mailstore import errors
from mailstore.sievescripts import ScriptActive, TooManyScripts


def test_tokenize_strings_numbers_and_literals():
    """RFC 5804 4: quoted strings escape only DQUOTE and backslash; numbers are 0..2^32-1;
    literals arrive as segments between the line's pieces."""
    assert wire.tokenize([b'putScript "a\\"b\\\\" ', wire.Literal(b"keep;"), b""]) == \
        ("PUTSCRIPT", [wire.Argument(b'a"b\\'), wire.Argument(b"keep;")])
    assert wire.tokenize([b'HAVESPACE "x" 4294967295']) == \
        ("HAVESPACE", [wire.Argument(b"x"), wire.Argument(b"4294967295", 4294967295)])
    for bad in (b'HAVESPACE "x" 4294967296', b'NOOP "a\\n"', b'NOOP "open', b"NOOP atom",
                b'NOOP "a""b"', b"", b'"NOOP"', b'NOOP "' + b"x" * 1025 + b'"'):
        with pytest.raises(wire.SyntaxFault):
            wire.tokenize([bad])


def test_strings_out_are_quoted_or_literals():
    """RFC 5804 4: a string with CR, LF or NUL, or over 1024 octets, goes as a literal."""
    assert wire.string('say "hi" \\ ok') == b'"say \\"hi\\" \\\\ ok"'
    assert wire.string("two\r\nlines") == b"{10}\r\ntwo\r\nlines"
    assert wire.string("x" * 1025).startswith(b"{1025}\r\n")
    assert wire.response(b"NO", "gone", "NONEXISTENT") == b'NO (NONEXISTENT) "gone"'
    assert wire.lone_string([b'"*"']) == b"*"
    assert wire.lone_string([b"", wire.Literal(b"abc"), b""]) == b"abc"
    with pytest.raises(wire.SyntaxFault):
        wire.lone_string([b'"a" "b"'])


@pytest.mark.parametrize("error, code", [
    (TooManyScripts("x"), "QUOTA/MAXSCRIPTS"), (errors.TooLarge("x"), "QUOTA/MAXSIZE"),
    (errors.OverQuota("x"), "QUOTA"), (errors.NotFound("x"), "NONEXISTENT"),
    (errors.AlreadyExists("x"), "ALREADYEXISTS"), (ScriptActive("x"), "ACTIVE"),
    (errors.InvalidName("x"), None), (errors.Conflict("x"), "TRYLATER"),
    (errors.BackendUnavailable("thrift at 10.0.0.1 down"), "TRYLATER")])
def test_store_errors_become_rfc_5804_response_codes(error, code):
    """RFC 5804 1.3's codes; a backend failure's detail stays in the log."""
    described = ManageSieveServer.describe_error(error)
    assert described[0] == code
    assert "10.0.0.1" not in described[1]
