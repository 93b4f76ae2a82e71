"""Starting and stopping the process's listeners.

Each protocol package exposes ``start(store, cfg, reactor, loop, announce)`` returning a list of
running services; a service has ``name`` and ``stop()``, which returns a Deferred, an awaitable
or None.  Stopping stops accepting first, then lets the protocol finish or close its sessions.
A service that holds threads also has ``abort()``, which releases them at once (synchronously):
start-up calls it when a later service fails, as the reactor will not run to finish a ``stop``.
A ``start`` that fails undoes its own partial work before raising.
"""

from __future__ import annotations

import asyncio
import inspect

from twisted.internet import defer, threads


def start_services(store, cfg, reactor, loop, announce) -> list:
    """Start every protocol's listeners.  Each ``start`` undoes its own partial work when it
    fails; if a later one fails, the earlier ones are aborted here before the error
    propagates, so that a process that cannot start holds no port and no thread (a thread
    pool left running would keep it from exiting)."""
    from . import delivery, imap, managesieve

    services: list = []
    try:
        services += start_indexer(store, reactor)
        services += imap.start(store, cfg, reactor, loop, announce)
        services += delivery.start(store, cfg, reactor, loop, announce)
        services += managesieve.start(store, cfg, reactor, loop, announce)
    except BaseException:
        for service in services:
            abort = getattr(service, "abort", None)
            if abort is not None:
                abort()
        raise
    return services


class _IndexerService:
    """The background text indexer's thread (mailstore/indexer.py), as a service."""

    name = "text-indexer"

    def __init__(self, indexer, reactor):
        self.indexer = indexer
        self.reactor = reactor

    def stop(self) -> defer.Deferred:
        """Stop after the batch in progress, waited for in a thread of the reactor's pool:
        a batch takes a fraction of a second, but up to HBase's call timeout while HBase is
        down, and the reactor meanwhile says BYE to the sessions and answers their commands
        in progress.  (``deferToThread`` on the reactor this service was started with.)"""
        return threads.deferToThreadPool(self.reactor, self.reactor.getThreadPool(),
                                         self.indexer.stop)

    def abort(self) -> None:
        """Stop at once, synchronously: start-up failed and the reactor will not run."""
        self.indexer.stop()


def start_indexer(store, reactor) -> list:
    """With ``text_index = background``, index the queue in a thread of this process -- of
    one process only among a supervisor's workers (worker 1, restarted if it dies): two
    would index the same messages twice.  Nothing else needs it to run: SEARCH scans what
    is not indexed yet."""
    from mailstore.indexer import BackgroundIndexer

    from . import observe
    if store.text.queue is None or observe.WORKER not in (None, 1):
        return []
    indexer = BackgroundIndexer(store)
    indexer.start()
    return [_IndexerService(indexer, reactor)]


INHERITED: dict[str, int] | None = None
"""In a worker process (imapserver.workers): the listening sockets its supervisor opened, as
file descriptors by listener name (``imap``, ``imaps``, ``smtp``, ``lmtp``, ``managesieve``);
only those are served, and none is bound here.  None in a process that binds its own."""


def inherited(name: str) -> int | None:
    """The inherited socket of listener ``name``, or None; taken once (the caller owns it)."""
    if INHERITED is None:
        return None
    return INHERITED.pop(name, None)


def listen_port(value: int | str) -> int | None:
    """The port a listener binds for a configured ``value``: None when it is disabled (0),
    0 (the kernel chooses; the listener announces the port it got) for ``auto``."""
    if value == "auto":
        return 0
    return int(value) or None


def stop_services(services, reactor, loop) -> defer.Deferred:
    waits = []
    for service in services:
        result = service.stop()
        if isinstance(result, defer.Deferred):
            waits.append(result)
        elif inspect.isawaitable(result):
            waits.append(defer.Deferred.fromFuture(asyncio.ensure_future(result, loop=loop)))
    return defer.DeferredList(waits, consumeErrors=True)
