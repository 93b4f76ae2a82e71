"""Test and benchmark helpers that ship with the package (nothing here runs in production).

:mod:`mailstore.testing.thrift_gateway` serves HBase's Thrift1 API over the embedded store, so
that the HBase backend and happybase itself can be exercised without a cluster.
"""
