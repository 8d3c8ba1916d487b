"""Point-to-point benchmarks in the OSU style: one shared harness (common.py), one small file
per member (latency, bandwidth, bibw, message_rate_pairs).

Kept free of imports: ``family.py`` (settings, table, plots) is read before torch is loaded.
Benchmark one with ``run_p2p(distbench, P2P["p2p_bandwidth"], nbytes, window)`` from
``pytest_distbench.families.p2p.members``.
"""
