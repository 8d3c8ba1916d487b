"""TCPStore benchmarks (tcpstore-libuv-backend study): init time, store-based barrier, ops.

One shared harness (``common.py``: a TCPStore server in rank 0 and N simulated clients on
threads in the ranks) and one small file per member (``init.py``, ``barrier.py``,
``ops.py``, ``routes.py``). Kept light: importing this package imports no torch.
"""
