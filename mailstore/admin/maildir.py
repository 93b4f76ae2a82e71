"""Maildir and Maildir++ trees, read and written one message file at a time.

Layout (Maildir++ as Courier and Dovecot use it): the root directory is INBOX, with ``cur``,
``new`` and ``tmp``; every other folder is a directory ``.A.B`` beside them, standing for the
mailbox ``A/B``.  Folder names are modified UTF-7 (RFC 3501 5.1.3), and a ``.`` inside a level
is written ``&AC4-`` so it cannot be taken for the hierarchy separator.

Flags come from the ``:2,`` suffix of a file name: D Draft, F Flagged, P Passed ($Forwarded),
R Replied (Answered), S Seen, T Trashed (Deleted); lower-case letters are keywords, named by
the folder's ``dovecot-keywords`` file as Dovecot writes it.  Messages in ``new`` have no flags.
The internal date is the file's modification time.  Message files are copied byte for byte.
"""

from __future__ import annotations

import base64
import os
import re
import socket
from collections.abc import Iterator
from dataclasses import dataclass

FLAG_LETTERS = {"D": "\\Draft", "F": "\\Flagged", "P": "$Forwarded", "R": "\\Answered",
                "S": "\\Seen", "T": "\\Deleted"}
LETTER_OF = {flag: letter for letter, flag in FLAG_LETTERS.items()}
KEYWORDS_FILE = "dovecot-keywords"
_HOST = re.sub(r"[/:]", "_", socket.gethostname()) or "localhost"


# -- modified UTF-7 (RFC 3501 5.1.3) -----------------------------------------------------------

def decode_mutf7(text: str) -> str:
    """Modified UTF-7 to text; a malformed ``&...-`` run is kept as it is."""
    def shifted(m: re.Match) -> str:
        run = m.group(1)
        if not run:
            return "&"
        data = run.replace(",", "/")
        try:
            return base64.b64decode(data + "=" * (-len(data) % 4)).decode("utf-16-be")
        except (ValueError, UnicodeDecodeError):
            return m.group(0)
    return re.sub(r"&([A-Za-z0-9+,]*)-", shifted, text)


def encode_mutf7(text: str, extra: str = "") -> str:
    """Text to modified UTF-7; characters in ``extra`` are encoded too (e.g. ``.``)."""
    out, run = [], []

    def flush() -> None:
        if run:
            data = base64.b64encode("".join(run).encode("utf-16-be")).decode()
            out.append("&" + data.rstrip("=").replace("/", ",") + "-")
            run.clear()
    for ch in text:
        if 0x20 <= ord(ch) <= 0x7E and ch not in extra:
            flush()
            out.append("&-" if ch == "&" else ch)
        else:
            run.append(ch)
    flush()
    return "".join(out)


def folder_to_mailbox(dirname: str) -> str:
    """``.A.B`` to ``A/B``."""
    return "/".join(decode_mutf7(level) for level in dirname[1:].split("."))


def mailbox_to_folder(name: str) -> str:
    """``A/B`` to ``.A.B`` (INBOX is the root and has no folder)."""
    return "." + ".".join(encode_mutf7(level, extra=".") for level in name.split("/"))


# -- reading ------------------------------------------------------------------------------------

def is_maildir(path: str) -> bool:
    return os.path.isdir(os.path.join(path, "cur")) or os.path.isdir(os.path.join(path, "new"))


def folders(root: str) -> list[tuple[str, str]]:
    """(mailbox name relative to the root, directory) of every folder; the root's name is ""."""
    found = [("", root)] if is_maildir(root) else []
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if entry.startswith(".") and entry not in (".", "..") and len(entry) > 1 \
                and os.path.isdir(path) and is_maildir(path):
            found.append((folder_to_mailbox(entry), path))
    return found


@dataclass
class MaildirMessage:
    path: str
    size: int
    flags: set[str]
    internal_date: float


def read_keywords(folder: str) -> dict[str, str]:
    """Letter -> keyword from a ``dovecot-keywords`` file (``0 name`` per line)."""
    letters = {}
    try:
        with open(os.path.join(folder, KEYWORDS_FILE), encoding="utf-8") as f:
            for line in f:
                index, _, name = line.strip().partition(" ")
                if index.isdigit() and int(index) < 26 and name:
                    letters[chr(ord("a") + int(index))] = name
    except FileNotFoundError:
        pass
    return letters


def flags_of(filename: str, keywords: dict[str, str]) -> set[str]:
    """The flags in a file name's ``:2,`` (or Dovecot's ``!2,`` / ``;2,``) info suffix."""
    for sep in (":2,", "!2,", ";2,"):
        if sep in filename:
            letters = filename.rsplit(sep, 1)[1]
            return {FLAG_LETTERS.get(c) or keywords.get(c) for c in letters} - {None}
    return set()


def message_names(folder: str) -> list[tuple[str, str]]:
    """(subdirectory, file name) of the folder's messages, ``new`` then ``cur``, each sorted by
    name (names start with the delivery time, so this is about the order they arrived)."""
    out = []
    for sub in ("new", "cur"):
        try:
            names = sorted(n for n in os.listdir(os.path.join(folder, sub))
                           if not n.startswith("."))
        except FileNotFoundError:
            continue
        out.extend((sub, n) for n in names)
    return out


def read_folder(folder: str) -> Iterator[MaildirMessage | tuple[str, OSError]]:
    """The folder's messages; a file that cannot be read comes as (path, error)."""
    keywords = read_keywords(folder)
    for sub, name in message_names(folder):
        path = os.path.join(folder, sub, name)
        try:
            st = os.stat(path)
        except OSError as exc:
            yield path, exc
            continue
        flags = flags_of(name, keywords) if sub == "cur" else set()
        yield MaildirMessage(path, st.st_size, flags, float(int(st.st_mtime)))


def folder_size(folder: str) -> int:
    """Bytes of the messages in one folder (``new`` and ``cur``), for progress."""
    total = 0
    for sub in ("new", "cur"):
        try:
            with os.scandir(os.path.join(folder, sub)) as it:
                for entry in it:
                    if not entry.name.startswith("."):
                        try:
                            total += entry.stat().st_size
                        except OSError:
                            pass
        except FileNotFoundError:
            continue
    return total


# -- writing ------------------------------------------------------------------------------------

class MaildirWriter:
    """Write one folder: each message goes to ``tmp`` and is renamed into ``cur``."""

    def __init__(self, folder: str):
        self.folder = folder
        for sub in ("cur", "new", "tmp"):
            os.makedirs(os.path.join(folder, sub), exist_ok=True)
        self.keywords: list[str] = []

    def info(self, flags) -> str:
        letters = sorted(LETTER_OF[f] for f in flags if f in LETTER_OF)
        for flag in sorted(f for f in flags if f not in LETTER_OF and not f.startswith("\\")):
            if flag not in self.keywords and len(self.keywords) < 26:
                self.keywords.append(flag)
            if flag in self.keywords:
                letters.append(chr(ord("a") + self.keywords.index(flag)))
        return ":2," + "".join(sorted(letters))

    def write(self, reader, flags, internal_date: float, unique: str) -> str:
        """Copy one message from ``reader``; ``unique`` makes the file name unique in the
        folder.  Returns the path written."""
        base = f"{int(internal_date)}.{unique}.{_HOST}"
        tmp = os.path.join(self.folder, "tmp", base)
        with open(tmp, "wb") as out:
            while True:
                block = reader.read(256 * 1024)
                if not block:
                    break
                out.write(block)
        path = os.path.join(self.folder, "cur", base + self.info(flags))
        os.utime(tmp, (internal_date, internal_date))
        os.rename(tmp, path)
        return path

    def close(self) -> None:
        if self.keywords:
            with open(os.path.join(self.folder, KEYWORDS_FILE), "w", encoding="utf-8") as f:
                f.writelines(f"{i} {name}\n" for i, name in enumerate(self.keywords))
