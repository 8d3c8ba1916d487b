"""The regression gate inside a pytest session: baseline in, one verdict per benchmark out.

Loaded once at configure time so a missing or damaged baseline stops the run before any rank
starts, and judged per test so that each regression fails as its own test (JUnit XML and -x
work); the whole-run comparison table is rendered at the end.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ..document import history, io, nccl_tests, schema
from ..document.record import Record
from ..statistics.runs import MIN_RUNS
from ..statistics.vocabulary import FAMILY_ALPHA
from . import verdict
from .series import series_of


class Gate:
    def __init__(self, path: Path, document: dict[str, Any], strict: bool) -> None:
        self.path = path
        self.document = document
        self.baseline = schema.records(document)
        self.strict = strict
        self.runs = history.p50_runs(document)  # oldest first; the file's run last
        # Each benchmark's stored runs and steps: a new run is judged against its current
        # segment (the runs since its last change point or environment change), not all.
        self.series = series_of(document)
        # nccl-tests' JSON as the baseline: its records are keyed by what they measured, and
        # so is each fresh record looked up (nccl_tests.key), not by pytest node id.
        self.id_of = nccl_tests.key if nccl_tests.from_document(document) else _own_id
        # The level each judged record's test was held to (its share of the session's
        # family-wise rate), so the session's table judges it at the same level.
        self.levels: dict[str, float] = {}
        self.tests = 1  # the session's distbench tests (gating.py sets it after collection)

    @classmethod
    def load(cls, name_or_path: str, baseline_dir: Path, strict: bool) -> Gate:
        try:
            path = io.resolve_baseline(name_or_path, baseline_dir)
        except ValueError as exc:
            raise pytest.UsageError(f"--distbench-compare: {exc}") from None
        try:
            document = io.read_document(path)  # its history too: refused now, not after the run
        except io.ResultsFileError as exc:
            raise pytest.UsageError(f"--distbench-compare: {exc}") from None
        return cls(path, document, strict)

    def environment_differences(self, environment: dict[str, Any]) -> list[str]:
        """What differs between the baseline's machine and this one (world sizes aside:
        they are part of every benchmark id)."""
        baseline_env = dict(self.document["distbench"]["environment"])
        current = dict(environment)
        baseline_env.pop("world_sizes", None)
        current.pop("world_sizes", None)
        return verdict.fingerprint_differences(baseline_env, current)

    def judge(self, record: Record, threshold: float, level: float = FAMILY_ALPHA
              ) -> verdict.Verdict | None:
        """The verdict for one fresh record at `level` (vocabulary.point_level), or None when
        the baseline lacks it."""
        found = self.id_of(record)
        base = self.baseline.get(found)
        if base is None:
            return None
        self.levels[record["id"]] = self.levels[found] = level  # nccl-tests: keyed as found
        segment = self.series.get(found)
        return verdict.judge_records(
            base, record, threshold, alpha=level,
            stored_p50s=segment.current if segment else (),
            stored_label=segment.describe_current() if segment else "")

    @property
    def noise_note(self) -> str:
        """What the verdicts know about run-to-run noise, for the header."""
        if len(self.runs) >= MIN_RUNS:
            segments = Counter(s.describe_current() if len(s.current) >= MIN_RUNS else None
                               for s in self.series.values() if s.id in self.baseline)
            short = segments.pop(None, 0)
            common = [f"{label} for {n} benchmark(s)" for label, n in segments.most_common(3)]
            if len(segments) > 3:
                common.append(f"{len(segments) - 3} other segment(s) for "
                              f"{sum(n for _, n in segments.most_common()[3:])} benchmark(s)")
            fewer = (f"; {short} benchmark(s) with fewer than {MIN_RUNS} runs in their "
                     "current segment: not gateable, run-to-run noise unknown") if short else ""
            return (f"{len(self.runs)} stored runs: verdicts judge each p50 against the learned "
                    "run-to-run spread of its current segment (the runs since its last change "
                    f"point or environment change): {'; '.join(common) or 'none'}{fewer}")
        return (f"{len(self.runs)} stored run(s): not gateable, run-to-run noise unknown: "
                "changes are reported and fail nothing (append runs with --distbench-append; "
                f"{MIN_RUNS} or more teach the gate each benchmark's spread, or gate in A/B "
                "mode on a shared runner: docs/gating.md)")

    def failure_message(self, v: verdict.Verdict, current_samples: int) -> str:
        if v.z is not None:
            segment = self.series[v.id].describe_current() if v.id in self.series else (
                f"{len(self.runs)} stored runs")
            return (
                f"performance regression against {self.path}: p50 {v.current_p50 * 1e6:.1f} us "
                f"is {v.change * 100:+.1f} % from the median of {segment} "
                f"(threshold {v.threshold * 100:g} %); robust z = {v.z:.1f} against their "
                f"run-to-run spread, p = {v.p_value:.2g} < {v.level:.2g} (this point's share of "
                f"the session's family-wise {FAMILY_ALPHA * 100:g} %)"
            )
        baseline_samples = len(self.baseline[v.id]["samples"])
        return (
            f"performance regression against {self.path}: p50 {v.baseline_p50 * 1e6:.1f} us -> "
            f"{v.current_p50 * 1e6:.1f} us ({v.change * 100:+.1f} %, threshold "
            f"{v.threshold * 100:g} %); one-sided Mann-Whitney U p = {v.p_value:.2g} "
            f"({baseline_samples} baseline vs {current_samples} current samples)"
        )

    def comparison(self, current_document: dict[str, Any], threshold: float) -> Any:
        return verdict.compare_documents(
            self.document,
            current_document,
            threshold=threshold,
            baseline_label=str(self.path),
            current_label="this run",
            family=self.tests,
            levels=self.levels,
            family_unit="tests",
            series=self.series,
        )


def _own_id(record: Record) -> str:
    return record["id"]
