"""Run a Sieve script on a message with Pigeonhole's ``sieve-test`` and with ours, and reduce
both results to the same normal form (tests/test_sieve_differential.py, docs/sieve.md).

The normal form: ``stores`` (mailbox and lower-cased flags, implicit keep included, sorted),
``discard``, ``reject`` (text, line breaks shown as ``?`` as sieve-test prints them),
``redirects`` (sorted), ``vacation`` (None, or the reply's seconds and reason), ``failed``
(a runtime error: both sides then keep into INBOX).  With ``execute=True`` Pigeonhole runs
the actions (``sieve-test -e``), which is where it decides whether a vacation reply goes out;
the form then has ``vacation_sent`` and the reply's fields.
"""

from __future__ import annotations

import email.header
import email.utils
import os
import pwd
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from mailstore.sieve import Envelope, Environment, run
from mailstore.sieve.actions import Discard, Redirect, Reject, Store, Vacation
from mailstore.sieve.vacation import build_reply

SIEVE_TEST = "/usr/bin/sieve-test"
EXTENSIONS = "+vacation-seconds +editheader +mboxmetadata +servermetadata"
USER_ADDRESSES = ["user@example.com"]


class PigeonholeRunner:
    """sieve-test with a throw-away configuration and mail directory per run.  As root,
    Dovecot refuses to touch mail as uid 0, so runs are made as ``nobody``."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="sievetest-"))
        os.chmod(self.dir, 0o755)
        if os.getuid() == 0:
            nobody = pwd.getpwnam("nobody")
            self.uid, self.gid = nobody.pw_uid, nobody.pw_gid
        else:
            self.uid, self.gid = os.getuid(), os.getgid()
        self.count = 0

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def _config(self, run_dir: Path) -> Path:
        conf = run_dir / "dovecot.conf"
        conf.write_text(
            f"mail_uid = {self.uid}\nmail_gid = {self.gid}\nfirst_valid_uid = 0\n"
            f"first_valid_gid = 0\n"
            f"mail_location = maildir:{run_dir}/mail:LAYOUT=fs\n"
            f"mail_home = {run_dir}/home\n"
            f"mail_attribute_dict = file:{run_dir}/home/attributes\n"
            "namespace inbox {\n  inbox = yes\n  separator = /\n}\n"
            f"plugin {{\n  sieve_extensions = {EXTENSIONS}\n"
            f"  sieve = file:{run_dir}/sieve;active={run_dir}/active.sieve\n}}\n")
        return conf

    def run(self, script: str, message: bytes, envelope: tuple[str, str],
            execute: bool = False) -> str:
        self.count += 1
        run_dir = self.dir / f"run{self.count}"
        (run_dir / "home").mkdir(parents=True)
        (run_dir / "sieve").mkdir()
        (run_dir / "script.sieve").write_text(script, encoding="utf-8")
        (run_dir / "message.eml").write_bytes(message)
        conf = self._config(run_dir)
        for path in [run_dir, *run_dir.rglob("*")]:
            os.chown(path, self.uid, self.gid)
        sender, recipient = envelope
        args = [SIEVE_TEST, "-c", str(conf), "-f", sender, "-r", recipient,
                "-a", recipient]
        if execute:
            args.append("-e")
        args += [str(run_dir / "script.sieve"), str(run_dir / "message.eml")]
        done = subprocess.run(args, capture_output=True, timeout=30,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(run_dir / "home")})
        shutil.rmtree(run_dir, ignore_errors=True)
        return done.stdout.decode("utf-8", "replace") + done.stderr.decode("utf-8", "replace")


def _empty() -> dict:
    return {"stores": [], "discard": False, "reject": None, "redirects": [],
            "vacation": None, "failed": False}


def _merge_stores(stores: list[tuple[str, list[str]]]) -> list:
    merged: dict[str, set[str]] = {}
    for mailbox, flags in stores:
        key = "INBOX" if mailbox.upper() == "INBOX" else mailbox
        merged.setdefault(key, set()).update(f.lower() for f in flags)
    return sorted((m, sorted(f)) for m, f in merged.items())


def normalise_pigeonhole(output: str) -> dict:
    """The normal form of a dry run's (no ``-e``) output."""
    form = _empty()
    stores: list[tuple[str, list[str]]] = []
    current = None
    lines = output.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("* store message in folder: "):
            current = [stripped[len("* store message in folder: "):], []]
            stores.append(current)
        elif stripped.startswith("+ add IMAP flags: ") and current is not None:
            current[1].extend(stripped[len("+ add IMAP flags: "):].split())
        elif stripped == "* discard":
            form["discard"] = True
        elif stripped.startswith("* reject message with reason: "):
            form["reject"] = stripped[len("* reject message with reason: "):]
        elif stripped.startswith("* redirect message to: "):
            form["redirects"].append(stripped[len("* redirect message to: "):].strip("<>"))
        elif stripped == "* send vacation message:":
            seconds, reason = None, []
            i += 1
            while i < len(lines) and lines[i].strip() != "END MESSAGE":
                found = re.match(r"\s*=> seconds : (\d+)", lines[i])
                if found:
                    seconds = int(found.group(1))
                if lines[i].strip() == "START MESSAGE":
                    i += 1
                    while i < len(lines) and lines[i].strip() != "END MESSAGE":
                        reason.append(lines[i])
                        i += 1
                    break
                i += 1
            form["vacation"] = {"seconds": seconds, "reason": "\n".join(reason).strip()}
        elif "final result: failed" in line or "Fatal:" in line:
            form["failed"] = True
        i += 1
    # A failed run (at compile or run time) keeps the message into INBOX, as ours does
    # ("final result: failed; resolved with successful implicit keep").
    form["stores"] = [("INBOX", [])] if form["failed"] else _merge_stores(stores)
    form["redirects"].sort()
    return form


def vacation_pigeonhole(output: str) -> dict:
    """Whether ``sieve-test -e`` sent a vacation reply, and its header fields (it prints the
    reply on stdout, which :meth:`PigeonholeRunner.run` puts first)."""
    sent = "sent vacation response" in output
    return {"vacation_sent": sent, "reply": _reply_fields(output) if sent else {}}


def _reply_fields(text: str) -> dict:
    """The fields compared, with addresses reduced to addr-specs and subjects decoded."""
    fields = {}
    for line in re.split(r"\r?\n", text):
        if not line.strip():
            break
        name, _, value = line.partition(":")
        name = name.lower()
        value = value.strip()
        if name in ("to", "from"):
            value = email.utils.parseaddr(value)[1]
        elif name == "subject":
            value = str(email.header.make_header(email.header.decode_header(value)))
        if name in ("to", "subject", "from", "in-reply-to", "references", "auto-submitted"):
            fields[name] = value
    return fields


def run_ours(script: str, message: bytes, envelope: tuple[str, str], now: float | None = None):
    env = Environment(user="user", user_addresses=USER_ADDRESSES,
                      mailbox_exists=lambda name: name.upper() == "INBOX",
                      hostname="test.example.com")
    if now is not None:
        env.now = now
    return run(script, message, Envelope(envelope[0], envelope[1]), env)


def normalise_ours(result) -> dict:
    form = _empty()
    if result.error is not None:
        form["failed"] = True
    stores = []
    for action in result.actions:
        if isinstance(action, Store):
            stores.append((action.mailbox, list(action.flags)))
        elif isinstance(action, Discard):
            form["discard"] = True
        elif isinstance(action, Reject):
            form["reject"] = re.sub(r"[\r\n]", "?", action.reason)
        elif isinstance(action, Redirect):
            form["redirects"].append(action.address)
        elif isinstance(action, Vacation):
            form["vacation"] = {"seconds": action.seconds, "reason": action.reason.strip()}
    form["stores"] = _merge_stores(stores)
    form["redirects"].sort()
    return form


def vacation_ours(result) -> dict:
    reply = next((a for a in result.actions if isinstance(a, Vacation)), None)
    if reply is None:
        return {"vacation_sent": False, "reply": {}}
    raw = build_reply(reply, "test.example.com").decode("utf-8")
    return {"vacation_sent": True, "reply": _reply_fields(raw)}
