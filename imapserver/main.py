"""The ``imapserver`` process: IMAP, SMTP, LMTP and ManageSieve listeners over one mail store.

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

With ``[server] workers`` (``--workers``) above 1 -- ``auto``, the default, is one per core --
this process becomes the supervisor of that many workers (imapserver.workers): it checks and
binds everything, prints the lines above, then runs this same ``main`` in each worker, which
finds ``IMAPSERVER_WORKER`` in its environment and serves the inherited sockets instead of
binding its own.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import threading

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
    p.add_argument("--hbase-api", choices=["thrift1", "thrift2"],
                   help="the HBase gateway's API: thrift1 (hbase thrift) or thrift2 "
                   "(hbase thrift2)")
    p.add_argument("--hbase-table-prefix", metavar="PREFIX",
                   help="prefix of the HBase table names (PREFIX_JAMES_MESSAGES, ...)")
    p.add_argument("--host", help="address every listener binds to")
    p.add_argument("--imap-port", type=port_arg, help="IMAP with STARTTLS (0 disables, auto: "
                   "any free port)")
    p.add_argument("--imaps-port", type=port_arg, help="IMAP over implicit TLS (0 disables, "
                   "auto: any free port)")
    p.add_argument("--smtp-port", type=port_arg, help="SMTP (0 disables, auto: any free port)")
    p.add_argument("--lmtp-port", type=port_arg, help="LMTP (0 disables, auto: any free port)")
    p.add_argument("--sieve-port", type=port_arg, help="ManageSieve, RFC 5804 (0 disables, "
                   "auto: any free port)")
    p.add_argument("--metrics-port", type=port_arg, help="Prometheus metrics on loopback "
                   "(0 disables, auto: any free port)")
    p.add_argument("--workers", type=workers_arg, help="worker processes: auto (one per "
                   "core) or a number; 1 runs a single process without a supervisor")
    return p


def workers_arg(text: str) -> int | str:
    """``auto`` or a number of worker processes, at least 1."""
    if text == "auto":
        return text
    count = int(text)
    if count < 1:
        raise ValueError(text)
    return count


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
        "hbase": {"host": args.hbase_host, "port": args.hbase_port, "api": args.hbase_api,
                  "table_prefix": args.hbase_table_prefix},
        "imap": {"port": args.imap_port, "imaps_port": args.imaps_port, "host": args.host},
        "delivery": {"smtp_port": args.smtp_port, "lmtp_port": args.lmtp_port,
                     "host": args.host},
        "managesieve": {"port": args.sieve_port, "host": args.host},
        "metrics": {"port": args.metrics_port},
        "server": {"workers": args.workers},
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
    if argv is None:
        argv = sys.argv[1:]
    args = build_parser().parse_args(argv)
    from .workers import supervise, worker_count, worker_spec
    spec = worker_spec()
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

    from . import observe
    from .observe import reopen_log, serve_metrics, start_logging, start_metrics
    if spec is not None:
        observe.WORKER = spec["index"]
    start_logging(cfg)
    workers = worker_count(cfg["server"]["workers"])
    if spec is None and workers > 1:
        # The parent only checked that the store opens: the workers use it, each its own.
        store.close()
        return supervise(cfg, argv, workers, announce)
    if spec is not None:
        from . import services as services_module
        services_module.INHERITED = dict(spec["listeners"])
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    from twisted.internet import asyncioreactor
    asyncioreactor.install(loop)
    from twisted.internet import reactor

    from .services import start_services, stop_services

    services = []

    def started() -> None:
        try:
            if spec is None:
                metrics = start_metrics(cfg, announce)
            elif spec["metrics"] is not None:
                from .observe import prepare_registry
                prepare_registry()
                metrics = serve_metrics(socket.socket(fileno=spec["metrics"]))
            else:
                metrics = None
            if metrics is not None:
                services.append(_MetricsService(metrics))
            # A worker's listeners were announced by its supervisor, which bound them.
            services.extend(start_services(store, cfg, reactor, loop,
                                           announce if spec is None else _quiet))
            if spec is not None:
                _tell_ready(spec, shutdown)
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

    def reopen(*_args) -> None:
        reactor.callFromThread(reopen_log)

    reactor.callWhenRunning(started)
    signal.signal(signal.SIGTERM, shutdown)
    signal.signal(signal.SIGINT, shutdown)
    signal.signal(signal.SIGHUP, reopen)
    try:
        reactor.run(installSignalHandlers=False)
    finally:
        # From here on the reactor cannot act on a signal: let SIGTERM end the process.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    store.close()
    return 1 if started.failed else 0  # type: ignore[attr-defined]


def _quiet(name: str, host: str, port: int) -> None:
    """A worker's ``announce``: its supervisor already said where each listener is."""


def _tell_ready(spec: dict, shutdown) -> None:
    """A worker tells its supervisor it serves, and stops gracefully when the supervisor is
    gone (end-of-file on the pipe it holds open): no worker serves on unsupervised."""
    os.write(spec["ready"], b"ready\n")
    os.close(spec["ready"])

    def watch(fd: int = spec["parent"]) -> None:
        while os.read(fd, 64):
            pass
        shutdown()

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


def _stop_reactor(reactor) -> None:
    from twisted.internet.error import ReactorNotRunning
    try:
        reactor.stop()
    except ReactorNotRunning:
        pass


if __name__ == "__main__":
    sys.exit(main())
