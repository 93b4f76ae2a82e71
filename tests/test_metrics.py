"""/metrics as documented: docs/metrics.md lists every metric (name, type, labels and their
values), and a running server serves exactly those, with label values from the listed sets.

The doc is parsed: a metric is a ``### `name` `` heading, its type the first word of the next
paragraph, its labels the ``- `label`: `value`, ...`` bullets under it.
"""

from __future__ import annotations

import ast
import re
import smtplib
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from imapserver import observe
from tests.deliveryserver import lmtp_send
from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message
from tests.sieveclient import SieveClient

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "metrics.md"


def documented() -> dict[str, tuple[str, dict[str, set[str]]]]:
    """{metric name: (type, {label: allowed values})} from docs/metrics.md."""
    metrics: dict[str, tuple[str, dict[str, set[str]]]] = {}
    name = None
    for line in DOC.read_text().splitlines():
        heading = re.fullmatch(r"### `([a-z_:]+)`", line)
        if heading:
            name = heading.group(1)
            metrics[name] = ("", {})
            continue
        if line.startswith("## "):
            name = None
        if name is None:
            continue
        kind, labels = metrics[name]
        if not kind and line.strip():
            metrics[name] = (line.split(".")[0].lower(), labels)
            continue
        label = re.match(r"- `(\w+)`(?: \([^)]*\))?: (.*)", line)
        if label:
            # Values are the backticked words; a parenthesis explains one, it is not a value.
            text = re.sub(r"\([^)]*\)", "", label.group(2))
            labels[label.group(1)] = set(re.findall(r"`([^`]+)`", text))
    return metrics


def scrape(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def served(text: str) -> dict[str, tuple[str, list]]:
    """{metric name as queried: (type, samples)}; counters are named with their _total."""
    out = {}
    for family in text_string_to_metric_families(text):
        name = family.name + "_total" if family.type == "counter" else family.name
        out[name] = (family.type, family.samples)
    return out


def value(text: str, name: str, **labels) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return 0.0


def imap_traffic(port: int) -> None:
    c = Client(port)
    c.cmd("a", "LOGIN max wrong-guess")
    c.cmd("b", "LOGIN max s3cret-pass")
    for tag, command in [("c", "CREATE Work"), ("d", "LIST \"\" *"),
                         ("e", "STATUS INBOX (MESSAGES)"), ("f", "SUBSCRIBE Work"),
                         ("g", "UNSUBSCRIBE Work")]:
        assert c.cmd(tag, command)[-1].startswith(tag.encode() + b" OK"), command
    data = message(1)
    c.send(b"h APPEND INBOX {%d+}\r\n" % len(data) + data + b"\r\n")
    assert c.until_tagged("h")[-1].startswith(b"h OK")
    for tag, command in [("i", "SELECT INBOX"), ("j", "FETCH 1 BODY[]"),
                         ("k", "UID FETCH 1:* FLAGS"), ("l", "STORE 1 +FLAGS (\\Seen)"),
                         ("m", "UID SEARCH SEEN"),
                         ("n", "COPY 1 Work"), ("o", "UID MOVE 1 Work"), ("p", "NOOP"),
                         ("q", "EXPUNGE"), ("r", "RENAME Work Play"), ("s", "CLOSE"),
                         ("t", "DELETE Play")]:
        assert c.cmd(tag, command)[-1].startswith(tag.encode() + b" OK"), command
    c.cmd("u", "FROB")
    c.cmd("v", "LOGOUT")
    c.close()


def managesieve_traffic(port: int) -> None:
    c = SieveClient(port)
    assert c.login("max", "wrong")[0].startswith(b"NO")
    assert c.login("max", "s3cret-pass")[0].startswith(b"OK")
    for command in ('PUTSCRIPT "s" "keep;"', "LISTSCRIPTS", 'SETACTIVE "s"', 'GETSCRIPT "s"',
                    'SETACTIVE ""', 'DELETESCRIPT "s"', "LOGOUT"):
        assert c.cmd(command)[-1].startswith(b"OK"), command
    c.close()


def test_served_metrics_are_the_documented_ones(tmp_path):
    """Every metric of a running server, after IMAP (RFC 3501), LMTP (RFC 2033) and SMTP
    (RFC 5321) traffic, is in docs/metrics.md with its type and labels, every documented one
    is served, and every label value is from the documented set."""
    doc = documented()
    assert len(doc) >= 20 and all(kind in ("counter", "gauge", "histogram")
                                  for kind, _ in doc.values()), doc
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("max", "s3cret-pass"))
    conf = tmp_path / "c.conf"
    conf.write_text("[store]\nsynchronous = NORMAL\n[delivery]\ndomains = localhost\n")
    with ServerProcess(data_dir, "--metrics-port", "auto", "--lmtp-port", "auto",
                       "--smtp-port", "auto", "--sieve-port", "auto",
                       config=str(conf)) as server:
        before = scrape(server.ports["metrics"])
        imap_traffic(server.port)
        managesieve_traffic(server.ports["managesieve"])
        with smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=10) as lmtp:
            rcpt, answers = lmtp_send(lmtp, "x@example.org",
                                      ["max@localhost", "nobody@localhost", "a@elsewhere.example"],
                                      message(2))
        assert [code for code, _ in rcpt] == [250, 550, 550] and answers[0][0] == 250
        with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as smtp:
            smtp.sendmail("y@example.org", ["max@localhost"], message(3))
        # The server counts a transaction when it ends: poll for the SMTP one.
        for _ in range(100):
            after = scrape(server.ports["metrics"])
            if value(after, "hbaseimap_deliveries_total", protocol="smtp", outcome="delivered"):
                break
    metrics = served(after)
    assert set(metrics) == set(doc), (set(metrics) ^ set(doc))
    for name, (kind, samples) in metrics.items():
        doc_kind, doc_labels = doc[name]
        assert kind == doc_kind, name
        for sample in samples:
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            assert set(labels) == set(doc_labels), (name, labels)
            for label, text in labels.items():
                assert text in doc_labels[label], f"{name}{{{label}={text!r}}} not documented"

    def moved(name, **labels):
        return value(after, name, **labels) - value(before, name, **labels)
    p = "hbaseimap_"
    assert moved(p + "imap_commands_total", command="LOGIN", outcome="NO") == 1
    assert moved(p + "imap_commands_total", command="LOGIN", outcome="OK") == 1
    assert moved(p + "imap_commands_total", command="unknown", outcome="BAD") == 1
    assert moved(p + "imap_commands_total", command="UID FETCH", outcome="OK") == 1
    assert moved(p + "imap_command_seconds_count", command="FETCH") == 1
    assert moved(p + "imap_connections_total") == 1
    assert moved(p + "imap_logins_total", outcome="failed") == 1
    assert moved(p + "deliveries_total", protocol="lmtp", outcome="delivered") == 1
    assert moved(p + "deliveries_total", protocol="smtp", outcome="delivered") == 1
    assert moved(p + "rejected_recipients_total", protocol="lmtp", reason="unknown_user") == 1
    assert moved(p + "rejected_recipients_total", protocol="lmtp", reason="foreign_domain") == 1
    assert moved(p + "managesieve_commands_total", command="PUTSCRIPT", outcome="OK") == 1
    assert moved(p + "managesieve_logins_total", outcome="failed") == 1
    assert moved(p + "managesieve_connections_total") == 1
    assert moved(p + "received_bytes_total", protocol="managesieve") > 0
    for protocol in ("imap", "lmtp", "smtp"):
        assert moved(p + "received_bytes_total", protocol=protocol) > len(message(1))
        assert moved(p + "sent_bytes_total", protocol=protocol) > 0
    operations = {s.labels["operation"] for s in metrics[p + "store_call_seconds"][1]}
    assert operations >= {"authenticate", "open_mailbox", "append", "fetch", "store_flags",
                          "search", "copy", "move", "expunge", "create_mailbox",
                          "delete_mailbox", "rename_mailbox", "list_mailboxes",
                          "mailbox_status", "subscribe", "unsubscribe", "resolve_recipient",
                          "deliver", "sieve_scripts"}, operations
    assert "other" not in operations  # every store call this traffic made has its name


def test_documented_label_sets_match_the_code():
    """The doc's value lists are the code's: every IMAP command (RFC 3501 6) and UID
    sub-command (6.4.8), every store operation, every RCPT refusal reason."""
    from imapserver.delivery import replies
    from imapserver.imap.context import known_commands
    doc = documented()
    commands = doc["hbaseimap_imap_commands_total"][1]["command"]
    expected = ({c for c in known_commands() if c != "UID"} | {"unknown"}
                | {f"UID {c}" for c in observe.UID_COMMANDS})
    assert commands == expected
    assert doc["hbaseimap_imap_command_seconds"][1]["command"] == expected - {"IDLE"}
    from imapserver.managesieve import protocol  # noqa: F401  (registers the commands)
    from imapserver.managesieve.context import known_commands as sieve_commands
    sieve = set(sieve_commands()) | {"unknown"}
    assert doc["hbaseimap_managesieve_commands_total"][1]["command"] == sieve
    assert doc["hbaseimap_managesieve_command_seconds"][1]["command"] == sieve
    assert doc["hbaseimap_store_call_seconds"][1]["operation"] == set(observe.STORE_OPERATIONS)
    assert doc["hbaseimap_store_errors_total"][1]["operation"] == set(observe.STORE_OPERATIONS)
    rcpt_replies = [replies.MALFORMED_RCPT, replies.UNKNOWN_USER, replies.FOREIGN_DOMAIN,
                    replies.TOO_MANY_RCPTS, replies.TRY_AGAIN,
                    replies.over_quota("a@b", "452"), replies.over_quota("a@b", "552")]
    reasons = doc["hbaseimap_rejected_recipients_total"][1]["reason"]
    assert {replies.reason(r) for r in rcpt_replies} | {"other"} == reasons


def test_every_named_store_call_of_a_command_has_an_operation():
    """Store calls made with a named function (not a command's own closure) map to one of
    the documented operations, never to "other"."""
    from imapserver.imap.context import _OPERATION_OF_FUNCTION
    names = set()
    for path in (ROOT / "imapserver" / "imap" / "commands").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "call" and node.args):
                target = node.args[0]
                name = target.attr if isinstance(target, ast.Attribute) else target.id
                if name != "run":
                    names.add(name)
    assert names and names <= set(_OPERATION_OF_FUNCTION), names - set(_OPERATION_OF_FUNCTION)
    assert set(_OPERATION_OF_FUNCTION.values()) <= set(observe.STORE_OPERATIONS)


@pytest.mark.parametrize("error, label", [("unavailable", "unavailable"),
                                          ("bug", "internal"), ("answer", None)])
def test_backend_errors_are_counted_per_operation(error, label):
    """A store call that fails in the backend counts in store_errors_total by operation; a
    domain answer (not found) does not."""
    from prometheus_client import REGISTRY

    from mailstore.errors import BackendUnavailable, NotFound
    raised = {"unavailable": BackendUnavailable("down"), "bug": KeyError("x"),
              "answer": NotFound("no")}[error]

    def fail():
        raise raised

    def count(kind):
        return REGISTRY.get_sample_value("hbaseimap_store_errors_total",
                                         {"operation": "deliver", "error": kind}) or 0
    before = {k: count(k) for k in ("unavailable", "internal")}
    with pytest.raises(type(raised)):
        observe.timed_store_call("deliver", fail)
    for kind in ("unavailable", "internal"):
        assert count(kind) - before[kind] == (1 if kind == label else 0)


def test_an_exception_aiosmtpd_catches_counts_as_an_error():
    """aiosmtpd answers an exception from a hook with "500 Error" (RFC 5321 4.2.2) and logs
    it: a bug of ours, counted in errors_total like the others."""
    import logging

    from prometheus_client import REGISTRY

    def count():
        return REGISTRY.get_sample_value("hbaseimap_errors_total",
                                         {"component": "aiosmtpd"}) or 0
    before = count()
    record = logging.LogRecord("mail.log", logging.ERROR, __file__, 1,
                               "%r SMTP session exception", (("127.0.0.1", 1),), None)
    observe._ToTwisted().emit(record)
    assert count() - before == 1
