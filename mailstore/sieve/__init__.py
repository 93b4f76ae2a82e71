"""Sieve (RFC 5228) at delivery: parsing (:mod:`.grammar`, sievelib underneath), checking
(:mod:`.validate`), running (:mod:`.interpreter`, pure) and carrying out the result against
the store (:mod:`.executor`).  See docs/sieve.md."""

from .actions import Envelope, Environment, Limits, Result
from .interpreter import SUPPORTED, run
from .validate import validate

__all__ = ["SUPPORTED", "Envelope", "Environment", "Limits", "Result", "run", "validate"]
