"""store_routes: the three documented routes to the legacy TCPStore backend, their
precedence, and the listen_fd incompatibility, each run for real and checked by asking the
server what it runs.

The study (PyTorch 2.4) documents:

1. ``TCPStore(..., use_libuv=False)``: the highest priority;
2. ``init_method="tcp://...?use_libuv=0"``: when the process group creates its store; lower
   than 1, higher than 3;
3. ``USE_LIBUV=0`` in the environment: when the process group creates its store;
4. ``master_listen_fd`` with libuv raises NotImplementedError; legacy accepts it.

Each case runs in a child process (``python -m pytest_distbench.families.store.routes``),
because the environment variable and the default process group are process-wide. The
process-group routes make a store that listens on every interface, so the child first moves
into a private network namespace (only its own loopback exists there); where that is not
allowed those rows are reported as not run, with the reason, rather than listen off loopback.

"ran" is what the server store reports (``libuvBackend``), cross-checked against the name
of the server thread it started (``pt_tcpstore_uv`` for libuv, ``pt_tcpstore`` for legacy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from typing import Any

FAMILY = "store_routes"
THREAD_BACKENDS = {"pt_tcpstore_uv": "libuv", "pt_tcpstore": "legacy"}
NOT_IMPLEMENTED = "NotImplementedError"


@dataclass(frozen=True)
class Case:
    route: str  # which documented route (1, 2, 3, listen_fd, default)
    how: str  # what the case does, as a user would write it
    kind: str  # ctor, tcp, env, listen_fd
    use_libuv: bool | None  # constructor argument (None: not passed)
    query: str  # init_method query, e.g. "use_libuv=0"
    env: str | None  # USE_LIBUV in the environment (None: unset)
    documented: tuple[str, ...]  # backends (or NotImplementedError) the documents allow
    rule: str  # the documented rule this case checks


CASES: tuple[Case, ...] = (
    Case("1", "TCPStore(use_libuv=False)", "ctor", False, "", "1", ("legacy",),
         "route 1: the constructor argument wins over USE_LIBUV=1"),
    Case("1", "TCPStore(use_libuv=True)", "ctor", True, "", "0", ("libuv",),
         "route 1: the constructor argument wins over USE_LIBUV=0"),
    Case("2", "init_method tcp://...?use_libuv=0", "tcp", None, "use_libuv=0", None,
         ("legacy",), "route 2: the init_method query selects legacy"),
    Case("2", "init_method tcp://...?use_libuv=0", "tcp", None, "use_libuv=0", "1",
         ("legacy",), "route 2 beats route 3: query 0 wins over USE_LIBUV=1"),
    Case("2", "init_method tcp://...?use_libuv=1", "tcp", None, "use_libuv=1", "0",
         ("libuv",), "route 2 beats route 3: query 1 wins over USE_LIBUV=0"),
    Case("3", "init_method tcp://...", "tcp", None, "", "0", ("legacy",),
         "route 3: USE_LIBUV=0 when the process group creates its store"),
    Case("3", "init_method env://", "env", None, "", "0", ("legacy",),
         "route 3: USE_LIBUV=0 also for env:// rendezvous"),
    Case("default", "init_method tcp://...", "tcp", None, "", None, ("libuv",),
         "libuv is the default since 2.4"),
    Case("listen_fd", "TCPStore(master_listen_fd=fd, use_libuv=False)", "listen_fd", False,
         "", None, ("legacy",), "legacy accepts a listen fd"),
    Case("listen_fd", "TCPStore(master_listen_fd=fd)", "listen_fd", True, "", None,
         (NOT_IMPLEMENTED, "libuv"),
         "the study: libuv raises NotImplementedError with a listen fd (later torch accepts it)"),
)


# -- the child: runs every case and prints one JSON document -----------------------------------

def _private_network() -> str | None:
    """Move into a network namespace of our own with loopback up; None, or why not."""
    import ctypes
    import fcntl
    import socket
    import struct

    clone_newnet, clone_newuser = 0x40000000, 0x10000000
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(clone_newnet) != 0 and libc.unshare(clone_newuser | clone_newnet) != 0:
        return f"no private network namespace (unshare: {os.strerror(ctypes.get_errno())})"
    iff_up, iff_loopback, iff_running, siocsifflags = 0x1, 0x8, 0x40, 0x8914
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            fcntl.ioctl(s.fileno(), siocsifflags,
                        struct.pack("16sH14x", b"lo", iff_up | iff_loopback | iff_running))
        except OSError as exc:
            return f"loopback of the private namespace would not come up ({exc})"
    return None


def _thread_names() -> set[str]:
    names = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.add(f.read().strip())
        except OSError:
            pass
    return names


def _make_store(case: Case) -> Any:
    import socket
    from datetime import timedelta

    import torch.distributed as dist

    timeout = timedelta(seconds=30)
    if case.kind == "ctor":
        return dist.TCPStore("127.0.0.1", 0, 1, True, timeout, use_libuv=case.use_libuv), None
    if case.kind == "listen_fd":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        fd = sock.detach()
        kwargs = {} if case.use_libuv else {"use_libuv": False}
        try:
            return dist.TCPStore("127.0.0.1", port, 1, True, timeout, master_listen_fd=fd,
                                 **kwargs), None
        except BaseException:
            os.close(fd)
            raise
    if case.kind == "tcp":
        # rank and world_size go to init_process_group, which adds them to the url.
        url = "tcp://127.0.0.1:0" + (f"?{case.query}" if case.query else "")
    else:
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", "0"
        url = "env://" + (f"?{case.query}" if case.query else "")
    dist.init_process_group("gloo", init_method=url, rank=0, world_size=1)
    store = dist.distributed_c10d._get_default_store()
    while hasattr(store, "underlying_store"):
        store = store.underlying_store
    return store, url


def _serves(store: Any) -> bool:
    """A client can reach the server through its port and read back what it wrote."""
    from datetime import timedelta

    import torch.distributed as dist

    client = dist.TCPStore("127.0.0.1", store.port, None, False, timedelta(seconds=30),
                           wait_for_workers=False)
    client.set("distbench/route", "ok")
    return store.get("distbench/route") == b"ok"


def run_case(case: Case, network_problem: str | None) -> dict[str, Any]:
    row: dict[str, Any] = {"route": case.route, "how": case.how, "env": case.env or "unset",
                           "documented": "/".join(case.documented), "rule": case.rule}
    if network_problem and case.kind != "listen_fd":
        return dict(row, ran="not run", thread="", agrees=None,
                    note=f"{network_problem}; its store would listen on every interface")
    import torch.distributed as dist

    if case.env is None:
        os.environ.pop("USE_LIBUV", None)
    else:
        os.environ["USE_LIBUV"] = case.env
    before = _thread_names()
    try:
        store, url = _make_store(case)
    except NotImplementedError as exc:
        return dict(row, ran=NOT_IMPLEMENTED, thread="", agrees=NOT_IMPLEMENTED in
                    case.documented, note=str(exc).splitlines()[0][:200])
    try:
        ran = "libuv" if store.libuvBackend else "legacy"
        threads = sorted(t for t in _thread_names() - before if t in THREAD_BACKENDS)
        from_thread = {THREAD_BACKENDS[t] for t in threads if t in THREAD_BACKENDS}
        note = f"url {url}" if url else ""
        if from_thread and from_thread != {ran}:
            note = f"libuvBackend says {ran} but the server thread is {threads}"
            ran = "inconsistent"
        if not _serves(store):
            note, ran = "the server did not serve a client", "broken"
        return dict(row, ran=ran, thread=",".join(threads), agrees=ran in case.documented,
                    note=note)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        del store


def main() -> None:
    network_problem = _private_network()
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    import torch

    rows = [run_case(case, network_problem) for case in CASES]
    print(json.dumps({"torch": torch.__version__, "network": network_problem or "private",
                      "rows": rows}))


# -- the caller's side -------------------------------------------------------------------------

def check_routes(timeout_s: float) -> dict[str, Any]:
    """Run every case in a child process; its JSON document (rows, torch, network)."""
    env = {k: v for k, v in os.environ.items() if k != "USE_LIBUV"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    try:
        done = subprocess.run([sys.executable, "-m", __name__], capture_output=True, text=True,
                              timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the route checks did not finish within {timeout_s:g} s") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the route checks failed (exit {done.returncode}):\n"
                           f"{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def disagreements(rows: list[dict[str, Any]]) -> list[str]:
    """Rows whose backend is not what the documents say."""
    return [f"{r['how']} with USE_LIBUV={r['env']}: ran {r['ran']}, documented "
            f"{r['documented']} ({r['rule']}) {r['note']}".rstrip()
            for r in rows if r["agrees"] is False]


def run_routes(distbench: Any, tcp_store: Any, timeout_s: float) -> None:
    """In every rank: rank 0 runs the checks; every rank records the same result."""
    import time

    from .common import Exchange

    exchange = Exchange(tcp_store, distbench.rank, distbench.world_size)
    result: dict[str, Any] = {}
    if distbench.rank == 0:
        began = time.perf_counter()
        try:
            result = check_routes(timeout_s)
        except RuntimeError as exc:
            result = {"error": str(exc)}
        result["check_s"] = time.perf_counter() - began
    result = exchange.from_server("routes", result)
    if "error" in result:
        raise RuntimeError(result["error"])
    wrong = disagreements(result["rows"])
    distbench.record([result["check_s"]], family=FAMILY, figures=result,
                     wrong=len(wrong) if distbench.rank == 0 else 0)
    if wrong:
        raise AssertionError("backend selection differs from the documents:\n" +
                             "\n".join(wrong))


__all__ = ["CASES", "Case", "asdict", "check_routes", "disagreements", "run_case", "run_routes"]

if __name__ == "__main__":
    main()
