"""agent_observer: PyTorch's RPC reinforcement-learning benchmark, rebuilt on the plugin.

Roles follow the seed (benchmarks/distributed/rpc/rl): rank 0 is the coordinator, rank 1 the
agent, ranks 2..n-1 the observers.  Each episode the coordinator asks every observer to run
`steps` steps; a step sends the observer's state to the agent with `rpc_sync`, waits for an
action, then makes the environment's next state (`torch.rand` of the state shape) and a
reward (0 or 1, kept in the episode's reward tensor).  The agent runs the seed's policy
(Flatten, Linear(prod(state), out), `nlayers` x Linear(out, out), then softmax over dim 0, as
the seed does) and samples an action from a Categorical over its output:

- batch mode: each request copies its state into the agent's batch and chains its answer onto
  the step's future; the request that completes the batch runs the policy once on the stacked
  states, samples, keeps the log-probabilities, resolves the step's future (which answers
  every observer) and only then stops the clock, all under the agent's lock, as the seed does;
  agent latency = first request of the batch received -> every request answered, batch size =
  number of observers;
- otherwise: one forward pass per request on `state.float().unsqueeze(0)`; agent latency =
  that pass with its sampling and its kept log-probability, batch size 1.

Kept across steps and episodes, as in the seed: the log-probabilities (one list per step in
batch mode, one list per observer otherwise; never cleared during the run), the policy and an
Adam optimizer over it (built, never stepped), the episode's rewards (handed to the agent's
end of episode with the observers' returns).  The agent's latencies are reset per episode.

Observer latency is the observer's `rpc_sync` round trip.  Throughputs are derived per sample
(metrics.py).  The coordinator gathers every sample; all ranks then hand the same samples to
`distbench.record`, one record for the agent latency and one for the observer latency, both
carrying the four metrics at p50/p75/p90/p95 in their figures.
"""

from __future__ import annotations

import math
import random
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
SOFTMAX_DIM = 0  # the seed's: over the batch dimension; Categorical renormalises each row


def build_policy(state_size: tuple[int, ...], nlayers: int, out_features: int) -> nn.Module:
    return nn.Sequential(
        nn.Flatten(1, -1),
        nn.Linear(math.prod(state_size), out_features),
        *[nn.Linear(out_features, out_features) for _ in range(nlayers)],
        nn.Softmax(dim=SOFTMAX_DIM),
    )


class Agent:
    """Lives on rank 1; observers reach it through an RRef."""

    def __init__(self, observers: int, batch: bool, state_size: tuple[int, ...], nlayers: int,
                 out_features: int) -> None:
        self.observers = observers
        self.batch = batch
        self.policy = build_policy(tuple(state_size), nlayers, out_features)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=1e-2)  # as the seed
        self.states = torch.zeros(observers, *state_size)
        self.lock = threading.Lock()
        self.pending = observers
        self.batch_started = 0.0
        self.actions: torch.futures.Future = torch.futures.Future()
        self.latencies: list[float] = []
        # Kept for the whole run, as the seed keeps them (a trainer would use them).
        self.log_probs: list[torch.Tensor] | dict[int, list[torch.Tensor]] = (
            [] if batch else {slot: [] for slot in range(observers)})
        self.rewards: dict[int, list[torch.Tensor]] = {slot: [] for slot in range(observers)}

    @staticmethod
    @rpc.functions.async_execution
    def select_batch(agent_rref: Any, slot: int, state: torch.Tensor) -> torch.futures.Future:
        agent: Agent = agent_rref.local_value()
        # Outside the lock, as in the seed: no observer sends its next state before the step's
        # future is resolved, and the future is replaced only by this step's last request.
        agent.states[slot].copy_(state)
        answer = agent.actions.then(lambda fut: fut.wait()[slot].item())
        with agent.lock:
            if agent.pending == agent.observers:
                agent.batch_started = time.perf_counter()
            agent.pending -= 1
            if agent.pending == 0:
                agent.pending = agent.observers
                distribution = Categorical(agent.policy(agent.states))
                actions = distribution.sample()
                agent.log_probs.append(distribution.log_prob(actions).t())
                done, agent.actions = agent.actions, torch.futures.Future()
                done.set_result(actions)  # runs every observer's callback: their answers
                agent.latencies.append(time.perf_counter() - agent.batch_started)
        return answer

    @staticmethod
    def select_one(agent_rref: Any, slot: int, state: torch.Tensor) -> int:
        agent: Agent = agent_rref.local_value()
        started = time.perf_counter()
        distribution = Categorical(agent.policy(state.float().unsqueeze(0)))
        action = distribution.sample()
        agent.log_probs[slot].append(distribution.log_prob(action))
        latency = time.perf_counter() - started
        with agent.lock:
            agent.latencies.append(latency)
        return action.item()

    def end_episode(self, rewards: list[torch.Tensor]) -> list[float]:
        """The episode's agent latencies (forgotten here); keep the observers' rewards."""
        with self.lock:
            latencies, self.latencies = self.latencies, []
            for slot, episode_rewards in enumerate(rewards):
                self.rewards[slot].append(episode_rewards)
        return latencies


class Observer:
    """Lives on each observer rank; a random environment of fixed state shape."""

    def __init__(self, slot: int, state_size: tuple[int, ...], batch: bool) -> None:
        self.slot = slot
        self.state_size = tuple(state_size)
        self.select = Agent.select_batch if batch else Agent.select_one

    def step(self, action: int) -> tuple[torch.Tensor, int]:
        """The environment's next state and a reward (random, as the seed's)."""
        return torch.rand(self.state_size), random.randint(0, 1)

    def run_episode(self, agent_rref: Any, steps: int) -> tuple[torch.Tensor, list[float]]:
        """`steps` steps; the episode's rewards and each select-action round trip, seconds."""
        rewards = torch.zeros(steps)
        latencies = []
        state = torch.rand(self.state_size)
        for step in range(steps):
            started = time.perf_counter()
            action = rpc.rpc_sync(agent_rref.owner(), self.select,
                                  args=(agent_rref, self.slot, state))
            latencies.append(time.perf_counter() - started)
            state, rewards[step] = self.step(action)
        return rewards, latencies


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
        returns = torch.futures.wait_all(runs)
        for _, latencies in returns:
            observer_latencies.extend(latencies)
        agent_latencies.extend(agent.rpc_sync().end_episode([r for r, _ in returns]))
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
