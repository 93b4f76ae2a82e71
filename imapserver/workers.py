"""Every core: N worker processes on one set of listening sockets, under a supervising parent.

``imapserver`` with ``[server] workers`` (or ``--workers``) above 1 becomes this parent.  It
does what can fail once and clearly before any worker exists -- reads the config, opens the
store once (and closes it), loads the TLS certificate, binds every listener and the metrics
port -- so a port in use is one ``imapserver: cannot start: ...`` line and exit 1, as in a
single process.  Then it starts the workers: each is ``python -m imapserver.main`` again, with
the same arguments and ``IMAPSERVER_WORKER`` in its environment naming the inherited
descriptors (listeners, its metrics socket, a pipe on which it says it is ready, and a pipe
whose end-of-file tells it the parent is gone).  The kernel spreads connections over the
processes accepting on the shared sockets; a worker is an ordinary frontend on the one store
(docs/decisions/0007), so IDLE in one sees an APPEND made through another.

The parent restarts a worker that dies, after 0.1 s doubling to 5 s while deaths come quickly
(reset once a worker has run for STABLE_AFTER seconds); when a worker dies START_FAILURES
times in a row before it is ready (a store it cannot open, ...), it gives up, stops the others
and exits 1 with one message.  SIGTERM (or SIGINT) is forwarded: each worker stops accepting,
finishes its commands and says BYE, and the parent exits 0 once all have exited.  SIGHUP is
forwarded (each process reopens ``[log] file``).

Metrics: the parent serves the one ``[metrics]`` endpoint; each scrape fetches every worker's
own registry (each worker serves it on a loopback socket the parent bound for it), adds the
label ``worker="1"`` .. ``"N"`` to every sample and answers with the union, plus the parent's
``hbaseimap_workers`` and ``hbaseimap_worker_restarts_total``.  Sum over ``worker`` for totals
(docs/metrics.md).  This is used rather than prometheus_client's multiprocess mode, which
needs a shared directory of mmap files, loses gauges' meaning and the process_* series, and
must be set up before the library is imported.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import time
import urllib.request

WORKER_ENV = "IMAPSERVER_WORKER"
START_FAILURES = 5
"""Deaths in a row of one worker before it said it was ready, after which the parent gives up."""
STABLE_AFTER = 10.0
"""Seconds a worker must have run for its death not to count as quick (the backoff resets)."""
BACKOFF_FIRST, BACKOFF_MAX = 0.1, 5.0
READY_TIMEOUT = 60.0
"""Seconds a worker may take to start; one that has not said it is ready by then is killed."""


def worker_count(value: int | str) -> int:
    """``auto``: the cores this process may run on; otherwise the number itself."""
    if value == "auto":
        return len(os.sched_getaffinity(0)) or 1
    return int(value)


def worker_spec() -> dict | None:
    """In a worker: what its supervisor handed it (and the variable is removed, so that
    nothing the worker starts believes it is a worker too); None in any other process."""
    text = os.environ.pop(WORKER_ENV, None)
    return None if text is None else json.loads(text)


def _bind(host: str, port: int, backlog: int, name: str) -> socket.socket:
    from twisted.internet.error import CannotListenError

    from .delivery import _listen
    if name in ("smtp", "lmtp"):
        return _listen(host, port, backlog)  # its own "[Errno 98] Couldn't listen on ..."
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except OSError as exc:
        sock.close()
        raise CannotListenError(host, port, exc) from None
    return sock


def open_listeners(cfg, announce) -> dict[str, socket.socket]:
    """Bind every configured listener, in the order a single process starts them, announcing
    each; on failure close those already bound and raise."""
    from .imap import tls_context
    from .services import listen_port

    context = tls_context(cfg)  # a missing or bad certificate fails here, before any bind
    # The delivery listeners' own checks too (their context, STARTTLS required without a
    # certificate): a worker that fails them would only be restarted until the parent gives up.
    from .delivery import check_tls
    check_tls(cfg)
    backlog = cfg["imap"]["listen_backlog"]
    wanted = [("imap", cfg["imap"]["host"], listen_port(cfg["imap"]["port"])),
              ("imaps", cfg["imap"]["host"],
               listen_port(cfg["imap"]["imaps_port"]) if context is not None else None),
              ("smtp", cfg["delivery"]["host"], listen_port(cfg["delivery"]["smtp_port"])),
              ("lmtp", cfg["delivery"]["host"], listen_port(cfg["delivery"]["lmtp_port"])),
              ("managesieve", cfg["managesieve"]["host"],
               listen_port(cfg["managesieve"]["port"]))]
    sockets: dict[str, socket.socket] = {}
    try:
        for name, host, port in wanted:
            if port is None:
                continue
            sockets[name] = _bind(host, port, backlog, name)
            # Non-blocking for every process sharing it (the flag belongs to the one open
            # socket): a worker that finds the queue emptied by another must not block in
            # accept().
            sockets[name].setblocking(False)
            announce(name, host, sockets[name].getsockname()[1])
    except BaseException:
        for sock in sockets.values():
            sock.close()
        raise
    return sockets


class Worker:
    """One worker slot: its process (replaced when it dies) and its metrics socket."""

    def __init__(self, index: int, metrics: socket.socket | None):
        self.index = index
        self.metrics = metrics
        self.proc: subprocess.Popen | None = None
        self.ready_pipe: int | None = None
        self.ready = False
        self.started = 0.0
        self.quick_deaths = 0
        self.start_deaths = 0
        self.restart_at: float | None = None


class Supervisor:
    def __init__(self, cfg, argv: list[str], count: int, listeners: dict[str, socket.socket]):
        from .observe import Logger
        self.argv = argv
        self.listeners = listeners
        self.log = Logger("supervisor")
        with_metrics = cfg["metrics"]["port"] not in (0, "0")
        self.workers = [Worker(i + 1, _loopback_socket() if with_metrics else None)
                        for i in range(count)]
        self.restarts = 0
        self.stopping = False
        self.status = 0
        self.all_ready_said = False
        self.selector = selectors.DefaultSelector()
        # Workers watch this pipe: end-of-file means the parent is gone (even SIGKILLed), and
        # they stop gracefully instead of serving on unsupervised.
        self.alive_r, self.alive_w = os.pipe()
        self.signals: list[int] = []

    # -- processes -----------------------------------------------------------------------

    def spawn(self, worker: Worker) -> None:
        ready_r, ready_w = os.pipe()
        spec = {"index": worker.index, "ready": ready_w, "parent": self.alive_r,
                "listeners": {name: s.fileno() for name, s in self.listeners.items()},
                "metrics": worker.metrics.fileno() if worker.metrics else None}
        fds = [ready_w, self.alive_r, *spec["listeners"].values()]
        if worker.metrics:
            fds.append(worker.metrics.fileno())
        env = dict(os.environ, **{WORKER_ENV: json.dumps(spec)})
        try:
            worker.proc = subprocess.Popen([sys.executable, "-m", "imapserver.main",
                                            *self.argv], pass_fds=fds, env=env)
        finally:
            os.close(ready_w)
        worker.ready_pipe = ready_r
        worker.ready = False
        worker.started = time.monotonic()
        worker.restart_at = None
        self.selector.register(ready_r, selectors.EVENT_READ, worker)

    def _ready_event(self, worker: Worker) -> None:
        data = os.read(worker.ready_pipe, 64)
        if data:
            worker.ready = True
            worker.start_deaths = 0
            self.log.info("worker_ready", worker=worker.index, pid=worker.proc.pid)
            if not self.all_ready_said and all(w.ready for w in self.workers):
                self.all_ready_said = True
                self.log.info("workers_ready", workers=len(self.workers))
        else:
            self._close_ready(worker)

    def _close_ready(self, worker: Worker) -> None:
        if worker.ready_pipe is not None:
            self.selector.unregister(worker.ready_pipe)
            os.close(worker.ready_pipe)
            worker.ready_pipe = None

    def _exited(self, worker: Worker, code: int) -> None:
        self._close_ready(worker)
        pid, worker.proc = worker.proc.pid, None
        if self.stopping:
            return
        lived = time.monotonic() - worker.started
        self.log.warn("worker_exited", worker=worker.index, pid=pid, status=code,
                      seconds=round(lived, 3), ready=worker.ready)
        if not worker.ready:
            worker.start_deaths += 1
            if worker.start_deaths >= START_FAILURES:
                print(f"imapserver: giving up: worker {worker.index} exited at start-up "
                      f"{worker.start_deaths} times in a row (last status {code}); see the "
                      "lines above", file=sys.stderr, flush=True)
                self.status = 1
                self.stop()
                return
        worker.quick_deaths = worker.quick_deaths + 1 if lived < STABLE_AFTER else 0
        delay = min(BACKOFF_FIRST * 2 ** max(worker.quick_deaths - 1, 0), BACKOFF_MAX)
        worker.restart_at = time.monotonic() + delay
        worker.ready = False

    def stop(self) -> None:
        """Graceful stop: SIGTERM to every worker (each finishes and says BYE), no restarts."""
        if self.stopping:
            return
        self.stopping = True
        self.log.info("stopping", workers=sum(1 for w in self.workers if w.proc))
        # The workers close their copies as they stop accepting; once the parent's are closed
        # too, a new connection is refused at once instead of waiting in a queue nobody reads.
        for listener in self.listeners.values():
            listener.close()
        for worker in self.workers:
            worker.restart_at = None
            if worker.proc is not None:
                worker.proc.send_signal(signal.SIGTERM)

    # -- the loop --------------------------------------------------------------------------

    def run(self) -> int:
        wake_r, wake_w = socket.socketpair()
        wake_r.setblocking(False)
        wake_w.setblocking(False)
        self.selector.register(wake_r, selectors.EVENT_READ, None)
        old_wakeup = signal.set_wakeup_fd(wake_w.fileno(), warn_on_full_buffer=False)
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
            signal.signal(signum, self._on_signal)
        try:
            for worker in self.workers:
                self.spawn(worker)
            while True:
                self._step(wake_r)
                if self.stopping and all(w.proc is None for w in self.workers):
                    return self.status
        finally:
            for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGCHLD):
                signal.signal(signum, signal.SIG_DFL)
            signal.set_wakeup_fd(old_wakeup)
            for worker in self.workers:  # only after an unexpected error: do not orphan them
                if worker.proc is not None and worker.proc.poll() is None:
                    worker.proc.kill()
                    worker.proc.wait()
            wake_r.close()
            wake_w.close()

    def _on_signal(self, signum, _frame) -> None:
        self.signals.append(signum)

    def _step(self, wake_r: socket.socket) -> None:
        now = time.monotonic()
        due = [w.restart_at for w in self.workers if w.restart_at is not None]
        timeout = max(0.0, min(due) - now) if due else 1.0
        for key, _events in self.selector.select(timeout=min(timeout, 1.0)):
            if key.data is None:
                try:
                    wake_r.recv(4096)
                except BlockingIOError:
                    pass
            else:
                self._ready_event(key.data)
        while self.signals:
            signum = self.signals.pop(0)
            if signum in (signal.SIGTERM, signal.SIGINT):
                self.stop()
            elif signum == signal.SIGHUP:
                from .observe import reopen_log
                reopen_log()
                for worker in self.workers:
                    if worker.proc is not None:
                        worker.proc.send_signal(signal.SIGHUP)
        now = time.monotonic()
        for worker in self.workers:
            if worker.proc is not None:
                code = worker.proc.poll()
                if code is not None:
                    self._exited(worker, code)
                elif not worker.ready and now - worker.started > READY_TIMEOUT:
                    worker.proc.kill()  # reaped, and counted as a start-up death, next step
            elif worker.restart_at is not None and now >= worker.restart_at:
                self.restarts += 1
                self.spawn(worker)

    # -- metrics ---------------------------------------------------------------------------

    def collect(self):
        """The workers' metrics, each sample labelled with its worker; the parent's own."""
        from prometheus_client.metrics_core import GaugeMetricFamily, Metric
        from prometheus_client.parser import text_string_to_metric_families

        families: dict[str, Metric] = {}
        for worker in self.workers:
            if worker.metrics is None or worker.proc is None:
                continue
            port = worker.metrics.getsockname()[1]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                            timeout=5) as answer:
                    text = answer.read().decode()
            except OSError:
                continue  # dying or being replaced: its series reappear with its successor
            for family in text_string_to_metric_families(text):
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(
                        family.name, family.documentation, family.type, family.unit)
                for sample in family.samples:
                    merged.samples.append(sample._replace(
                        labels={**sample.labels, "worker": str(worker.index)}))
        yield from families.values()
        yield GaugeMetricFamily("hbaseimap_workers", "Worker processes running and ready",
                                value=sum(1 for w in self.workers if w.proc and w.ready))
        from prometheus_client.metrics_core import CounterMetricFamily
        yield CounterMetricFamily("hbaseimap_worker_restarts",
                                  "Worker processes restarted after one died",
                                  value=self.restarts)


def _loopback_socket() -> socket.socket:
    """A worker's own metrics port: loopback, chosen by the kernel, read only by the parent."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def supervise(cfg, argv: list[str], count: int, announce) -> int:
    """Run ``count`` workers until SIGTERM; the exit status."""
    from prometheus_client import CollectorRegistry

    from .observe import serve_metrics
    from .services import listen_port

    metrics_server = None
    metrics_sock = None
    listeners: dict[str, socket.socket] = {}
    try:
        port = listen_port(cfg["metrics"]["port"])
        if port is not None:  # first, as a single process starts it first
            host = cfg["metrics"]["host"]
            metrics_sock = _bind(host, port, 16, "metrics")
            announce("metrics", host, metrics_sock.getsockname()[1])
        listeners = open_listeners(cfg, announce)
    except Exception as exc:  # a port in use, a bad certificate, ...
        print(f"imapserver: cannot start: {exc}", file=sys.stderr, flush=True)
        if metrics_sock is not None:
            metrics_sock.close()
        return 1
    supervisor = Supervisor(cfg, argv, count, listeners)
    if metrics_sock is not None:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(supervisor)
        metrics_server = serve_metrics(metrics_sock, registry)
    try:
        return supervisor.run()
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
            metrics_server.server_close()
        for listener in listeners.values():
            listener.close()
