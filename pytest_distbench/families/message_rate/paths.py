"""The three traffic paths: who sends, who receives and acknowledges (no torch)."""

from __future__ import annotations

from dataclasses import dataclass

CLIENT = 0


@dataclass(frozen=True)
class TrafficPath:
    name: str
    sender: int
    receiver: int
    what: str

    @property
    def min_ranks(self) -> int:
        return max(self.sender, self.receiver) + 1

    def skip_reason(self, world_size: int) -> str | None:
        """Why this path cannot run in a world of `world_size` ranks, or None."""
        if world_size >= self.min_ranks:
            return None
        return (f"path {self.name} needs {self.min_ranks} ranks (rank 0 = client, ranks 1.. = "
                f"computations; {self.what}); this world has {world_size}")


PATHS: dict[str, TrafficPath] = {
    p.name: p
    for p in (
        TrafficPath("client_to_computation", CLIENT, 1, "client rank 0 sends to computation 1"),
        TrafficPath("computation_to_client", 1, CLIENT, "computation 1 sends to client rank 0"),
        TrafficPath("computation_to_computation", 1, 2,
                    "computation 1 sends to computation 2"),
    )
}
