"""agent_observer: PyTorch's RPC reinforcement-learning benchmark, rebuilt on the plugin.

Roles follow the seed (benchmarks/distributed/rpc/rl): rank 0 is the coordinator, rank 1 the
agent, ranks 2..n-1 the observers.  Each episode the coordinator asks every observer to run
`steps` steps; a step sends the observer's state to the agent with `rpc_sync` and waits for an
action.  The agent runs a policy network (Flatten, Linear(prod(state), out), `nlayers` x
Linear(out, out), softmax) and samples an action:

- batch mode: it waits until every observer's state of this step has arrived, runs the policy
  once on the stacked states, and answers all of them (an async-execution RPC, so no thread
  waits); agent latency = first request of the batch received -> actions selected, batch size
  = number of observers;
- otherwise: one forward pass per request; agent latency = that pass, batch size 1.

Observer latency is the observer's `rpc_sync` round trip.  Throughputs are derived per sample
(metrics.py).  The coordinator gathers every sample; all ranks then hand the same samples to
`distbench.record`, one record for the agent latency and one for the observer latency, both
carrying the four metrics at p50/p75/p90/p95 in their figures.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.rpc as rpc
from torch import nn
from torch.distributions import Categorical

from . import metrics

FAMILY = "agent_observer"
COORDINATOR = 0
AGENT = 1
FIRST_OBSERVER = 2


def build_policy(state_size: tuple[int, ...], nlayers: int, out_features: int) -> nn.Module:
    return nn.Sequential(
        nn.Flatten(1, -1),
        nn.Linear(math.prod(state_size), out_features),
        *[nn.Linear(out_features, out_features) for _ in range(nlayers)],
        nn.Softmax(dim=-1),
    )


class Agent:
    """Lives on rank 1; observers reach it through an RRef."""

    def __init__(self, observers: int, batch: bool, state_size: tuple[int, ...], nlayers: int,
                 out_features: int) -> None:
        self.observers = observers
        self.batch = batch
        self.policy = build_policy(tuple(state_size), nlayers, out_features)
        self.states = torch.zeros(observers, *state_size)
        self.lock = threading.Lock()
        self.waiting = 0
        self.batch_started = 0.0
        self.actions: torch.futures.Future = torch.futures.Future()
        self.latencies: list[float] = []
        self.log_probs: list[torch.Tensor] = []  # kept for the episode, as a trainer would

    def _sample(self, states: torch.Tensor) -> torch.Tensor:
        distribution = Categorical(self.policy(states))
        actions = distribution.sample()
        self.log_probs.append(distribution.log_prob(actions))
        return actions

    @staticmethod
    @rpc.functions.async_execution
    def select_batch(agent_rref: Any, slot: int, state: torch.Tensor) -> torch.futures.Future:
        agent: Agent = agent_rref.local_value()
        with agent.lock:
            if agent.waiting == 0:
                agent.batch_started = time.perf_counter()
            agent.states[slot].copy_(state)
            answer = agent.actions.then(lambda fut: int(fut.value()[slot]))
            agent.waiting += 1
            if agent.waiting == agent.observers:
                actions = agent._sample(agent.states)
                agent.latencies.append(time.perf_counter() - agent.batch_started)
                agent.waiting = 0
                done, agent.actions = agent.actions, torch.futures.Future()
            else:
                done = None
        if done is not None:
            done.set_result(actions)  # outside the lock: it runs the waiting callbacks
        return answer

    @staticmethod
    def select_one(agent_rref: Any, slot: int, state: torch.Tensor) -> int:
        agent: Agent = agent_rref.local_value()
        started = time.perf_counter()
        action = agent._sample(state.unsqueeze(0))
        latency = time.perf_counter() - started
        with agent.lock:
            agent.latencies.append(latency)
        return int(action[0])

    def end_episode(self) -> list[float]:
        """The episode's agent latencies; forget them and the kept log-probabilities."""
        with self.lock:
            latencies, self.latencies, self.log_probs = self.latencies, [], []
        return latencies


class Observer:
    """Lives on each observer rank; a random environment of fixed state shape."""

    def __init__(self, slot: int, state_size: tuple[int, ...], batch: bool) -> None:
        self.slot = slot
        self.state_size = tuple(state_size)
        self.select = Agent.select_batch if batch else Agent.select_one

    def run_episode(self, agent_rref: Any, steps: int) -> list[float]:
        """`steps` steps; the latency of each select-action round trip, seconds."""
        latencies = []
        state = torch.rand(self.state_size)
        for _ in range(steps):
            started = time.perf_counter()
            rpc.rpc_sync(agent_rref.owner(), self.select, args=(agent_rref, self.slot, state))
            latencies.append(time.perf_counter() - started)
            state = torch.rand(self.state_size)  # the environment's next state
        return latencies


def coordinate(names: list[str], *, batch: bool, state_size: tuple[int, ...], nlayers: int,
               out_features: int, episodes: int, steps: int) -> dict[str, Any]:
    """Run the episodes from the coordinator; return every agent and observer latency."""
    observers = len(names) - FIRST_OBSERVER
    agent = rpc.remote(names[AGENT], Agent,
                       args=(observers, batch, state_size, nlayers, out_features))
    observer_refs = [
        rpc.remote(names[FIRST_OBSERVER + slot], Observer, args=(slot, state_size, batch))
        for slot in range(observers)
    ]
    agent_latencies: list[float] = []
    observer_latencies: list[float] = []
    episode_s = []
    for _ in range(episodes):
        began = time.perf_counter()
        runs = [ref.rpc_async().run_episode(agent, steps) for ref in observer_refs]
        for latencies in torch.futures.wait_all(runs):
            observer_latencies.extend(latencies)
        agent_latencies.extend(agent.rpc_sync().end_episode())
        episode_s.append(time.perf_counter() - began)
    return {"agent": agent_latencies, "observer": observer_latencies, "episode_s": episode_s}


def run_agent_observer(distbench: Any, rpc_agent: Any, *, batch: bool,
                       state_size: tuple[int, ...], nlayers: int, out_features: int,
                       episodes: int, steps: int) -> None:
    import pytest

    if rpc_agent.world_size < 3:
        pytest.skip("agent/observer needs a coordinator, an agent and at least one observer: "
                    "--world-size >= 3")
    state_size = tuple(state_size)
    began = time.perf_counter()
    result = None
    if rpc_agent.rank == COORDINATOR:
        result = coordinate(rpc_agent.worker_names, batch=batch, state_size=state_size,
                            nlayers=nlayers, out_features=out_features, episodes=episodes,
                            steps=steps)
        result["run_s"] = time.perf_counter() - began
    # The others serve from their RPC threads meanwhile; this blocking call releases the GIL.
    box = [result]
    dist.broadcast_object_list(box, src=COORDINATOR)
    result = box[0]
    observers = rpc_agent.world_size - FIRST_OBSERVER
    batch_size = observers if batch else 1
    figures = {
        "batch": batch, "state_size": list(state_size), "nlayers": nlayers,
        "out_features": out_features, "episodes": episodes, "steps": steps,
        "observers": observers, "batch_size": batch_size, "run_s": result["run_s"],
        "episode_s": result["episode_s"],
        "tensorpipe_transports": list(rpc_agent.transports or ["default"]),
        "metrics": metrics.agent_observer_metrics(result["agent"], result["observer"],
                                                  batch_size),
    }
    distbench.record(result["agent"], family=FAMILY, name="agent_latency",
                     figures={**figures, "metric": "agent_latency"})
    distbench.record(result["observer"], family=FAMILY, name="observer_latency",
                     figures={**figures, "metric": "observer_latency"})
