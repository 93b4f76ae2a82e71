"""The ``imapserver`` process: IMAP, SMTP and LMTP listeners over one mail store.

Twisted runs on its asyncio reactor so that the aiosmtpd listeners share the same event loop
and thread; the store is synchronous and is called from a thread pool (``deferToThread`` on the
IMAP side, ``asyncio.to_thread`` on the delivery side), so one slow HBase call never stalls the
other connections.

A process that cannot start (a port in use, a bad certificate, an unreachable HBase, a data
directory it cannot write) prints ``imapserver: cannot ...: <why>`` on stderr and exits at once
with status 1 (2 for a bad setting), having stopped whatever it had started.  SIGTERM and
SIGINT stop it gracefully once it runs, and end it at once before and after.

Each listener prints one line ``<name> listening on <host>:<port>`` once it is bound.  A port of
0 disables a listener (as in the config file); ``auto`` on the command line binds a port the kernel
chooses, and the printed line is how scripts and tests learn it.  (Picking a free port in the test
and passing its number would race with any other process binding ports in between.)
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from mailstore import config as configmod
from mailstore.backends import open_backend
from mailstore.store import MailStore


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="imapserver", description="IMAP/SMTP/LMTP server over "
                                "the HBase mail store (embedded store by default).")
    p.add_argument("--config", help="configuration file (see conf/imapserver.conf)")
    p.add_argument("--data-dir", help="directory of the embedded store")
    p.add_argument("--backend", choices=["embedded", "hbase"])
    p.add_argument("--hbase-host")
    p.add_argument("--hbase-port", type=int)
    p.add_argument("--hbase-table-prefix", metavar="PREFIX",
                   help="prefix of the HBase table names (PREFIX_JAMES_MESSAGES, ...)")
    p.add_argument("--host", help="address every listener binds to")
    p.add_argument("--imap-port", type=port_arg, help="IMAP with STARTTLS (0 disables, auto: "
                   "any free port)")
    p.add_argument("--imaps-port", type=port_arg, help="IMAP over implicit TLS (0 disables, "
                   "auto: any free port)")
    p.add_argument("--smtp-port", type=port_arg, help="SMTP (0 disables, auto: any free port)")
    p.add_argument("--lmtp-port", type=port_arg, help="LMTP (0 disables, auto: any free port)")
    p.add_argument("--metrics-port", type=port_arg, help="Prometheus metrics on loopback "
                   "(0 disables, auto: any free port)")
    return p


def port_arg(text: str) -> int | str:
    """A listener port: a number (0 disables) or ``auto`` (see services.listen_port)."""
    if text == "auto":
        return text
    port = int(text)
    if not 0 <= port <= 65535:
        raise ValueError(text)
    return port


def load_config(args: argparse.Namespace) -> configmod.Config:
    overrides = {
        "store": {"data_dir": args.data_dir, "backend": args.backend},
        "hbase": {"host": args.hbase_host, "port": args.hbase_port,
                  "table_prefix": args.hbase_table_prefix},
        "imap": {"port": args.imap_port, "imaps_port": args.imaps_port, "host": args.host},
        "delivery": {"smtp_port": args.smtp_port, "lmtp_port": args.lmtp_port,
                     "host": args.host},
        "metrics": {"port": args.metrics_port},
    }
    return configmod.load(args.config, overrides)


def open_store(cfg: configmod.Config) -> MailStore:
    name, options = cfg.backend_options()
    return MailStore(open_backend(name, options), **cfg.store_options())


def announce(name: str, host: str, port: int) -> None:
    print(f"{name} listening on {host}:{port}", flush=True)


class _MetricsService:
    name = "metrics"

    def __init__(self, server):
        self.server = server

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .memory import pin_malloc_threshold
    pin_malloc_threshold()
    try:
        cfg = load_config(args)
        store = open_store(cfg)
    except (configmod.ConfigError, ValueError) as exc:
        print(f"imapserver: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # MailStoreError, an unusable data directory (OSError), ...
        print(f"imapserver: cannot open the store: {exc}", file=sys.stderr)
        return 1

    from .observe import start_logging, start_metrics
    start_logging(cfg)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    from twisted.internet import asyncioreactor
    asyncioreactor.install(loop)
    from twisted.internet import reactor

    from .services import start_services, stop_services

    services = []

    def started() -> None:
        try:
            metrics = start_metrics(cfg, announce)
            if metrics is not None:
                services.append(_MetricsService(metrics))
            services.extend(start_services(store, cfg, reactor, loop, announce))
        except Exception as exc:  # a port in use, a bad certificate, ...
            print(f"imapserver: cannot start: {exc}", file=sys.stderr, flush=True)
            started.failed = True  # type: ignore[attr-defined]
            # start_services undid its own partial start; this stops the metrics server.
            _stop()

    started.failed = False  # type: ignore[attr-defined]
    stopping = []

    def shutdown(*_args) -> None:
        reactor.callFromThread(_stop)

    def _stop() -> None:
        if stopping:
            return  # a second signal while the first one's graceful stop runs
        stopping.append(True)
        d = stop_services(services, reactor, loop)
        d.addBoth(lambda _: _stop_reactor(reactor))

    reactor.callWhenRunning(started)
    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    try:
        reactor.run(installSignalHandlers=False)
    finally:
        # From here on the reactor cannot act on a signal: let SIGTERM end the process.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    store.close()
    return 1 if started.failed else 0  # type: ignore[attr-defined]


def _stop_reactor(reactor) -> None:
    from twisted.internet.error import ReactorNotRunning
    try:
        reactor.stop()
    except ReactorNotRunning:
        pass


if __name__ == "__main__":
    sys.exit(main())
