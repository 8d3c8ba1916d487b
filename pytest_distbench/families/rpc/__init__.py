"""The RPC family (torch.distributed.rpc over TensorPipe): round-trip latency, throughput with
credits, transports side by side, and PyTorch's RL agent/observer benchmark.

This package's ``__init__`` stays light: ``options`` is imported by the settings at start-up.
The suites import ``harness`` (the shared in-rank code), the members (``latency``,
``throughput``, ``transports``, ``agent_observer``) and ``tables`` (the printed report).
"""
