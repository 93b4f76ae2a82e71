"""ManageSieve commands, one module per group (RFC 5804 2): importing this registers them."""

from . import auth, basic, scripts  # noqa: F401
