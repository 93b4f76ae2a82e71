"""The log as an operator reads it: one line per delivery and per IMAP session, plain JSON
lines (or one readable text line per event), aiosmtpd's protocol trace at debug level only,
and never a password or a message's content.

A real server runs the traffic: an IMAP session that fails a LOGIN, logs in, appends and
fetches a message and logs out; one that authenticates with SASL PLAIN and drops the
connection; an LMTP delivery to a good and an unknown recipient; an SMTP transaction whose only
recipient is refused and that the client ends with QUIT.  docs/logs.md lists the events.
"""

from __future__ import annotations

import base64
import json
import re
import smtplib
import time
from pathlib import Path

import pytest

from tests.deliveryserver import lmtp_send
from tests.imapproc import Client, ServerProcess, make_users
from tests.mailgen import message

PASSWORD = "s3cret-Pass-42"
WRONG = "wrong-Guess-17"
SASL_PASSWORD = "sasl-Secret-99"
BODY_SECRET = b"TOP-SECRET-BODY-LINE"
APPEND_SECRET = b"APPENDED-SECRET-LINE"
SECRETS = [PASSWORD, WRONG, SASL_PASSWORD, BODY_SECRET.decode(), APPEND_SECRET.decode(),
           base64.b64encode(b"\0bob\0" + SASL_PASSWORD.encode()).decode()]
TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def run_traffic(tmp_path: Path, fmt: str, level: str = "info") -> tuple[str, str]:
    """Run the traffic against a server logging ``fmt`` at ``level``: (log text, queue id
    of the LMTP delivery as its reply gave it)."""
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("max", PASSWORD), ("bob", SASL_PASSWORD))
    log_file = tmp_path / "server.log"
    conf = tmp_path / "c.conf"
    conf.write_text(f"[log]\nformat = {fmt}\nfile = {log_file}\nlevel = {level}\n"
                    "[store]\nsynchronous = NORMAL\n")
    with ServerProcess(data_dir, "--lmtp-port", "auto", "--smtp-port", "auto",
                       config=str(conf)) as server:
        c = Client(server.port)
        assert b"NO" in c.cmd("a", f"LOGIN max {WRONG}")[-1]
        assert c.cmd("b", f"LOGIN max {PASSWORD}")[-1].startswith(b"b OK")
        data = message(1, body=APPEND_SECRET + b"\r\n")
        c.send(b"c APPEND INBOX {%d+}\r\n" % len(data) + data + b"\r\n")
        assert c.until_tagged("c")[-1].startswith(b"c OK")
        c.cmd("d", "SELECT INBOX")
        assert APPEND_SECRET in b"\r\n".join(c.cmd("e", "FETCH 1 BODY[]"))
        c.cmd("f", "LOGOUT")
        c.close()

        c = Client(server.port)
        plain = base64.b64encode(b"\0bob\0" + SASL_PASSWORD.encode()).decode()
        assert c.cmd("a", f"AUTHENTICATE PLAIN {plain}")[-1].startswith(b"a OK")
        c.close()  # no LOGOUT: the client just goes
        wait_for_line(log_file, "client_closed")  # before the next session's lines
        staying = Client(server.port)  # open until the server stops
        assert staying.cmd("a", f"LOGIN max {PASSWORD}")[-1].startswith(b"a OK")

        with smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=10) as lmtp:
            rcpt, answers = lmtp_send(lmtp, "sender@example.org",
                                      ["max@localhost", "nobody@localhost"],
                                      message(2, body=BODY_SECRET + b"\r\n"))
        assert [code for code, _ in rcpt] == [250, 550]
        assert answers[0][0] == 250
        queue_id = answers[0][1].decode().rsplit(" ", 1)[1]

        with smtplib.SMTP("127.0.0.1", server.ports["smtp"], timeout=10) as smtp:
            smtp.ehlo("client.example")
            smtp.mail("other@example.org")
            assert smtp.rcpt("ghost@localhost")[0] == 550
        # Stopping the server ends the last session, and writes its line.
    staying.close()
    return log_file.read_text(encoding="utf-8"), queue_id


def wait_for_line(log_file: Path, text: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in log_file.read_text(encoding="utf-8"):
        assert time.monotonic() < deadline, f"no {text!r} in the log"
        time.sleep(0.02)


def assert_no_secrets(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret!r} is in the log"


@pytest.mark.parametrize("level", ["info", "debug"])
def test_json_log_is_one_object_per_line_per_delivery_and_session(tmp_path, level):
    """RFC 5321 3.3 / RFC 2033 4.2: one ``delivery`` line per mail transaction naming every
    recipient with the reply it got (LMTP: one per recipient); one ``session`` line per IMAP
    connection at its end.  JSON lines (RFC 8259 texts, one per line, no RFC 7464 record
    separators).  No password of LOGIN (RFC 3501 6.2.3) or SASL PLAIN (RFC 4616 2), and no
    message content, at the default level or even at debug."""
    text, queue_id = run_traffic(tmp_path, "json", level)
    assert "\x1e" not in text
    records = [json.loads(line) for line in text.splitlines()]
    assert records
    for record in records:
        assert list(record)[:4] == ["ts", "level", "component", "event"], record
        assert TS.fullmatch(record["ts"]), record
        assert record["level"] in ("debug", "info", "warn", "error")
        assert not any(k.startswith("log_") or k == "__class_uuid__" for k in record), record
    assert_no_secrets(text)
    ours = [r for r in records if r["level"] != "debug"]
    assert {r["component"] for r in ours} <= {"imap", "lmtp", "smtp", "twisted"}, ours
    chatter = [r for r in records if r["component"] == "aiosmtpd"]
    if level == "info":
        assert not chatter
    else:  # there, at debug level only
        assert chatter and {r["level"] for r in chatter} == {"debug"}

    deliveries = [r for r in records if r["event"] == "delivery"]
    assert [r["component"] for r in deliveries] == ["lmtp", "smtp"], deliveries
    lmtp = deliveries[0]
    assert lmtp["level"] == "info"
    assert lmtp["queue_id"] == queue_id
    assert lmtp["sender"] == "sender@example.org"
    assert lmtp["remote"] == "127.0.0.1"
    assert lmtp["recipients"] == [
        {"address": "max@localhost", "result": "delivered", "code": "250 2.0.0",
         "user": "max", "mailbox": "INBOX"},
        {"address": "nobody@localhost", "result": "rejected", "code": "550 5.1.1"}]
    assert lmtp["size"] == len(message(2, body=BODY_SECRET + b"\r\n"))
    assert isinstance(lmtp["seconds"], float) and 0 <= lmtp["seconds"] < 30
    smtp = deliveries[1]  # refused at RCPT, ended by QUIT: still its line
    assert smtp["queue_id"] is None and smtp["size"] is None
    assert smtp["helo"] == "client.example"
    assert smtp["recipients"] == [{"address": "ghost@localhost", "result": "rejected",
                                   "code": "550 5.1.1"}]

    sessions = [r for r in records if r["event"] == "session"]
    assert [(s["user"], s["end"]) for s in sessions] == [
        ("max", "logout"), ("bob", "client_closed"), ("max", "shutdown")], sessions
    first = sessions[0]
    assert first["component"] == "imap" and first["remote"] == "127.0.0.1"
    assert first["commands"] == 6 and first["tls"] is False
    assert first["bytes_in"] > len(message(1)) and first["bytes_out"] > len(message(1))
    assert 0 <= first["seconds"] < 30
    logins = [(r["event"], r["user"]) for r in records if r["event"].startswith("login")]
    assert logins == [("login_failed", "max"), ("login", "max"), ("login", "bob"),
                      ("login", "max")]


def test_text_log_is_one_readable_line_per_event(tmp_path):
    """The same events in ``format = text``: ``ts level component event key=value ...``, one
    line each (RFC 5321 3.3: one per transaction), no aiosmtpd trace, no secrets."""
    text, queue_id = run_traffic(tmp_path, "text")
    lines = text.splitlines()
    line_re = re.compile(r"(\S+) (debug|info|warn|error) (\S+) (\S+)( .*)?")
    for line in lines:
        m = line_re.fullmatch(line)
        assert m and TS.fullmatch(m.group(1)), line
        assert m.group(3) != "aiosmtpd", line
    assert_no_secrets(text)
    deliveries = [line for line in lines if " lmtp delivery " in line]
    assert len(deliveries) == 1, lines
    assert f"queue_id={queue_id} " in deliveries[0]
    assert "sender=sender@example.org " in deliveries[0]
    assert '"result":"rejected","code":"550 5.1.1"' in deliveries[0]
    assert len([line for line in lines if " smtp delivery " in line]) == 1
    sessions = [line for line in lines if " imap session " in line]
    assert len(sessions) == 3, lines
    assert re.search(r" user=max remote=127\.0\.0\.1 .*commands=6 .*bytes_in=\d+ "
                     r"bytes_out=\d+ end=logout$", sessions[0]), sessions[0]
    assert sessions[1].endswith(" end=client_closed")
    assert sessions[2].endswith(" end=shutdown")
    assert not any("Connection lost" in line or "connection lost" in line for line in lines)


def test_transactions_without_a_reply_from_the_store_are_logged_too(tmp_path):
    """RFC 5321 3.3: a transaction ends at the reply to DATA, or at RSET, or when the
    connection goes.  A message refused by size (552 5.3.4, RFC 3463) is logged with its
    recipients ``failed``; recipients of a transaction cut off before DATA ``abandoned``."""
    data_dir = str(tmp_path / "store")
    make_users(data_dir, ("max", PASSWORD))
    log_file = tmp_path / "server.log"
    conf = tmp_path / "c.conf"
    conf.write_text(f"[log]\nformat = json\nfile = {log_file}\n"
                    "[store]\nsynchronous = NORMAL\nmax_message_size = 2000\n")
    with ServerProcess(data_dir, "--lmtp-port", "auto", config=str(conf)) as server:
        with smtplib.LMTP("127.0.0.1", server.ports["lmtp"], timeout=10) as lmtp:
            lmtp.ehlo_or_helo_if_needed()
            lmtp.mail("big@example.org")
            assert lmtp.rcpt("max@localhost")[0] == 250
            code, text = lmtp.data(message(3, size=5000, body=(BODY_SECRET + b"\r\n") * 300))
            assert (code, text[:5]) == (552, b"5.3.4")
            lmtp.mail("gone@example.org")
            assert lmtp.rcpt("max@localhost")[0] == 250
            lmtp.sock.close()  # cut off before DATA
            lmtp.sock = None
    records = [json.loads(line) for line in log_file.read_text().splitlines()]
    deliveries = [r for r in records if r["event"] == "delivery"]
    assert [(d["sender"], d["recipients"][0]["result"], d["recipients"][0]["code"])
            for d in deliveries] == [("big@example.org", "failed", "552 5.3.4"),
                                     ("gone@example.org", "abandoned", None)], deliveries
    assert deliveries[0]["level"] == "warn"
    assert_no_secrets(log_file.read_text())


@pytest.mark.parametrize("render", ["json", "text"])
def test_a_client_s_bytes_that_are_not_utf8_do_not_cost_the_line(render):
    """RFC 6531 3.3 allows UTF-8 in addresses, and nothing else: aiosmtpd hands other bytes
    on as lone surrogates, which a UTF-8 (or ASCII) stream refuses.  The line is written all
    the same, the bytes as backslash escapes, and JSON still parses."""
    import io

    from twisted.logger import LogLevel

    from imapserver.observe import LineObserver, json_line, text_line
    for encoding in ("utf-8", "ascii"):
        raw = io.BytesIO()
        stream = io.TextIOWrapper(raw, encoding=encoding, write_through=True)
        observer = LineObserver(stream, json_line if render == "json" else text_line)
        observer({"log_time": time.time(), "log_level": LogLevel.info,
                  "log_namespace": "lmtp", "event": "delivery",
                  "event_fields": ("helo", "sender"), "helo": "h\udcffost",
                  "sender": "j\u00fcrgen@example.org"})
        line = raw.getvalue().decode(encoding)
        assert line.endswith("\n") and line.count("\n") == 1, line
        if render == "json":
            record = json.loads(line)
            assert record["helo"] == "h\udcffost"
            assert record["sender"] == "j\u00fcrgen@example.org"
        else:
            assert " helo=\"h\\udcffost\" " in line, line
