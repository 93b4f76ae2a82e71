"""Storage backends, registered by name (the way Dovecot registers mail drivers).

``open_backend(config)`` picks one from the ``backend`` setting; ``hbase`` then picks its wire
API from ``api``: ``thrift1`` (``hbase.py``, happybase over ``hbase thrift``) or ``thrift2``
(``hbase_thrift2.py``, thriftpy2 over ``hbase thrift2``; docs/decisions/0029).  Only ``hbase.py``
imports happybase; the embedded backend needs nothing outside the standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module

from .base import Backend

_REGISTRY: dict[str, str] = {
    "embedded": "mailstore.backends.embedded:EmbeddedBackend",
    "hbase": "mailstore.backends:open_hbase",
}

HBASE_APIS = ("thrift1", "thrift2")


def open_hbase(api: str = "thrift1", **options: object) -> Backend:
    """The HBase backend for the gateway's API (``[hbase] api``)."""
    if api == "thrift2":
        from .hbase_thrift2 import HBase2Backend
        return HBase2Backend(**options)
    if api != "thrift1":
        raise ValueError(f"unknown HBase api {api!r} (known: {', '.join(HBASE_APIS)})")
    from .hbase import HBaseBackend
    return HBaseBackend(**options)


def backend_names() -> list[str]:
    return sorted(_REGISTRY)


def open_backend(name: str, options: Mapping[str, object]) -> Backend:
    """Instantiate the backend registered as ``name`` with its options (see conf/)."""
    try:
        target = _REGISTRY[name]
    except KeyError:
        known = ", ".join(backend_names())
        raise ValueError(f"unknown backend {name!r} (known: {known})") from None
    module, _, cls = target.partition(":")
    factory: Callable[..., Backend] = getattr(import_module(module), cls)
    return factory(**options)
