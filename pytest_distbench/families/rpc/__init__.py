"""The RPC family (torch.distributed.rpc over TensorPipe): round-trip latency, throughput with
credits, transports side by side, and PyTorch's RL agent/observer benchmark.

This package's ``__init__`` stays light: ``family.py`` (settings, tables, plots) is read at
start-up without torch. The suites import the members (``latency``, ``throughput``,
``transports``, ``agent_observer``), which run on ``harness`` (the shared in-rank code).
"""
