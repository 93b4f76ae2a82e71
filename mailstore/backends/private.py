"""The embedded store's files are private: every user's mail and password hash is in them.

What is created here is created owner-only whatever the process umask (directory 0700, database
0600), the way Dovecot creates mail files 0600; an umask of 022 would otherwise leave the whole
store readable by every account on the machine.  SQLite creates its write-ahead log (``-wal``),
shared-memory index (``-shm``) and rollback journal with the database file's own mode, whatever
the umask (``robust_open`` in its ``os_unix.c`` fchmods them to match), so a 0600 database gives
0600 companions.

What already exists is never chmod-ed behind the operator's back: a directory or file that the
group or others can reach is refused at open, with a message naming it and its mode, unless the
operator said so (``[store] allow_shared_permissions = yes``, for a deliberately group-shared
store).
"""

from __future__ import annotations

import os
import stat

from ..errors import SharedPermissions

DIR_MODE = 0o700
FILE_MODE = 0o600
# Files SQLite keeps beside the database (WAL mode; the journal only while changing modes).
COMPANIONS = ("-wal", "-shm", "-journal")


def private_dir(path: str, allow_shared: bool = False) -> None:
    """Create ``path`` (and missing parents) with the directory mode 0700, or check an existing
    one: :class:`SharedPermissions` if the group or others may reach it and ``allow_shared`` is
    false."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        # Made by the operator or by another process just now (which, being this code, made
        # it owner-only: the umask can only take bits away from 0700).
        _check(path, "store directory", allow_shared)
        return
    # mkdir's mode went through the umask; an odd umask (0277) may have taken the owner's own
    # bits too.  chmod does not consult the umask.
    os.chmod(path, DIR_MODE)


def private_file(path: str, allow_shared: bool = False) -> None:
    """Create the empty file ``path`` with mode 0600 if it is missing (SQLite takes an empty
    file as an empty database), else check it as :func:`private_dir` checks directories.  Also
    checks SQLite's companion files (``-wal``, ``-shm``, ``-journal``) that exist."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW, FILE_MODE)
    except FileExistsError:
        _check(path, "store file", allow_shared)
    else:
        # Closing this descriptor is harmless: the file is new, so no SQLite connection of this
        # process holds locks on it yet (POSIX locks die with any descriptor of the file).
        try:
            os.fchmod(fd, FILE_MODE)
        finally:
            os.close(fd)
    for suffix in COMPANIONS:
        try:
            _check(path + suffix, "store file", allow_shared)
        except FileNotFoundError:
            pass


def _check(path: str, what: str, allow_shared: bool) -> None:
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077 and not allow_shared:
        wanted = "700" if what.endswith("directory") else "600"
        raise SharedPermissions(
            f"{what} {path} is accessible to other users (mode {mode:04o}); it holds every "
            f"user's mail and password hash: chmod {wanted} {path}, or set "
            f"[store] allow_shared_permissions = yes to allow it")
