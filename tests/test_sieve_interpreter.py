"""The Sieve interpreter alone (mailstore/sieve): what the Pigeonhole differential cannot
reach (a null sender, ereject, limits, include, the validator), each test citing its RFC."""

from __future__ import annotations

import threading
import time

import pytest

from mailstore.sieve import Envelope, Environment, Limits, run, validate
from mailstore.sieve.actions import Discard, Redirect, Reject, Store, Vacation
from mailstore.sieve.match import match
from mailstore.sieve.vacation import build_reply

MESSAGE = (b"From: Sender <sender@example.org>\r\nTo: alice@example.com\r\n"
           b"Subject: Hello there\r\nMessage-ID: <m1@example.org>\r\n\r\nbody\r\n")
ENVELOPE = Envelope("sender@example.org", "alice@example.com")


def env(**kwargs) -> Environment:
    return Environment(user="alice", user_addresses=["alice@example.com"], **kwargs)


def kinds(result) -> list:
    return [type(a).__name__ for a in result.actions]


def test_null_sender_matches_empty_envelope_from_and_gets_no_vacation():
    """RFC 5228 5.4: the null reverse-path is "" for every address part; RFC 5230 4.5 / RFC
    3834 2: no automatic reply to it."""
    script = ('require ["envelope", "vacation", "fileinto"];\n'
              'if envelope :localpart "from" "" { fileinto "Null"; }\n'
              'vacation "away";')
    result = run(script, MESSAGE, Envelope("", "alice@example.com"), env())
    assert [a.mailbox for a in result.stores] == ["Null"]
    assert not any(isinstance(a, Vacation) for a in result.actions)
    assert result.notes == ["vacation not sent: null sender"]


@pytest.mark.parametrize("extra, why", [
    (b"Auto-Submitted: auto-generated\r\n", "Auto-Submitted"),
    (b"Precedence: junk\r\n", "Precedence"),
    (b"List-Post: <mailto:l@example.org>\r\n", "mailing list"),
])
def test_vacation_not_sent_to_automatic_or_list_mail(extra, why):
    """RFC 5230 4.5, RFC 3834 2: no reply to auto-submitted, bulk/junk or list mail."""
    result = run('require "vacation"; vacation "away";', extra + MESSAGE, ENVELOPE, env())
    assert kinds(result) == ["Store"]
    assert why in result.notes[0]


def test_vacation_needs_the_users_address_and_not_to_self():
    """RFC 5230 4.5: only if one of the user's addresses (or :addresses) is in To/Cc/Bcc,
    and never to the user themself."""
    other = MESSAGE.replace(b"To: alice@example.com", b"To: list@example.net")
    assert kinds(run('require "vacation"; vacation "x";', other, ENVELOPE, env())) == ["Store"]
    result = run('require "vacation"; vacation :addresses "list@example.net" "x";', other,
                 ENVELOPE, env())
    assert "Vacation" in kinds(result)
    own = Envelope("alice@example.com", "alice@example.com")
    assert kinds(run('require "vacation"; vacation "x";', MESSAGE, own, env())) == ["Store"]


def test_vacation_days_clamped_and_tracking_asked():
    """RFC 5230 4.1: :days below the site minimum is raised to it; 4.2: a sender already
    answered within the period (per :handle) gets no second reply."""
    result = run('require "vacation"; vacation :days 0 "x";', MESSAGE, ENVELOPE, env())
    [reply] = [a for a in result.actions if isinstance(a, Vacation)]
    assert reply.seconds == 86400
    asked = []
    result = run('require "vacation"; vacation :handle "h" "x";', MESSAGE, ENVELOPE,
                 env(vacation_replied=lambda key: asked.append(key) or True))
    assert kinds(result) == ["Store"] and asked == ["alice\0sender@example.org\0h"]


def test_vacation_reply_fields_cannot_inject_headers():
    """RFC 5230 5.1-5.2 header fields of the reply; RFC 3834 3.1.7 Auto-Submitted;
    script values with CR/LF do not start new fields."""
    script = ('require ["vacation"];\n'
              'vacation :subject "hi\\r\\nBcc: x@y" :from "alice@example.com\\nX: 1" "away";')
    result = run(script.replace("\\r\\n", "\r\n").replace("\\n", "\n"), MESSAGE, ENVELOPE,
                 env())
    [reply] = [a for a in result.actions if isinstance(a, Vacation)]
    raw = build_reply(reply, "mx.example.com", 0)
    head = raw.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert [h.split(b":")[0] for h in head] == [
        b"From", b"To", b"Subject", b"Date", b"Message-ID", b"Auto-Submitted",
        b"Precedence", b"In-Reply-To", b"References", b"MIME-Version", b"Content-Type",
        b"Content-Transfer-Encoding"]
    assert b"Auto-Submitted: auto-replied (vacation)" in head


def test_ereject_and_reject_conflicts():
    """RFC 5429 2.1-2.2: ereject refuses like reject; reject with fileinto is an error
    (implicit keep), reject after discard is fine, a second reject is an error."""
    result = run('require "ereject"; ereject "no thanks";', MESSAGE, ENVELOPE, env())
    assert result.actions == [Reject("no thanks", extended=True)]
    bad = run('require ["reject","fileinto"]; fileinto "x"; reject "no";', MESSAGE, ENVELOPE)
    assert bad.error and kinds(bad) == ["Store"] and bad.stores[0].implicit
    ok = run('require "reject"; discard; reject "no";', MESSAGE, ENVELOPE)
    assert kinds(ok) == ["Discard", "Reject"]
    twice = run('require ["reject", "ereject"]; reject "a"; ereject "b";', MESSAGE, ENVELOPE)
    assert twice.error


def test_limits_turn_into_an_implicit_keep():
    """RFC 5228 2.10.6 (an implementation limit is a runtime error): actions, redirects and
    the step bound; the script's other actions are dropped."""
    many = "".join(f'redirect "r{i}@example.net";\n' for i in range(5))
    result = run(many, MESSAGE, ENVELOPE, env(limits=Limits(max_redirects=4)))
    assert result.error and "redirects" in result.error and kinds(result) == ["Store"]
    stores = 'require "fileinto";\n' + "".join(f'fileinto "f{i}";\n' for i in range(40))
    assert "actions" in run(stores, MESSAGE, ENVELOPE, env()).error
    heavy = 'require "fileinto";\n' + 'if header :matches "subject" "*e*" { }\n' * 2000
    result = run(heavy, MESSAGE, ENVELOPE, env(limits=Limits(max_steps=1000)))
    assert result.error and "steps" in result.error


def test_matches_cannot_blow_up():
    """RFC 5228 2.7.1 wildcards: a pattern built to make a backtracking matcher take
    exponential time runs in time proportional to pattern x value."""
    started = time.thread_time()  # CPU time: what is bounded, and not stretched by load
    assert match(["a" * 20000], ["*a*a*a*a*a*a*a*a*a*a*b"], ":matches") == (False, None)
    assert time.thread_time() - started < 2


def test_match_variables_and_comparators():
    """RFC 5229 3.2 ${0}..${9}; RFC 4790 9.2 i;ascii-casemap folds only A-Z; RFC 4790 9.1
    i;ascii-numeric: a value without leading digits is +infinity."""
    assert match(["Hello World"], ["* *"], ":matches") == (True, ["Hello World", "Hello",
                                                                   "World"])
    assert match(["ÉTÉ"], ["été"], ":is", "i;ascii-casemap") == (False, None)
    assert match(["abc"], ["99999"], ":value", "i;ascii-numeric", "gt") == (True, None)
    assert match(["007"], ["7"], ":is", "i;ascii-numeric") == (True, None)


def test_include_once_optional_return_and_depth():
    """RFC 6609 3.2 :once runs a script one time, :optional skips a missing one, return
    ends the included script only; 3.2's recursion is bounded."""
    scripts = {"lib": 'require ["fileinto", "include"]; fileinto "FromLib"; return; '
                      'fileinto "Never";',
               "self": 'require "include"; include "self";'}
    text = ('require ["include", "fileinto"];\ninclude :once "lib";\ninclude :once "lib";\n'
            'include :optional "none";\nfileinto "After";')
    result = run(text, MESSAGE, ENVELOPE,
                 env(get_script=lambda location, name: scripts.get(name)))
    assert [a.mailbox for a in result.stores] == ["FromLib", "After"]
    loop = run('require "include"; include "self";', MESSAGE, ENVELOPE,
               env(get_script=lambda location, name: scripts.get(name)))
    assert loop.error and "deeper" in loop.error
    missing = run('require "include"; include "none";', MESSAGE, ENVELOPE, env())
    assert missing.error and "not found" in missing.error


def test_duplicate_marks_only_for_new_ids():
    """RFC 7352 3: an id not seen is recorded (after delivery); a seen one is not refreshed
    unless :last."""
    fresh = run('require "duplicate"; if duplicate { discard; }', MESSAGE, ENVELOPE, env())
    assert kinds(fresh) == ["Store"] and len(fresh.duplicate_marks) == 1
    seen = run('require "duplicate"; if duplicate { discard; }', MESSAGE, ENVELOPE,
               env(duplicate_seen=lambda key: True))
    assert kinds(seen) == ["Discard"] and seen.duplicate_marks == []


def test_editheader_protects_received_and_encodes_values():
    """RFC 5293 7: Received cannot be removed; a value with CR/LF stays one field."""
    message = b"Received: from a by b; Tue, 1 Jan 2020 00:00:00 +0000\r\n" + MESSAGE
    result = run('require "editheader"; deleteheader "Received"; addheader "X-A" "1\r\nX-B: 2";',
                 message, ENVELOPE)
    assert result.message.startswith(b"X-A: 1 X-B: 2\r\nReceived: from a")


def test_redirect_and_discard_shapes():
    """RFC 5228 4.2/4.4 and RFC 3894 :copy keeps the implicit keep."""
    result = run('require "copy"; redirect :copy "b@example.net";', MESSAGE, ENVELOPE)
    assert result.actions == [Redirect("b@example.net", True),
                              Store("INBOX", (), False, True, True)]
    assert run("discard;", MESSAGE, ENVELOPE).actions == [Discard()]
    bad = run('redirect "not an address";', MESSAGE, ENVELOPE)
    assert bad.error and isinstance(bad.actions[0], Store)


def test_validate_reports_lines():
    """RFC 5804 2.6 PUTSCRIPT answers a bad script with its error; each says its line."""
    assert validate('require "fileinto";\nfileinto "x";\n') == []
    assert validate('require ["fileinto", "foo"];\nkeep;') == [
        "line 1: unsupported extension 'foo'"]
    assert validate("keep;\nif true {\n  stop;\n")[0].startswith("line 4:")
    assert validate('keep;\nfileinto "x";')[0].startswith("line 2:")
    errors = validate('require "relational";\nif header :count "xx" "a" "1" { stop; }')
    assert errors == ["line 2: invalid relational match 'xx' (RFC 5231 4.2)"]
    assert validate(b"keep;\n\xff") == ["line 2: script is not UTF-8 (RFC 5228 2.1)"]


def test_parsing_is_thread_safe():
    """sievelib keeps the loaded extensions in parser state; delivery parses in several
    threads at once, so each parse must see only its own script's require."""
    errors = []

    def parse_many(text, expect_error):
        for i in range(50):
            found = validate(text + f"\n# {threading.get_ident()} {i}")
            if bool(found) != expect_error:
                errors.append(found)

    threads = [threading.Thread(target=parse_many, args=('require "fileinto"; fileinto "a";',
                                                         False)),
               threading.Thread(target=parse_many, args=('fileinto "a";', True))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_store_actions_keep_names():
    """RFC 5228 4.1: fileinto "INBOX" and keep are the same mailbox, stored once."""
    result = run('require "fileinto"; fileinto "inbox"; keep;', MESSAGE, ENVELOPE)
    assert len(result.stores) == 1 and isinstance(result.stores[0], Store)


def test_implicit_keep_over_the_action_limit_is_still_a_keep():
    """RFC 5228 2.10.6: the implicit keep that would exceed max_actions is a runtime error,
    answered by an implicit keep -- never an exception out of the interpreter."""
    script = 'require ["fileinto", "copy"]; fileinto :copy "a"; fileinto :copy "b";'
    result = run(script, MESSAGE, ENVELOPE, env(limits=Limits(max_actions=2)))
    assert result.error and "actions" in result.error
    assert kinds(result) == ["Store"] and result.stores[0].mailbox == "INBOX"


@pytest.mark.parametrize("script, line", [("keep;\n discard", 2),
                                          ('require "fileinto";\nfileinto "x"\n', 3),
                                          ("discard # no semicolon here", 1)])
def test_last_command_without_semicolon_is_refused(script, line):
    """RFC 5228 8.1: ``command = identifier arguments (";" / block)`` -- the end of the
    script does not end a command.  validate() refuses it on the line Pigeonhole names (the
    end of the script), and at delivery the script fails: its ``discard`` is not done, the
    message is kept (RFC 5228 2.10.6)."""
    errors = validate(script)
    assert errors and errors[0].startswith(f"line {line}: "), errors
    result = run(script, MESSAGE, ENVELOPE, env())
    assert result.error is not None and kinds(result) == ["Store"]
    assert validate("keep;\n discard;") == [] and validate("# only a comment") == []


def test_a_long_matches_key_on_a_big_body_is_bounded_by_the_steps():
    """RFC 5228 2.10.6 (implementation limits) and 2.7.1 (:matches): a wildcard match costs up
    to pattern x value; a key of a few thousand characters against a body of a few hundred
    kilobytes is 10^9 comparisons.  Without ``?`` the match is linear (segments found by
    str.find); with ``?`` the step bound (the CPU bound) counts the work, so the run stops with
    a runtime error and an implicit keep within seconds, not minutes."""
    big = MESSAGE.replace(b"body\r\n", b"a" * 300_000 + b"\r\n")
    long_subject = MESSAGE.replace(b"Hello there", b"a" * 200_000)
    for key in ("*" + "a" * 3000 + "b", "*" + "a" * 3000 + "?b"):
        for script, message in ((f'require "body";\nif body :raw :matches "{key}" {{ discard; }}'
                                 "\n", big),
                                (f'if header :matches "subject" "{key}" {{ discard; }}\n',
                                 long_subject)):
            # CPU time, what the steps bound: 1.2 s here, 7 s of wall time on a busy machine
            started = time.thread_time()
            result = run(script, message, ENVELOPE, env())
            assert time.thread_time() - started < 5
            assert kinds(result) == ["Store"]
            if "?" in key:
                assert result.error and "steps" in result.error
            else:
                assert result.error is None


def test_literal_and_wildcard_globs_agree_on_captures():
    """RFC 5229 3.2: the str.find path and the two-pointer loop give the same shortest
    ``*`` spans (``?`` added at the end of the text forces the loop)."""
    cases = [("*a*", "xxaxxa"), ("a*b*c", "aXbYbZc"), ("**x", "yyx"), ("", ""), ("*", ""),
             ("ab*", "a"), ("*bc", "abcbc"), ("a*a", "a"), ("*.*@*", "a.b@c.d@e")]
    for pattern, text in cases:
        fast = match([text], [pattern], ":matches", "i;octet")
        slow = match([text + "!"], [pattern + "?"], ":matches", "i;octet")
        assert fast[0] == slow[0], pattern
        if fast[0]:
            assert fast[1][1:] == slow[1][1:-1], pattern


def test_ordinary_matches_on_a_big_body_still_run():
    """RFC 5228 2.7.1: the bound must not refuse an everyday ``*word*`` test on a large
    message (cost proportional to the body, well inside the default steps)."""
    big = MESSAGE.replace(b"body\r\n", b"x" * 2_000_000 + b" invoice\r\n")
    result = run('require "body";\nif body :raw :matches "*invoice*" { discard; }\n', big,
                 ENVELOPE, env())
    assert result.error is None and kinds(result) == ["Discard"]


def test_vacation_threads_only_message_ids_from_the_original():
    """RFC 5230 5.8 (In-Reply-To and References from the original's Message-ID and
    References) and RFC 5322 3.6.4 (those fields hold msg-ids only): a folded continuation
    or an encoded word in the original's fields must not carry other text, such as a
    ``Bcc:``, into the reply's header."""
    original = (b"From: Sender <sender@example.org>\r\nTo: alice@example.com\r\n"
                b"Subject: Hello\r\nMessage-ID: <m1@example.org>\r\n\tBcc: v2@example.net\r\n"
                b"References: <r1@example.org>\r\n =?utf-8?q?x=0D=0ABcc:_v3@example.net?=\r\n"
                b"\r\nbody\r\n")
    result = run('require "vacation";\nvacation "away";\n', original, ENVELOPE, env())
    [reply] = [a for a in result.actions if isinstance(a, Vacation)]
    head = build_reply(reply, "mx.example.com", 0).split(b"\r\n\r\n")[0]
    assert b"In-Reply-To: <m1@example.org>\r\n" in head
    assert b"References: <r1@example.org> <m1@example.org>\r\n" in head
    assert b"Bcc" not in head


def test_variable_expansion_is_counted_against_the_steps():
    """RFC 5229 6 (limits on variables) and RFC 5228 2.10.6: a value is truncated to
    max_variable_size, but a string of thousands of ``${x}`` references expands to tens of
    megabytes before that, and an included script (RFC 6609, no :once) can do it thousands of
    times for a few steps each.  The expanded length is charged to the step bound, so the run
    stops with a runtime error and an implicit keep within seconds."""
    doubled = ('require "variables";\nset "x" "ab";\n'
               + 'set "x" "${x}${x}";\n' * 40 + 'set :length "n" "${x}";\n'
               'if string :is "${n}" "4096" { discard; }\n')
    result = run(doubled, MESSAGE, ENVELOPE, env())
    assert result.error is None and kinds(result) == ["Discard"]  # truncated at 4096
    scripts = {"big": 'require ["variables", "include"];\nglobal "x";\nset "y" "'
                      + "${x}" * 12000 + '";\n'}
    main = ('require ["variables", "include"];\nglobal "x";\nset "x" "' + "a" * 4096
            + '";\n' + 'include "big";\n' * 3000)
    started = time.thread_time()  # CPU time: what the steps bound, not stretched by load
    result = run(main, MESSAGE, ENVELOPE,
                 env(get_script=lambda location, name: scripts.get(name)))
    assert time.thread_time() - started < 5
    assert result.error and "steps" in result.error and kinds(result) == ["Store"]


def test_addheader_cannot_grow_the_message_without_bound():
    """RFC 5293 7 (implementations may limit the number and size of added fields) and RFC 5228
    2.10.6: thousands of ``addheader`` of a 4000-character variable would add megabytes to
    every copy delivered (more through includes); past the bound the run is a runtime error,
    the message is kept unchanged, and a handful of fields is still fine."""
    many = ('require ["editheader", "variables"];\nset "x" "' + "a" * 4000 + '";\n'
            + 'addheader "X-A" "${x}";\n' * 2500)
    result = run(many, MESSAGE, ENVELOPE, env())
    assert result.error and "addheader" in result.error and kinds(result) == ["Store"]
    few = 'require "editheader";\n' + 'addheader "X-B" "value";\n' * 10
    assert run(few, MESSAGE, ENVELOPE, env()).error is None


@pytest.mark.parametrize("sender", ["MAILER-DAEMON@example.org", "owner-dev@lists.example.org",
                                    "dev-request@lists.example.org", "LISTSERV@example.org",
                                    "majordomo@example.org"])
def test_vacation_not_sent_to_system_or_list_senders(sender):
    """RFC 5230 4.5 and RFC 3834 2 (no reply to owner-*, *-request, MAILER-DAEMON, LISTSERV,
    majordomo envelope senders), on an otherwise ordinary message without list or
    Auto-Submitted fields; the same message from a person gets its reply."""
    script = 'require "vacation"; vacation "away";'
    result = run(script, MESSAGE, Envelope(sender, "alice@example.com"), env())
    assert kinds(result) == ["Store"] and "list or system" in result.notes[0]
    assert "Vacation" in kinds(run(script, MESSAGE, ENVELOPE, env()))
