"""Finding Debian's daemons where Debian puts them.

An ordinary user's PATH (``/usr/local/bin:/usr/bin:/bin``) has no ``sbin``, but Debian installs
server binaries there (``/usr/sbin/dovecot``) or in a package directory of their own
(``/usr/lib/dovecot``).  Tests and benches that start such a daemon look it up here, so that
``make test`` works for a newcomer whose PATH is the ordinary one.
"""

from __future__ import annotations

import os
import shutil

DAEMON_DIRS = ("/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/lib/dovecot")


def find_daemon(name: str) -> str:
    """The path of the executable ``name``: from PATH, else from Debian's daemon directories.

    Raises FileNotFoundError naming every place looked in, so a missing package is obvious.
    """
    found = shutil.which(name)
    if found:
        return found
    found = shutil.which(name, path=os.pathsep.join(DAEMON_DIRS))
    if found:
        return found
    raise FileNotFoundError(f"{name}: not on PATH nor in {', '.join(DAEMON_DIRS)} "
                            f"(is its Debian package installed?)")
