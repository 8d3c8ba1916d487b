"""RPC benchmarks written by hand with torch alone: the reference bench_rpc.py compares against.

    python benchmarks/rpc_by_hand.py latency ITERATIONS WARMUP [pin]
    python benchmarks/rpc_by_hand.py agent_observer WORLD_SIZE EPISODES STEPS [uv]

Prints one JSON line.  No pytest, no plugin: processes forked with multiprocessing, TensorPipe
started with a tcp:// rendezvous on 127.0.0.1, the timing loop inline.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import socket
import statistics
import sys
import threading
import time

import torch
import torch.distributed.rpc as rpc
from torch import nn
from torch.distributions import Categorical

STATE = (10, 20, 10)
NLAYERS = 5
OUT = 10


def echo(t):
    return t


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank: int, world_size: int, port: int, transports=None) -> None:
    options = rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}",
                                              rpc_timeout=300, _transports=transports)
    rpc.init_rpc(f"w{rank}", rank=rank, world_size=world_size, rpc_backend_options=options)


def latency_rank(rank, port, iterations, warmup, pin, queue) -> None:
    if pin:  # as the plugin's --distbench-bind=core: rank r on the r-th usable CPU
        import os

        usable = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {usable[rank % len(usable)]})
    _init(rank, 2, port)
    if rank == 0:
        data = torch.zeros(1, dtype=torch.float32)  # 4 bytes
        for _ in range(warmup):
            rpc.rpc_sync("w1", echo, args=(data,))
        samples = []
        for _ in range(iterations):
            began = time.perf_counter()
            rpc.rpc_sync("w1", echo, args=(data,))
            samples.append(time.perf_counter() - began)
        queue.put({"p50_s": statistics.median(samples), "n": iterations})
    rpc.shutdown()


class Agent:
    def __init__(self, observers: int) -> None:
        self.policy = nn.Sequential(nn.Flatten(1, -1), nn.Linear(math.prod(STATE), OUT),
                                    *[nn.Linear(OUT, OUT) for _ in range(NLAYERS)],
                                    nn.Softmax(dim=0))  # the seed's dim, as the plugin's
        self.observers = observers
        self.states = torch.zeros(observers, *STATE)
        self.lock = threading.Lock()
        self.count = 0
        self.first = 0.0
        self.future = torch.futures.Future()
        self.latencies: list[float] = []
        self.kept: list[torch.Tensor] = []

    @staticmethod
    @rpc.functions.async_execution
    def act(agent_rref, slot, state):
        me = agent_rref.local_value()
        with me.lock:
            if me.count == 0:
                me.first = time.perf_counter()
            me.states[slot].copy_(state)
            reply = me.future.then(lambda f: int(f.value()[slot]))
            me.count += 1
            if me.count == me.observers:
                d = Categorical(me.policy(me.states))
                actions = d.sample()
                me.kept.append(d.log_prob(actions))
                me.count = 0
                ready, me.future = me.future, torch.futures.Future()
                ready.set_result(actions)  # answers every observer before the clock stops
                me.latencies.append(time.perf_counter() - me.first)
        return reply

    def drain(self):
        out, self.latencies, self.kept = self.latencies, [], []
        return out


class Observer:
    def __init__(self, slot: int) -> None:
        self.slot = slot

    def episode(self, agent_rref, steps: int):
        out = []
        for _ in range(steps):
            began = time.perf_counter()
            rpc.rpc_sync(agent_rref.owner(), Agent.act,
                         args=(agent_rref, self.slot, torch.rand(STATE)))
            out.append(time.perf_counter() - began)
        return out


def agent_observer_rank(rank, world_size, port, episodes, steps, transports, queue) -> None:
    _init(rank, world_size, port, transports)
    if rank == 0:
        began = time.perf_counter()
        observers = world_size - 2
        agent = rpc.remote("w1", Agent, args=(observers,))
        obs = [rpc.remote(f"w{r}", Observer, args=(r - 2,)) for r in range(2, world_size)]
        agent_lat: list[float] = []
        obs_lat: list[float] = []
        for _ in range(episodes):
            for lat in torch.futures.wait_all([o.rpc_async().episode(agent, steps) for o in obs]):
                obs_lat.extend(lat)
            agent_lat.extend(agent.rpc_sync().drain())
        queue.put({"agent_p50_s": statistics.median(agent_lat),
                   "observer_p50_s": statistics.median(obs_lat),
                   "run_s": time.perf_counter() - began})
    rpc.shutdown()


def _run(target, world_size: int, *args):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(r, *args, queue)) for r in range(world_size)]
    for p in procs:
        p.start()
    result = queue.get(timeout=600)
    for p in procs:
        p.join(120)
    return result


def main() -> None:
    what = sys.argv[1]
    began = time.perf_counter()
    if what == "latency":
        result = _run(latency_rank, 2, _free_port(), int(sys.argv[2]), int(sys.argv[3]),
                      sys.argv[4:] == ["pin"])
    else:
        world_size, episodes, steps = (int(x) for x in sys.argv[2:5])
        transports = ["uv"] if sys.argv[5:] == ["uv"] else None
        result = _run(agent_observer_rank, world_size, world_size, _free_port(), episodes,
                      steps, transports)
    result["wall_s"] = time.perf_counter() - began
    print(json.dumps(result))


if __name__ == "__main__":
    main()
