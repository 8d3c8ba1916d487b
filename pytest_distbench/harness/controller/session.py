"""What every launch mode's session keeps for the end of the run (records, notes, facts)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from ...results.document.record import Record
from ...results.document.session_intervals import SESSION, UNDER_LAUNCHER, Evidence
from .points import Point, Points, record_of


class Session:
    """The state a run's outputs are made from; each launch mode says how a test runs (its
    session is a runs.Runner too)."""

    external = False  # True where a launcher (torchrun, srun, mpirun) started the ranks
    reports = True  # False on a launched rank other than 0: rank 0 reports for all
    # controller/revisits.py where this mode can run a point again (local worlds); None where
    # it cannot, and the records then print no interval (run-to-run noise unmeasured).
    revisits: Any = None

    def __init__(self) -> None:
        self.points = Points()
        self.world_starts: list[tuple[str, float]] = []
        self.notes: list[str] = []
        self.comparison: Any = None  # verdict.Comparison of the whole run, when gating
        self.cpu_probes: list[float] = []  # machine speed at start and end (environment)
        self.rank_infos: list[dict[str, Any]] = []  # what each started rank saw (GPU, NCCL)
        self.rank_env: dict[str, str] = {}  # more environment for every rank (pitfall fixes)
        self.rpc_checks: list[Any] | None = None  # pitfalls.Check list, when a test uses RPC
        self.store_checks: list[Any] | None = None  # the resolver check, when one uses a store
        self.extra_facts: dict[str, Any] = {}  # more for the results environment (xdist workers)
        self.output_errors: list[str] = []  # outputs that failed: the session fails
        self.written: set[Path] = set()  # the output files written (the digest names those)
        self.left_out = 0  # records no results file could hold (each an output error)

    def add_rank_infos(self, infos: Iterable[dict[str, Any]]) -> None:
        """What the ranks of a newly started world saw (GPU, NCCL, the GPU's copy rate, which
        the sanity rules hold that world's figures to from its first test on)."""
        from ..environment.physical import note_rank_facts

        infos = list(infos)
        self.rank_infos.extend(infos)
        note_rank_facts(infos)

    @property
    def records(self) -> list[Record]:
        """Every point's record, as the session knows it (sealed, at the end)."""
        return self.points.records()

    def evidence(self, point: Point, final: bool = False) -> Evidence:
        """What the session knows of `point` for its printed interval (`final`: at the end of
        the test loop). A mode that cannot revisit: the run's own interval."""
        if self.revisits is not None:
            return self.revisits.evidence(point, final)
        return Evidence(SESSION, noise_missing=UNDER_LAUNCHER)

    def view(self, points: list[Point]) -> list[Record]:
        """The points' records as the session knows them now: what the live closing line,
        -v, JUnit and the per-test gate show."""
        return [record_of(p, self.evidence(p)) for p in points]

    def seal(self) -> list[Record]:
        """The end of the test loop: every point of this session gets its record, with its
        printed interval, once; returned, for the pytest_distbench_record hooks
        (outputs.show_records). A point that came sealed (from an xdist worker) is left
        alone."""
        return self.points.seal(lambda p: self.evidence(p, final=True))

    def environment_facts(self) -> dict[str, Any]:
        """What this launch mode adds to the results environment."""
        return dict(self.extra_facts)

    def finish(self) -> None:
        """The very end (pytest_unconfigure, after every report was written)."""

    def close(self) -> None:
        """Release what the mode holds; safe to call more than once."""


SESSION_KEY = pytest.StashKey[Session]()  # the run's session, in config.stash
