"""Storage backends, registered by name (the way Dovecot registers mail drivers).

``open_backend(config)`` picks one from the ``backend`` setting.  Only ``hbase.py`` imports
happybase; the embedded backend needs nothing outside the standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module

from .base import Backend

_REGISTRY: dict[str, str] = {
    "embedded": "mailstore.backends.embedded:EmbeddedBackend",
    "hbase": "mailstore.backends.hbase:HBaseBackend",
}


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
