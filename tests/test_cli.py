"""`pytest-distbench compare`, run the way users and CI run it: as a separate process."""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import random
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from results_data import ENVIRONMENT, benchmark_record
from tables import read_table

from pytest_distbench import cli
from pytest_distbench.results.document import history, make_document, write_document
from pytest_distbench.results.document.io import MAX_RESULTS_BYTES, MAX_RESULTS_VALUES

# One xdist worker runs the module (--dist=loadgroup, pyproject.toml): its module fixture
# (every CLI process started together, 8 s) would run again in each worker.
pytestmark = pytest.mark.xdist_group("test_cli")

REPO = Path(__file__).resolve().parents[1]

def samples(median: float, seed: int, n: int = 60) -> list[float]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        x = median * (1 + rng.uniform(-0.02, 0.02))
        if rng.random() < 0.1:
            x *= 15  # the occasional stall
        out.append(x)
    return out


def record(size: int, values: list[float]) -> dict:
    return benchmark_record(size, values)


SAME, SLOW, GONE, ADDED = 1024, 1 << 20, 4, 64 << 20
NAMES = {size: f"test_all_reduce[gloo-ws2-{size}]" for size in (SAME, SLOW, GONE, ADDED)}


def save(path: Path, records: list[dict], **env) -> Path:
    doc = make_document(records, {**ENVIRONMENT, **env}, ["pytest", "--distbench"], commit_info={})
    write_document(doc, path, overwrite=False)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cli")
    base = [record(SAME, samples(20e-6, 1)), record(SLOW, samples(1e-3, 2))]
    base.append(record(GONE, samples(10e-6, 3)))
    cur = [record(SAME, samples(20e-6, 11)), record(SLOW, samples(1.3e-3, 12))]
    cur.append(record(ADDED, samples(50e-3, 13)))
    out = {
        "base": save(d / "base.json", base),
        "cur": save(d / "cur.json", cur),
        "other_env": save(d / "other_env.json", base, torch="2.14.0", cpu_count=64),
    }
    # The same baseline with four stored runs that agree within 1 %: a gate.
    stored = None
    for seed, scale in enumerate((1.0, 1.01, 0.99, 1.0)):
        run = make_document([record(SAME, samples(20e-6 * scale, 20 + seed)),
                             record(SLOW, samples(1e-3 * scale, 30 + seed))], ENVIRONMENT,
                            ["pytest", "--distbench"], commit_info={})
        stored = history.with_history(run, stored)
    out["history"] = d / "history.json"
    write_document(stored, out["history"], overwrite=False)
    damaged = d / "damaged.json"
    damaged.write_bytes(out["base"].read_bytes()[:500])
    out["damaged"] = damaged
    foreign = d / "foreign.json"
    foreign.write_text(json.dumps({"machine_info": {}, "commit_info": {}, "benchmarks": []}))
    out["foreign"] = foreign
    out["missing"] = d / "does-not-exist.json"
    # Valid JSON, then damaged in fields only later code reads (issue 19): refused when read.
    doc = json.loads(out["base"].read_text())
    doc["distbench"]["history"] = [{"p50_s": {"x": 10**400}}]
    doc["benchmarks"][0]["distbench"]["placement"] = ["pack"]
    out["overflow"] = d / "overflow.json"
    out["overflow"].write_text(json.dumps(doc))
    # Inputs that are not results files at all (issue 29, item 6): a device that never ends,
    # a FIFO nobody writes, and a file past the size limit (sparse: no disk is used).
    out["device"] = Path("/dev/zero")
    out["fifo"] = d / "pipe.json"
    os.mkfifo(out["fifo"])
    out["huge"] = d / "huge.json"
    with open(out["huge"], "wb") as f:
        f.truncate(MAX_RESULTS_BYTES + 1)
    # Under the byte limit, but of a shape whose parsing builds far more than the file
    # (issue 54 item 2): 50 MB of empty objects (a 544 MiB file of 16M samples, under the
    # limit then, was OOM-killed in compare); text whose one character past U+FFFF makes
    # every other take 4 bytes.
    # Written in bytes, the padding a MiB at a time: built as one str, the wide file's took
    # 4 bytes a character, twice (1.1 GB in this test process).
    head = out["base"].read_bytes()
    head = head[:head.rindex(b"}")]
    out["dense"] = d / "dense.json"
    with open(out["dense"], "wb") as f:
        f.write(head + b', "padding": [' + b"{}," * (MAX_RESULTS_VALUES // 2) + b"{}]}")
    out["wide"] = d / "wide.json"
    with open(out["wide"], "wb") as f:
        f.write(head + ', "padding": "\U0001f600'.encode())
        mib, rest = divmod(MAX_RESULTS_BYTES // 4, 1 << 20)
        for _ in range(mib):
            f.write(b"x" * (1 << 20))
        f.write(b"x" * rest + b'"}')
    return out


RUNS = {
    "table": ["base", "cur", "--fail-on-regression"],
    "gated": ["history", "cur", "--fail-on-regression"],
    "markdown": ["base", "cur", "--format", "markdown"],
    "csv": ["base", "cur", "--format", "csv", "--metric", "p90", "--threshold", "5 %"],
    "json": ["base", "cur", "--format", "json", "--threshold", "50%", "--fail-on-regression"],
    "missing": ["base", "missing"],
    "damaged": ["damaged", "cur"],
    "foreign": ["base", "foreign"],
    "overflow": ["overflow", "cur"],
    "device": ["base", "device"],
    "fifo": ["fifo", "cur"],
    "huge": ["base", "huge"],
    "dense": ["dense", "cur"],
    "wide": ["base", "wide"],
}
# Runs that would hold the machine's memory or wait forever if the reader trusted its input:
# capped, so a regression fails this test instead of the machine.
HOSTILE = {"device", "fifo", "huge", "dense", "wide"}


def _capped_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 * 2**30, 2 * 2**30))


@pytest.fixture(scope="module")
def runs(files) -> dict[str, subprocess.CompletedProcess]:
    """Every CLI process of this module, started together."""
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = {}
    for key, args in RUNS.items():
        argv = [str(files[a]) if a in files else a for a in args]
        procs[key] = subprocess.Popen(
            [sys.executable, "-m", "pytest_distbench.cli", "compare", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=files["base"].parent,
            preexec_fn=_capped_memory if key in HOSTILE else None,
        )
    results = {}
    for key, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        results[key] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return results


def test_table_output_against_one_stored_run_never_reads_regression(runs):
    """Issue 30: two single runs cannot gate (run-to-run noise unknown), so a slowdown every
    batch agrees on (+30 %, p = 5e-6) is "slower, not gateable" and fails nothing."""
    run = runs["table"]
    assert run.returncode == 0, run.stderr
    out = run.stdout
    headers, rows = read_table(out.splitlines())
    assert "baseline p50 (us)" in headers and "current p50 (us)" in headers
    lines = {row[0]: "  ".join(row) for row in rows}
    assert set(lines) == set(NAMES.values())
    assert lines[NAMES[SLOW]].rstrip().endswith("slower, not gateable")
    assert "1 MiB" in lines[NAMES[SLOW]]
    assert lines[NAMES[SAME]].rstrip().endswith("unchanged")  # "not gateable": slower/faster
    assert lines[NAMES[GONE]].rstrip().endswith("missing")
    assert lines[NAMES[ADDED]].rstrip().endswith("new")
    assert not [line for line in lines.values() if "regression" in line]
    assert ("0 regressions, 0 improvements, 1 slower (not gateable), 1 unchanged, 1 new, "
            "1 missing") in out
    assert "1 benchmark(s) slower, but not gateable" in run.stderr
    assert "error" not in run.stderr and "Traceback" not in run.stderr
    # The legend: the vocabulary, and the level of each of the 2 benchmarks judged (0.01 / 2).
    legend = " ".join(out.split())
    assert "inconclusive = not shown to differ, and it may be beyond the threshold" in legend
    assert "family-wise 1 % over 2 benchmarks (Bonferroni: each point at p < 0.005)" in legend


def test_a_slowdown_against_stored_runs_is_a_regression_and_fails(runs):
    run = runs["gated"]
    assert run.returncode == 1, run.stderr
    lines = {row[0]: "  ".join(row) for row in read_table(run.stdout.splitlines())[1]}
    assert lines[NAMES[SLOW]].rstrip().endswith("regression")
    assert lines[NAMES[SAME]].rstrip().endswith("unchanged")
    assert "1 regression, 0 improvements, 1 unchanged, 1 new, 0 missing" in run.stdout
    assert "error: 1 regression(s)" in run.stderr and NAMES[SLOW] in run.stderr


def test_markdown_output(runs):
    run = runs["markdown"]
    assert run.returncode == 0, run.stderr
    table = [line for line in run.stdout.splitlines() if line.startswith("|")]
    assert "baseline p50 (us)" in table[0]
    assert set(table[1]) <= set("|-: ")  # the header separator row
    assert len(table) == 2 + 4
    slow = next(line for line in table if NAMES[SLOW] in line)
    cells = [cell.strip() for cell in slow.strip("|").split("|")]
    assert cells[-1] == "slower, not gateable"
    assert 20 < float(cells[5].rstrip("%")) < 40  # change %, about +30
    assert "0 regressions" in run.stdout and "**" not in run.stdout


def test_csv_output(runs):
    run = runs["csv"]
    assert run.returncode == 0, run.stderr
    rows = list(csv.DictReader(io.StringIO(run.stdout)))
    assert list(rows[0]) == [
        "benchmark",
        "family",
        "size",
        "baseline p90 (us)",
        "current p90 (us)",
        "change %",
        "p-value",
        "verdict",
        "id",
        "detectable %",
    ]
    by_name = {row["benchmark"]: row for row in rows}
    assert set(by_name) == set(NAMES.values())
    slow = by_name[NAMES[SLOW]]
    assert slow["verdict"] == "slower, not gateable"
    assert float(slow["p-value"]) < 0.01
    assert float(slow["baseline p90 (us)"]) > 900  # seconds in the file, microseconds here
    assert by_name[NAMES[ADDED]]["baseline p90 (us)"] == ""
    assert by_name[NAMES[GONE]]["verdict"] == "missing"


def test_json_output_and_threshold_option(runs):
    run = runs["json"]
    # 30 % slower is within a 50 % threshold: no regression, so --fail-on-regression passes
    assert run.returncode == 0, run.stderr
    data = json.loads(run.stdout)
    assert data["threshold"] == 0.5 and data["metric"] == "p50"
    by_name = {b["name"]: b for b in data["benchmarks"]}
    slow = by_name[NAMES[SLOW]]
    assert slow["verdict"] == "slower"  # shown, and within the threshold: fails nothing
    assert slow["level"] == pytest.approx(0.01 / 2) and data["family"] == 2
    assert slow["change"] == pytest.approx(0.3, abs=0.03)
    assert slow["baseline_p50_s"] == pytest.approx(1e-3, rel=0.03)
    assert by_name[NAMES[ADDED]]["verdict"] == "new"
    assert by_name[NAMES[GONE]]["verdict"] == "missing"
    assert data["counts"]["regression"] == 0


@pytest.mark.parametrize(
    ("key", "file", "message"),
    [
        ("missing", "does-not-exist.json", "no such file"),
        ("damaged", "damaged.json", "not valid JSON"),
        ("foreign", "foreign.json", "not a pytest-distbench results file"),
        ("overflow", "overflow.json", "distbench.history[0].p50_s.x: integer"),
        ("device", "/dev/zero", "is a character device, not a results file"),
        ("fifo", "pipe.json", "is a FIFO, not a results file"),
        ("huge", "huge.json", "the most a results file may be"),
        ("dense", "dense.json", "holds more than 33,554,432 JSON values (counted by their "
         "commas, colons and opening brackets), the most a results file may hold "
         "(docs/results-schema.md); not parsed"),
        ("wide", "wide.json", "holds characters taking 4 bytes each as text: at most 128 MiB "
         "of such a file is read"),
    ],
)
def test_bad_input_is_one_clear_line(runs, key, file, message):
    run = runs[key]
    assert run.returncode == 2
    assert run.stdout == ""
    assert "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1
    assert file in lines[0] and message in lines[0]


# In-process from here on: same code path, without paying another interpreter start each.


def test_bad_threshold_exits_2_naming_the_option(files, capsys):
    for text in ("ten", "-5%", "10", "nan%"):
        with pytest.raises(SystemExit) as info:
            cli.main(["compare", str(files["base"]), str(files["cur"]), "--threshold", text])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert "--threshold" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1


def test_threshold_text_forms():
    assert cli._parse_fraction("10%") == pytest.approx(0.10)
    assert cli._parse_fraction("5 %") == pytest.approx(0.05)
    assert cli._parse_fraction(" 0.1 ") == pytest.approx(0.10)
    assert cli._parse_fraction("150%") == pytest.approx(1.5)


def test_environment_difference_warns(files, capsys):
    code = cli.main(["compare", str(files["base"]), str(files["other_env"])])
    captured = capsys.readouterr()
    assert code == 0
    assert "WARNING" in captured.err
    assert "torch: 2.13.0+cpu (baseline) vs 2.14.0 (current)" in captured.err
    assert "cpu_count: 2 (baseline) vs 64 (current)" in captured.err


def test_strict_makes_environment_difference_an_error(files, capsys):
    code = cli.main(["compare", str(files["base"]), str(files["other_env"]), "--strict"])
    captured = capsys.readouterr()
    assert code == 1
    assert "error" in captured.err and "torch" in captured.err
    assert cli.main(["compare", str(files["base"]), str(files["base"]), "--strict"]) == 0


def test_three_files_side_by_side(files, capsys):
    code = cli.main(
        ["compare", str(files["history"]), str(files["cur"]), str(files["other_env"])]
        + ["--fail-on-regression"]
    )
    out = capsys.readouterr().out
    assert code == 1  # cur regressed against the stored runs
    headers, rows = read_table(out.splitlines())
    for label in ("history p50 (us)", "cur p50 (us)", "cur change %", "other_env p50 (us)"):
        assert label in headers
    slow = next("  ".join(row) for row in rows if row[0] == NAMES[SLOW])
    assert "regression" in slow and "unchanged" in slow
    assert max(map(len, out.splitlines())) <= 120  # three files fit the terminal too


def test_needs_two_files(files, capsys):
    assert cli.main(["compare", str(files["base"])]) == 2
    assert "at least two files" in capsys.readouterr().err


def test_a_long_compare_says_what_it_is_doing_and_the_sizes(files, capsys, monkeypatch):
    """Files of 10^5 benchmarks take minutes: past PROGRESS_AFTER_S the command says which
    file it reads and how large it is, how far the comparison is, then that it writes."""
    from pytest_distbench.units import format_size

    monkeypatch.setattr(cli, "PROGRESS_AFTER_S", 0.0)
    for name in ("read_document", "render"):  # as slow as a large file makes them
        slow = getattr(cli, name)
        monkeypatch.setattr(cli, name, lambda *a, slow=slow, **k: (time.sleep(0.8),
                                                                   slow(*a, **k))[1])
    assert cli.main(["compare", str(files["base"]), str(files["cur"])]) == 0
    captured = capsys.readouterr()
    assert "regression" in captured.out or "unchanged" in captured.out
    err = captured.err.splitlines()
    for path in (files["base"], files["cur"]):
        size = format_size(path.stat().st_size)
        assert any(f"pytest-distbench: reading and checking {path} ({size})" in line
                   for line in err), err
    assert any("pytest-distbench: writing the table" in line for line in err), err
    assert all(len(line) <= 120 for line in err)


def test_the_comparison_says_how_far_it_is(files):
    from pytest_distbench.results.comparison.verdict import compare_documents
    from pytest_distbench.results.document import read_document

    told = []
    compare_documents(read_document(files["base"]), read_document(files["cur"]),
                      threshold=0.1, progress=lambda done, total: told.append((done, total)))
    assert told == [(0, 3), (1, 3), (2, 3)]


SIGNAL_MID_PLOT = """
import os, signal, sys
from pytest_distbench import cli

_fsync = os.fsync


def fsync(fd):  # the signal comes while a plot's temporary copy is written
    if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):
        os.kill(os.getpid(), signal.{name})
    return _fsync(fd)


os.fsync = fsync
sys.exit(cli.main(sys.argv[1:]))
"""


# Ctrl-C's path (KeyboardInterrupt) is the session's test's too (tests/test_outputs.py).
@pytest.mark.parametrize("name", ["SIGTERM", pytest.param("SIGINT", marks=pytest.mark.extended)])
def test_a_signal_while_a_plot_is_written_is_one_line_and_leaves_no_temporary_file(
        tmp_path, name):
    """The plot's temporary file is removed and the command says it was interrupted, in one
    line, with 128 + the signal as its status (issue 54, item 10, the command's side)."""
    pytest.importorskip("matplotlib")
    if not os.path.exists("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to name the file being synced")
    results = save(tmp_path / "run.json", [record(1024, samples(20e-6, 1))])
    out = tmp_path / "plots"
    done = subprocess.run([sys.executable, "-c", SIGNAL_MID_PLOT.replace("{name}", name),
                           "plot", str(results), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 128 + getattr(signal, name), done.stderr
    assert done.stderr == (f"pytest-distbench: error: interrupted ({name}): each file written "
                           "is whole, no temporary file is left\n")
    assert [p.name for p in out.iterdir()] == []


def test_a_machine_that_changed_speed_is_said_within_120_columns(files, capsys, tmp_path):
    """The machine-speed warning (and the environment's) wraps to a terminal: it was 200
    characters on one line."""
    doc = json.loads(files["cur"].read_text())
    doc["distbench"]["environment"]["cpu_probe_s"] = [0.003, 0.003]
    slow = json.loads(files["cur"].read_text())
    slow["distbench"]["environment"]["cpu_probe_s"] = [0.0066, 0.0066]
    a, b = tmp_path / "fast-machine-session.json", tmp_path / "slow-machine-session.json"
    a.write_text(json.dumps(doc))
    b.write_text(json.dumps(slow))
    assert cli.main(["compare", str(a), str(b)]) == 0
    err = capsys.readouterr().err
    said = " ".join(err.split())
    assert "the machine itself slowed down, so verdicts may not come from the code" in said
    assert "2.20x" in said and max(map(len, err.splitlines())) <= 120, err


def test_no_help_text_shows_a_doubled_percent_sign():
    # argparse %-formats an option's help but prints a description as written: "95 %%" there
    # reached the user as is.
    from pytest_distbench.cli import _build_parser

    parser = _build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    texts = {"": parser.format_help()} | {
        name: sub.format_help() for name, sub in commands.choices.items()}
    assert all(texts.values())
    assert {name for name, text in texts.items() if "%%" in text} == set()
