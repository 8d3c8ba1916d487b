"""pytest-xdist: the workers' records reach the controller, which reports and writes once."""

from __future__ import annotations

import json
import textwrap

from launching import benchmark_ids, read_results

BENCH = textwrap.dedent("""
    import pytest, torch, torch.distributed as dist

    @pytest.mark.distbench
    @pytest.mark.parametrize("i", range(3))
    def test_reduce(distbench, i, nbytes):
        x = torch.ones(nbytes // 4)
        distbench.measure(lambda: dist.all_reduce(x), nbytes=nbytes, family="all_reduce")

    @pytest.mark.distbench
    def test_two_measurements(distbench):
        x = torch.ones(4)
        distbench.measure(lambda: dist.all_reduce(x), name="first")
        distbench.measure(lambda: dist.broadcast(x, 0), name="second")
""")


def _scale_times(path, factor_for) -> None:
    """Make a baseline slower or faster than anything this machine measures, per benchmark:
    the gate's verdicts then do not depend on the noise of a shared machine."""
    document = json.loads(path.read_text())
    for entry in document["benchmarks"]:
        record = entry["distbench"]
        factor = factor_for(record["id"])
        record["samples"] = [s * factor for s in record["samples"]]
        record["rank_samples"] = [[s * factor for s in r] for r in record["rank_samples"]]
        record["summary"] = {k: v if k == "n" else v * factor
                             for k, v in record["summary"].items()}
        for key in ("p50_ci", "sampling_ci"):
            ci = record.get(key) or {}
            for end in ("low", "high"):
                if ci.get(end) is not None:
                    ci[end] *= factor
    path.write_text(json.dumps(document))


def test_xdist_loses_nothing_and_writes_each_file_once(pytester, distbench_run):
    pytester.makepyfile(BENCH)
    # No revisits: with them, runs of 8 iterations on a shared machine give each printed
    # interval a width that no 1000x scaling of the baseline gets out of, and what the
    # verdicts below are about is xdist handing the records over, not the noise. 8 iterations:
    # 5 against 5 cannot reach p < 1 % / (4 tests x 2 points) (its smallest p is 1/252).
    common = ["--distbench", "--world-size=2", "--tensor-size=1KiB",
              "--distbench-iterations=8", "--distbench-revisits=0"]
    plain = distbench_run(*common, "--distbench-json=plain.json", "--distbench-save=plain")
    plain.assert_outcomes(passed=4)
    # One benchmark's baseline is 1000x faster (a sure slowdown), the others 1000x slower.
    _scale_times(pytester.path / "baselines/plain.json",
                 lambda rid: 1e-3 if rid.endswith("test_reduce[gloo-ws2-1KiB-1]") else 1e3)
    spread = distbench_run(*common, "-n", "2", "--distbench-json=xdist.json",
                           "--distbench-save=xdist", "--distbench-compare=plain")
    # One stored run reports and fails nothing (docs/gating.md): the merged comparison shows it.
    spread.assert_outcomes(passed=4)
    # One stored run never gates: the change is "slower" or, where the intervals overlap,
    # "inconclusive"; the id may wrap in the 120-column table.
    table = spread.stdout.str().split("distbench comparison")[1].split("regression =")[0]
    assert "test_reduce" in table and ("slower" in table or "inconclusive" in table)
    output = spread.stdout.str()
    assert "WARNING: pytest-xdist runs 2 workers at once" in output
    assert output.count("distbench results") == 1  # one set of tables, from the controller
    assert output.count("wrote results file xdist.json") == 1
    assert output.count("wrote baseline") == 1
    # the gate judged the merged records
    assert "0 regressions, 0 improvements, 1 slower (not gateable), 4 faster" in output
    # ...at the levels the workers judged: the whole list of 4 tests, one of 2 points.
    legend = " ".join(output.split())
    assert ("family-wise 1 % over 4 tests (Bonferroni: each point at p < 1 % / (4 x its test's "
            "points): 0.0013 to 0.0025)") in legend
    for path in ("plain.json", "baselines/plain.json"):
        assert len(benchmark_ids(pytester.path / path)) == 5
    # Every file holds the same benchmarks as without xdist, in collection order.
    assert benchmark_ids(pytester.path / "xdist.json") == benchmark_ids(
        pytester.path / "plain.json")
    assert benchmark_ids(pytester.path / "baselines/xdist.json") == benchmark_ids(
        pytester.path / "baselines/plain.json")
    for line in benchmark_ids(pytester.path / "plain.json"):
        assert line.split("::", 1)[1].split("[")[0] in output  # every benchmark is in a table
    environment = read_results(pytester.path / "xdist.json")["distbench"]["environment"]
    assert environment["xdist_workers"] == 2
    assert "xdist_workers" not in read_results(pytester.path / "plain.json")["distbench"][
        "environment"]
