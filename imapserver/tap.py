"""``twistd imapserver``: the same server as the ``imapserver`` command, as a Twisted service.

    twistd -n --reactor=asyncio imapserver --data-dir data

The asyncio reactor is required because the SMTP/LMTP listeners (aiosmtpd) share its event
loop.  Options are those of the ``imapserver`` command (see ``imapserver --help``).

Under twistd the server is always one process: twistd owns it (daemonizing, pid file, signal
handling), so ``[server] workers`` and ``--workers`` are ignored here; run the ``imapserver``
command for one worker per core (imapserver.workers, docs/deploy.md).

A service that cannot start prints ``imapserver: cannot start: <why>``, stops what it had
started and raises :class:`StartError`: twistd then exits with a non-zero status (and, when
daemonizing, its parent reports the error) instead of running without listeners.
"""

from __future__ import annotations

import asyncio
import sys

from twisted.application import service
from twisted.python import usage

from .main import announce, build_parser, load_config, open_store


class Options(usage.Options):
    """Passes the command line through to imapserver's own argument parser."""

    def parseArgs(self, *args):
        self.args = list(args)

    def parseOptions(self, options=None):
        # Let argparse see everything, so the flags are exactly those of `imapserver`.
        self.args = list(options or [])
        try:
            build_parser().parse_args(self.args)
        except SystemExit as exc:
            raise usage.UsageError("bad imapserver options (see imapserver --help)") from exc


class StartError(Exception):
    """The service could not start (the message says why)."""


class ImapService(service.Service):
    def __init__(self, argv: list[str]):
        self.argv = argv
        self.store = None
        self.services: list = []

    def startService(self):
        from twisted.internet import reactor

        from .services import start_services
        super().startService()
        if not hasattr(reactor, "_asyncioEventloop"):
            raise RuntimeError("run twistd with --reactor=asyncio (aiosmtpd shares its loop)")
        from .memory import pin_malloc_threshold
        pin_malloc_threshold()
        try:
            cfg = load_config(build_parser().parse_args(self.argv))
            self.store = open_store(cfg)
            loop = reactor._asyncioEventloop
            asyncio.set_event_loop(loop)
            # start_services stops what it had started when a listener fails.
            self.services = start_services(self.store, cfg, reactor, loop, announce)
        except Exception as exc:  # a port in use, a bad certificate, an unusable store, ...
            message = f"imapserver: cannot start: {exc}"
            print(message, file=sys.stderr, flush=True)
            if self.store is not None:
                self.store.close()
                self.store = None
            raise StartError(message) from None

    def stopService(self):
        from twisted.internet import reactor

        from .services import stop_services
        super().stopService()
        d = stop_services(self.services, reactor, getattr(reactor, "_asyncioEventloop", None))
        d.addBoth(lambda _: self.store.close() if self.store else None)
        return d


def makeService(options: Options) -> service.IService:
    return ImapService(options.args)
