"""The product against a peer: the same work measured by pytest-distbench and by torch alone.

    python benchmarks/bench_peers.py [--rounds 3] [--quick] [--json FILE]

Three kinds of work, each measured once per round by both sides, alternating which goes
first (product then peer in even rounds, peer then product in odd ones):

- collectives: all_reduce and all_gather at 4 B, 64 KiB, 1 MiB, 16 MiB, world sizes 2 and 4.
  Product: one `pytest --distbench` session (`--pyargs pytest_distbench.suites.test_collectives`).
  Peer: ranks started with torch.multiprocessing (spawn), gloo on 127.0.0.1, 5 warm-up calls,
  the count from the same budget rule, each call timed with perf_counter; per iteration the
  slowest rank, then the p50 and the mean of those.
- p2p: 100 MB (1e8 bytes) from rank 0 to rank 1 with blocking send/recv, as the seed's
  bench_p2p.py does it (p2p-allreduce-speed.md); MB/s = 100 / seconds per transfer.
  Product: test_p2p_bandwidth with --tensor-size=100MB --distbench-window=1.
- store: TCPStore init, the server's constructor until every client has connected, as the
  seed's script times it (tcpstore-libuv-backend.rst), at 64 and 256 clients, libuv and
  legacy. Peer: one forked process per client, each constructing TCPStore(is_master=False).
  Product: test_store_init (its clients are threads).

Prints one row per point: the product's and the peer's figure (median over rounds) and the
ratio product / peer per round (median, min-max). Absolute figures on a shared machine mean
little; the ratios of neighbouring measurements are what this is for. See docs/peers.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COLLECTIVES = ("all_reduce", "all_gather")
SIZES = (4, 64 << 10, 1 << 20, 16 << 20)
SIZE_NAMES = {4: "4B", 64 << 10: "64KiB", 1 << 20: "1MiB", 16 << 20: "16MiB"}
WORLD_SIZES = (2, 4)
P2P_BYTES = 100_000_000  # the seed's 100 MB: size_mb * 250 * 1000 float32 elements
STORE_CLIENTS = (64, 256)
STORE_BACKENDS = ("libuv", "legacy")
ELEMENT = 4  # float32


# --------------------------------------------------------------------------- pure parts


def collective_layout(name: str, nbytes: int, world_size: int) -> tuple[int, int, int, float]:
    """(input elements, output elements, bytes reported, busbw factor), nccl-tests conventions.

    all_reduce reports its tensor; all_gather its output, whose element count is rounded down
    to a multiple of the world size with at least one element per rank.
    """
    count = max(1, nbytes // ELEMENT)
    n = world_size
    if name == "all_reduce":
        return count, count, count * ELEMENT, 2 * (n - 1) / n
    if name == "all_gather":
        per_rank = max(1, count // n)
        return per_rank, per_rank * n, per_rank * n * ELEMENT, (n - 1) / n
    raise ValueError(f"unknown collective {name!r}")


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of a non-empty list."""
    if not values:
        raise ValueError("percentile of no values")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def slowest_rank(rank_samples: list[list[float]]) -> list[float]:
    """Per iteration the slowest rank's time (a collective lasts as long as its slowest rank)."""
    if not rank_samples or len({len(r) for r in rank_samples}) != 1:
        raise ValueError("rank samples must be non-empty lists of one length")
    return [max(column) for column in zip(*rank_samples, strict=True)]


def summarize(samples: list[float]) -> dict:
    return {"p50_s": percentile(samples, 50), "mean_s": statistics.fmean(samples),
            "n": len(samples)}


def point_key(kind: str, *parts) -> str:
    return " ".join([kind, *map(str, parts)])


def product_points(document: dict) -> dict[str, dict]:
    """The figures this script compares, read from a pytest-distbench results document.

    Collectives: p50 and mean of `samples` (slowest rank per iteration), keyed by the requested
    size (`params.nbytes`); p2p_bandwidth: the same, as MB/s of one message; store_init:
    `figures.init_s` (the study's figure) by clients and the backend the server reported.
    """
    if not isinstance(document.get("distbench"), dict):
        raise ValueError("not a pytest-distbench results document")
    points: dict[str, dict] = {}
    for bench in document.get("benchmarks", []):
        rec = bench["distbench"]
        family, summary, figures = rec["family"], rec["summary"], rec.get("figures") or {}
        if family in COLLECTIVES:
            key = point_key(family, f"ws{rec['world_size']}", rec["params"]["nbytes"])
            points[key] = {"p50_s": summary["p50"], "mean_s": summary["mean"],
                           "n": summary["n"], "nbytes": rec["nbytes"],
                           "busbw_factor": rec["busbw_factor"], "placement": rec.get("placement")}
        elif family == "p2p_bandwidth":
            key = point_key("send_recv", f"ws{rec['world_size']}", rec["nbytes"])
            total = figures.get("total_s") or sum(rec["samples"])
            points[key] = {"p50_s": summary["p50"], "mean_s": total / len(rec["samples"]),
                           "n": summary["n"], "nbytes": rec["nbytes"],
                           "window": figures.get("window")}
        elif family == "store_init":
            key = point_key("store_init", figures["clients"], figures["server_backend"])
            points[key] = {"init_s": figures["init_s"],
                           "slow": figures.get("slow_connects"),
                           "connect_p50_s": figures.get("connect_p50_s"),
                           "handoff_s": max(figures.get("handoff_s") or [0.0])}
    return points


def headline(key: str, figures: dict, stat: str = "p50") -> float:
    """The figure shown for a point: us per call (collectives), MB/s (send_recv), s (store)."""
    kind = key.split(" ", 1)[0]
    if kind in COLLECTIVES:
        return figures[f"{stat}_s"] * 1e6
    if kind == "send_recv":
        return figures["nbytes"] / figures[f"{stat}_s"] / 1e6
    if kind == "store_init":
        return figures["init_s"]
    raise ValueError(f"unknown point {key!r}")


def unit_of(key: str) -> str:
    kind = key.split(" ", 1)[0]
    return {"send_recv": "MB/s", "store_init": "s"}.get(kind, "us")


@dataclass
class Row:
    key: str
    product: float  # median over rounds of the product's headline figure
    peer: float
    ratio: float  # median over rounds of product / peer, round by round
    ratio_min: float
    ratio_max: float
    rounds: int
    mean_ratio: float | None = None  # the same, from the means (collectives, send_recv)
    note: str = ""
    ratios: list[float] = field(default_factory=list)


def ratio_rows(rounds: list[dict[str, dict[str, dict]]]) -> list[Row]:
    """One row per point from per-round {"product": points, "peer": points}.

    Ratios are taken within a round (neighbouring measurements), then summarized over rounds:
    the median and the smallest and largest. A point missing on one side in a round is left
    out of that round; a point never measured by both sides gets no row.
    """
    keys: list[str] = []
    for r in rounds:
        for k in list(r.get("product", {})) + list(r.get("peer", {})):
            if k not in keys:
                keys.append(k)
    rows = []
    for key in keys:
        prod, peer, ratios, mean_ratios, slow = [], [], [], [], []
        for r in rounds:
            a, b = r.get("product", {}).get(key), r.get("peer", {}).get(key)
            if a is None or b is None:
                continue
            fa, fb = headline(key, a), headline(key, b)
            if fb <= 0 or fa <= 0:
                continue
            prod.append(fa)
            peer.append(fb)
            ratios.append(fa / fb)
            if "mean_s" in a and "mean_s" in b:
                mean_ratios.append(headline(key, a, "mean") / headline(key, b, "mean"))
            if "slow" in a and "slow" in b:
                slow.append(f"{a['slow']}:{b['slow']}")
        if not ratios:
            continue
        rows.append(Row(key=key, product=statistics.median(prod), peer=statistics.median(peer),
                        ratio=statistics.median(ratios), ratio_min=min(ratios),
                        ratio_max=max(ratios), rounds=len(ratios),
                        mean_ratio=statistics.median(mean_ratios) if mean_ratios else None,
                        note=("slow>1s product:peer " + " ".join(slow)) if slow else "",
                        ratios=ratios))
    return rows


def _fmt(x: float) -> str:
    if x >= 1000:
        return f"{x:,.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.3g}"


def format_table(rows: list[Row]) -> str:
    head = (f"{'point':<28} {'unit':>4} {'product':>10} {'peer':>10} {'ratio':>6} "
            f"{'min-max':>13} {'mean ratio':>10} {'rounds':>6}  note")
    lines = [head, "-" * len(head)]
    for r in rows:
        mean = f"{r.mean_ratio:.2f}" if r.mean_ratio is not None else "-"
        lines.append(f"{r.key:<28} {unit_of(r.key):>4} {_fmt(r.product):>10} {_fmt(r.peer):>10} "
                     f"{r.ratio:6.2f} {f'{r.ratio_min:.2f}-{r.ratio_max:.2f}':>13} {mean:>10} "
                     f"{r.rounds:>6}  {r.note}".rstrip())
    return "\n".join(lines)


def markdown_table(rows: list[Row]) -> str:
    lines = ["| point | unit | product | peer | ratio (median) | min-max | mean ratio | rounds |"
             " note |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        mean = f"{r.mean_ratio:.2f}" if r.mean_ratio is not None else "-"
        lines.append(f"| {r.key} | {unit_of(r.key)} | {_fmt(r.product)} | {_fmt(r.peer)} | "
                     f"{r.ratio:.2f} | {r.ratio_min:.2f}-{r.ratio_max:.2f} | {mean} | "
                     f"{r.rounds} | {r.note} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- the product


def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run_product(args: list[str], timeout: float) -> dict[str, dict]:
    """One pytest --distbench session; its points, read from the results file."""
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        out = Path(tmp) / "run.json"
        cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--distbench",
               *args, f"--distbench-json={out}"]
        done = subprocess.run(cmd, cwd=tmp, env=subprocess_env(), capture_output=True,
                              text=True, timeout=timeout)
        if done.returncode != 0 or not out.exists():
            raise RuntimeError(f"product session failed ({done.returncode}): "
                               f"{' '.join(cmd)}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        return product_points(json.loads(out.read_text()))


def product_collectives(cfg: Config) -> dict[str, dict]:
    return run_product(["--pyargs", "pytest_distbench.suites.test_collectives",
                        "-k", " or ".join(f"test_{c}" for c in COLLECTIVES),
                        f"--world-size={','.join(map(str, cfg.world_sizes))}",
                        f"--tensor-size={','.join(SIZE_NAMES[s] for s in cfg.sizes)}",
                        f"--distbench-warmup={cfg.warmup}", f"--distbench-budget={cfg.budget}s",
                        f"--distbench-min-iterations={cfg.min_iterations}",
                        *cfg.product_options], timeout=900)


def product_p2p(cfg: Config) -> dict[str, dict]:
    return run_product(["--pyargs", "pytest_distbench.suites.test_p2p", "-k", "p2p_bandwidth",
                        "--world-size=2", f"--tensor-size={cfg.p2p_bytes}B",
                        "--distbench-window=1", f"--distbench-warmup={cfg.warmup}",
                        f"--distbench-iterations={cfg.p2p_iterations}", *cfg.product_options],
                       timeout=900)


def product_store(cfg: Config) -> dict[str, dict]:
    return run_product(["--pyargs", "pytest_distbench.suites.test_store", "-k", "store_init",
                        f"--distbench-store-clients={','.join(map(str, cfg.store_clients))}",
                        f"--distbench-store-backend={','.join(cfg.store_backends)}"], timeout=900)


# --------------------------------------------------------------------------- the peer


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _place(rank: int, bind: str) -> None:
    """--peer-bind core: this thread on one CPU, round robin (what the product's `core` does,
    after the process group, so gloo's own threads stay free); none: left to the scheduler."""
    if bind == "core" and hasattr(os, "sched_setaffinity"):
        usable = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {usable[rank % len(usable)]})


def _peer_collectives_rank(rank: int, world_size: int, port: int, cfg: dict, out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    _place(rank, cfg.get("peer_bind", "none"))
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    points = {}
    for name in COLLECTIVES:
        for nbytes in cfg["sizes"]:
            n_in, n_out, reported, factor = collective_layout(name, nbytes, world_size)
            if name == "all_reduce":
                x = torch.ones(n_in)

                def call(x=x):
                    dist.all_reduce(x)
            else:
                inp, outp = torch.full((n_in,), float(rank + 1)), torch.empty(n_out)

                def call(inp=inp, outp=outp):
                    gather(outp, inp)
            warm = []
            for _ in range(cfg["warmup"]):
                t0 = time.perf_counter()
                call()
                warm.append(time.perf_counter() - t0)
            est = torch.tensor([statistics.median(warm) if warm else 1e-3], dtype=torch.float64)
            dist.all_reduce(est, op=dist.ReduceOp.MAX)
            iters = int(min(max(cfg["budget"] / max(est.item(), 1e-9), cfg["min_iterations"]),
                            cfg["max_iterations"]))
            dist.barrier()
            times = [0.0] * iters
            clock = time.perf_counter
            for i in range(iters):
                t0 = clock()
                call()
                times[i] = clock() - t0
            mine = torch.tensor(times, dtype=torch.float64)
            every = [torch.empty_like(mine) for _ in range(world_size)]
            dist.all_gather(every, mine)
            if rank == 0:
                per_iter = slowest_rank([t.tolist() for t in every])
                points[point_key(name, f"ws{world_size}", nbytes)] = {
                    **summarize(per_iter), "nbytes": reported, "busbw_factor": factor}
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps(points))


def _peer_p2p_rank(rank: int, port: int, cfg: dict, out: str) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    _place(rank, cfg.get("peer_bind", "none"))
    tensor = torch.ones(cfg["p2p_bytes"] // ELEMENT)  # the seed: torch.ones(size_mb*250*1000)
    times = []
    for i in range(cfg["warmup"] + cfg["p2p_iterations"]):
        t0 = time.perf_counter()
        if rank == 0:
            dist.send(tensor, dst=1)
        else:
            dist.recv(tensor, src=0)
        elapsed = time.perf_counter() - t0
        if i >= cfg["warmup"]:
            times.append(elapsed)
    mine = torch.tensor(times, dtype=torch.float64)
    every = [torch.empty_like(mine) for _ in range(2)]
    dist.all_gather(every, mine)
    dist.destroy_process_group()
    if rank == 0:
        ranks = [t.tolist() for t in every]
        receiver = summarize(ranks[1])  # what the seed prints: "Process 1 transferred ..."
        Path(out).write_text(json.dumps({point_key("send_recv", "ws2", cfg["p2p_bytes"]): {
            **summarize(slowest_rank(ranks)), "nbytes": cfg["p2p_bytes"],
            "receiver_p50_s": receiver["p50_s"], "receiver_mean_s": receiver["mean_s"]}}))


def _spawn(fn, nprocs: int, args: tuple) -> None:
    import torch.multiprocessing as mp

    mp.start_processes(fn, args=args, nprocs=nprocs, start_method="spawn", join=True)


def peer_collectives(cfg: Config) -> dict[str, dict]:
    points: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        for ws in cfg.world_sizes:
            out = Path(tmp) / f"ws{ws}.json"
            _run_peer("collectives", cfg, out, world_size=ws)
            points.update(json.loads(out.read_text()))
    return points


def peer_p2p(cfg: Config) -> dict[str, dict]:
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        out = Path(tmp) / "p2p.json"
        _run_peer("p2p", cfg, out)
        return json.loads(out.read_text())


def peer_store(cfg: Config) -> dict[str, dict]:
    points = {}
    with tempfile.TemporaryDirectory(prefix="bench_peers_") as tmp:
        for clients in cfg.store_clients:
            for backend in cfg.store_backends:
                for variant in cfg.store_variants:
                    out = Path(tmp) / f"store-{clients}-{backend}-{variant}.json"
                    _run_peer("store", cfg, out, clients=clients, backend=backend,
                              prelisten=variant == "prelisten")
                    points.update(json.loads(out.read_text()))
    return points


def product_store_points(cfg: Config) -> dict[str, dict]:
    """The product's store figures, under every peer variant's key too."""
    points = product_store(cfg)
    for key in list(points):
        for variant in cfg.store_variants:
            if variant != "seed":
                points[f"{key} {variant}"] = points[key]
    if "seed" not in cfg.store_variants:
        points = {k: v for k, v in points.items() if k.count(" ") > 2}
    return points


def _run_peer(kind: str, cfg: Config, out: Path, **extra) -> None:
    """The peer in a fresh interpreter (this driver never imports torch)."""
    spec = {**cfg.as_dict(), **extra}
    cmd = [sys.executable, __file__, "--peer", kind, "--peer-spec", json.dumps(spec),
           "--peer-out", str(out)]
    done = subprocess.run(cmd, env=subprocess_env(), capture_output=True, text=True,
                          timeout=900)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError(f"peer {kind} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}{done.stderr[-2000:]}")


def _store_client(go_r: int, done_r: int, res_w: int, port: int, clients: int,
                  libuv: bool, timeout_s: float) -> None:
    """A forked client process: wait for the start, construct the client store, report."""
    from datetime import timedelta

    import torch.distributed as dist

    code = 0
    try:
        os.read(go_r, 1)  # EOF when the parent closes its end: every client starts at once
        t0 = time.perf_counter()
        store = dist.TCPStore("127.0.0.1", port, world_size=clients, is_master=False,
                              timeout=timedelta(seconds=timeout_s), use_libuv=libuv)
        elapsed = time.perf_counter() - t0
        os.write(res_w, struct.pack("d", elapsed))
        os.read(done_r, 1)  # stay connected until the server's constructor has returned
        del store
    except BaseException:
        os.write(res_w, struct.pack("d", -1.0))
        code = 1
    os._exit(code)


def peer_store_init(clients: int, backend: str, timeout_s: float,
                    prelisten: bool = False) -> dict:
    """The seed's init: one server, clients - 1 client processes, the server's time.

    prelisten: the server's socket listens on 127.0.0.1 before the clients start and is
    handed to the store (master_listen_fd), as the product does; without it the server binds
    its port inside the timed constructor, as the seed's script does, and clients that get
    there first are refused and retry with the client's back-off.
    """
    from datetime import timedelta

    import torch.distributed as dist

    libuv = backend == "libuv"
    listener = None
    if prelisten:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(max(128, clients))
        port = listener.getsockname()[1]
    else:
        port = free_port()
    go_r, go_w = os.pipe()
    done_r, done_w = os.pipe()
    res_r, res_w = os.pipe()
    pids = []
    for _ in range(clients - 1):
        pid = os.fork()
        if pid == 0:
            os.close(go_w)
            os.close(done_w)
            os.close(res_r)
            _store_client(go_r, done_r, res_w, port, clients, libuv, timeout_s)
        pids.append(pid)
    os.close(go_r)
    os.close(done_r)
    os.close(res_w)
    os.close(go_w)  # go: the clients and the server start together, as the seed's ranks do
    extra = {"master_listen_fd": listener.detach()} if listener is not None else {}
    t0 = time.perf_counter()
    server = dist.TCPStore("127.0.0.1", port, world_size=clients, is_master=True,
                           timeout=timedelta(seconds=timeout_s), use_libuv=libuv, **extra)
    init_s = time.perf_counter() - t0
    ran = "libuv" if server.libuvBackend else "legacy"
    connects = []
    with os.fdopen(res_r, "rb") as results:
        for _ in range(clients - 1):
            connects.append(struct.unpack("d", results.read(8))[0])
    os.close(done_w)
    for pid in pids:
        os.waitpid(pid, 0)
    del server
    failed = sum(c < 0 for c in connects)
    if failed:
        raise RuntimeError(f"{failed} of {clients - 1} store clients failed")
    return {point_key("store_init", clients, ran) + (" prelisten" if prelisten else ""): {
        "init_s": init_s, "slow": sum(c > 1.0 for c in connects),
        "connect_p50_s": percentile(connects, 50)}}


def peer_main(kind: str, spec: dict, out: str) -> None:
    if kind == "collectives":
        ws = spec["world_size"]
        _spawn(_peer_collectives_rank, ws, (ws, free_port(), spec, out))
    elif kind == "p2p":
        _spawn(_peer_p2p_rank, 2, (free_port(), spec, out))
    elif kind == "store":
        point = peer_store_init(spec["clients"], spec["backend"], spec["store_timeout"],
                                prelisten=spec.get("prelisten", False))
        Path(out).write_text(json.dumps(point))
    else:
        raise SystemExit(f"unknown peer {kind!r}")


# --------------------------------------------------------------------------- the run


@dataclass
class Config:
    rounds: int = 3
    world_sizes: tuple[int, ...] = WORLD_SIZES
    sizes: tuple[int, ...] = SIZES
    warmup: int = 5
    budget: float = 0.3
    min_iterations: int = 10
    max_iterations: int = 10000
    p2p_bytes: int = P2P_BYTES
    p2p_iterations: int = 20
    store_clients: tuple[int, ...] = STORE_CLIENTS
    store_backends: tuple[str, ...] = STORE_BACKENDS
    store_timeout: float = 120.0
    store_variants: tuple[str, ...] = ("seed",)
    product_options: tuple[str, ...] = ()  # extra pytest options of the product's sessions
    peer_bind: str = "none"
    kinds: tuple[str, ...] = ("collectives", "p2p", "store")

    def as_dict(self) -> dict:
        return {"sizes": list(self.sizes), "warmup": self.warmup, "budget": self.budget,
                "min_iterations": self.min_iterations, "max_iterations": self.max_iterations,
                "p2p_bytes": self.p2p_bytes, "p2p_iterations": self.p2p_iterations,
                "store_timeout": self.store_timeout, "peer_bind": self.peer_bind}


SIDES = {
    "collectives": (product_collectives, peer_collectives),
    "p2p": (product_p2p, peer_p2p),
    "store": (product_store_points, peer_store),
}


def load_average() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def run(cfg: Config, log=print) -> list[dict[str, dict[str, dict]]]:
    rounds = []
    for r in range(cfg.rounds):
        got: dict[str, dict[str, dict]] = {"product": {}, "peer": {}}
        for kind in cfg.kinds:
            product, peer = SIDES[kind]
            order = [("product", product), ("peer", peer)]
            if r % 2:
                order.reverse()
            for side, fn in order:
                began = time.perf_counter()
                got[side].update(fn(cfg))
                log(f"round {r + 1}/{cfg.rounds} {kind:<11} {side:<7} "
                    f"{time.perf_counter() - began:6.1f} s  (load {load_average()})")
        rounds.append(got)
    return rounds


def config_from(ns: argparse.Namespace) -> Config:
    cfg = Config(rounds=ns.rounds)
    if ns.quick:
        cfg = Config(rounds=ns.rounds if ns.rounds_given else 2, world_sizes=(2,),
                     sizes=(4, 1 << 20), budget=0.1, min_iterations=5, p2p_iterations=5,
                     warmup=2, store_clients=(16,), store_backends=("libuv",))
    if ns.product_bind:
        cfg.product_options = (f"--distbench-bind={ns.product_bind}",)
    if ns.peer_bind:
        cfg.peer_bind = ns.peer_bind
    if ns.sizes:
        cfg.sizes = tuple(int(x) for x in ns.sizes.split(","))
        if set(cfg.sizes) - set(SIZE_NAMES):
            raise SystemExit(f"--sizes: choose from {sorted(SIZE_NAMES)}")
    if ns.world_sizes:
        cfg.world_sizes = tuple(int(x) for x in ns.world_sizes.split(","))
    if ns.store_clients:
        cfg.store_clients = tuple(int(c) for c in ns.store_clients.split(","))
    if ns.store_variants:
        cfg.store_variants = tuple(ns.store_variants.split(","))
        if set(cfg.store_variants) - {"seed", "prelisten"}:
            raise SystemExit("--store-variants: seed, prelisten or both")
    if ns.kinds:
        cfg.kinds = tuple(ns.kinds.split(","))
        unknown = set(cfg.kinds) - set(SIDES)
        if unknown:
            raise SystemExit(f"--kinds: unknown {sorted(unknown)}; choose from {sorted(SIDES)}")
    return cfg


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=None,
                        help="alternating rounds (default 3; 2 with --quick)")
    parser.add_argument("--quick", action="store_true",
                        help="one world size, 4 B and 1 MiB, 100 MB x 5, 16 libuv clients")
    parser.add_argument("--kinds", help="comma list of collectives,p2p,store (default all)")
    parser.add_argument("--product-bind", choices=("auto", "core", "pack", "none"),
                        help="--distbench-bind of the product's collectives and p2p sessions "
                             "(default: the product's own, auto = core)")
    parser.add_argument("--peer-bind", choices=("none", "core"),
                        help="the peer's placement: none (default, a plain torch script) or "
                             "core (each rank's main thread on one CPU, as the product's core)")
    parser.add_argument("--sizes", help="collective sizes in bytes, from 4,65536,1048576,16777216")
    parser.add_argument("--world-sizes", help="collective world sizes (default 2,4)")
    parser.add_argument("--store-clients", help="comma list of client counts (default 64,256)")
    parser.add_argument("--store-variants",
                        help="peer store start: seed (the server binds inside the timed "
                             "constructor, as the seed's script; default), prelisten (listens "
                             "before the clients start, as the product), or both")
    parser.add_argument("--res-options",
                        help="RES_OPTIONS for every process of both sides, e.g. "
                             "'timeout:1 attempts:1' (shortens the resolver stalls, docs/store.md)")
    parser.add_argument("--json", help="write every round's figures and the rows here")
    parser.add_argument("--markdown", action="store_true", help="also print a markdown table")
    parser.add_argument("--peer", help=argparse.SUPPRESS)
    parser.add_argument("--peer-spec", help=argparse.SUPPRESS)
    parser.add_argument("--peer-out", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    if ns.peer:
        peer_main(ns.peer, json.loads(ns.peer_spec), ns.peer_out)
        return
    ns.rounds_given = ns.rounds is not None
    ns.rounds = ns.rounds if ns.rounds is not None else 3
    cfg = config_from(ns)
    if ns.res_options:
        os.environ["RES_OPTIONS"] = ns.res_options
    began = time.perf_counter()
    print(f"bench_peers: {cfg.rounds} rounds of {', '.join(cfg.kinds)}; "
          f"{os.cpu_count()} CPUs, load {load_average()}; "
          f"RES_OPTIONS={os.environ.get('RES_OPTIONS', '(unset)')}", flush=True)
    rounds = run(cfg, log=lambda line: print(line, flush=True))
    rows = ratio_rows(rounds)
    print()
    print("ratio = product / peer within a round; collectives: us per call, p50 of the slowest "
          "rank per iteration;\nsend_recv: MB/s of the p50 transfer; store_init: the server's "
          "constructor (s). 'mean ratio' uses the means.")
    print(format_table(rows))
    if ns.markdown:
        print()
        print(markdown_table(rows))
    print(f"\n{time.perf_counter() - began:.0f} s in all, load {load_average()}")
    if ns.json:
        Path(ns.json).write_text(json.dumps({"config": cfg.as_dict(), "rounds": rounds,
                                             "rows": [r.__dict__ for r in rows]}, indent=1))


if __name__ == "__main__":
    main()
