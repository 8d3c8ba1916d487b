"""A requested output that was not written fails the session (outputs.py)."""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import threading

import pytest

BENCH = """
import time, pytest

@pytest.mark.distbench(iterations=3, warmup=1)
def test_sleep(distbench):
    distbench.measure(lambda: time.sleep(0.001))
"""


def test_a_results_file_that_cannot_be_written_fails_the_session(pytester, distbench_run):
    """A file where the directory should be: refused at the start when it is there already
    (test_an_output_path_no_file_can_have_...), a failed session when it appears later."""
    target = pytester.path / "not_a_dir" / "run.json"
    pytester.makepyfile(test_bench=BENCH, test_other=f"""
import pathlib

def test_a_file_appears_where_the_directory_should_be():
    pathlib.Path({str(target.parent)!r}).write_text("a file")
""")
    result = distbench_run("--distbench", "--world-size=2", f"--distbench-json={target}")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*ERROR: could not write results file {target}*"])
    # The digest does not point at the file that is not there.
    assert "every sample in" not in result.stdout.str()
    digest = " ".join(result.stdout.str().split("distbench digest")[-1].split())
    assert f"every sample: --distbench-json: {target} not written (the ERROR above)" in digest


def test_a_baseline_its_own_reader_would_refuse_is_not_written_and_the_old_one_stays(
        pytester, distbench_run):
    """The reader's bound on values lowered from 2**25 to 1,500 (one duration-bound point at
    its 3,000,000-sample cap passes the real one at 8 ranks): the run that would
    make the baseline unreadable fails the session naming the file and its longest sample
    list, and the baseline of the run before stays, readable."""
    pytester.makeconftest("import pytest_distbench.results.document.io as io\n"
                          "io.MAX_RESULTS_VALUES = 1500\n")
    pytester.makepyfile(test_bench="""
import time, pytest

@pytest.mark.distbench(warmup=1)
def test_sleep(distbench):
    distbench.measure(lambda: time.sleep(0.0001))
""")
    baseline = pytester.path / "baselines" / "main.json"
    first = distbench_run("--distbench", "--world-size=2", "--distbench-iterations=3",
                          "--distbench-save=main")
    first.assert_outcomes(passed=1)
    assert first.ret == pytest.ExitCode.OK
    kept = baseline.read_bytes()
    result = distbench_run("--distbench", "--world-size=2", "--distbench-iterations=1000",
                           "--distbench-save=main", "--distbench-append")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = " ".join(result.stdout.str().split())
    assert f"ERROR: could not add this run to baseline {baseline}: not written: " in out, out
    assert "not written: the document holds more than 1,500 JSON values" in out
    assert ("the longest sample lists of its 1 benchmark: test_bench.py::test_sleep[gloo-ws2] "
            "(1,000 samples at 2 ranks)") in out
    assert baseline.read_bytes() == kept
    assert sorted(p.name for p in baseline.parent.iterdir()) == ["main.json", "main.json.lock"]


def test_the_loser_of_two_saves_of_one_baseline_fails(pytester, distbench_run):
    """Another session saved the same name while this one ran: this run's data is stored
    nowhere, so it must not look green."""
    baseline = pytester.path / "baselines" / "main.json"
    pytester.makepyfile(test_bench=BENCH, test_other=f"""
import json, pathlib

def test_another_session_saves_first():
    path = pathlib.Path({str(baseline)!r})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({{"written": "by the other session"}}))
""")
    result = distbench_run("--distbench", "--world-size=2", "--distbench-save=main")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*ERROR: baseline {baseline} appeared during the run*"])
    assert json.loads(baseline.read_text()) == {"written": "by the other session"}


def test_written_outputs_leave_the_exit_status_alone(pytester, distbench_run):
    pytester.makepyfile(test_bench=BENCH)
    result = distbench_run("--distbench", "--world-size=2", "--distbench-json=run.json",
                           "--distbench-save=main")
    assert result.ret == pytest.ExitCode.OK
    assert (pytester.path / "run.json").exists()
    assert (pytester.path / "baselines" / "main.json").exists()


def _device_like(path, device: str):
    """A character device node at path with /dev/<device>'s numbers (mknod: root only), so a
    writer that replaced it destroys a copy, never the machine's own device."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.stat(f"/dev/{device}").st_rdev)
    except OSError as exc:
        pytest.skip(f"cannot make a device node here: {exc}")
    return path


def _fifo_reader(path):
    """A FIFO at path and a thread that reads it to the end: (chunks, stop)."""
    os.mkfifo(path)
    chunks: list[bytes] = []

    def read() -> None:
        with open(path, "rb") as f:
            chunks.append(f.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()

    def stop() -> None:  # a writer that never came: open the other end so the reader ends
        if thread.is_alive():
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        thread.join(10)

    return chunks, stop


def test_outputs_write_through_symlinks_devices_and_fifos(pytester, distbench_run):
    """A symlink stays a symlink (its target replaced atomically), a FIFO and a device are
    written through: none is replaced by a regular file (issue 29, item 1)."""
    pytester.makepyfile(test_bench=BENCH)
    real = pytester.path / "kept" / "main.json"
    real.parent.mkdir()
    real.write_text("old")
    link = pytester.path / "main.json"
    link.symlink_to(real)
    fifo = pytester.path / "run.fifo"
    null = _device_like(pytester.path / "null", "null")
    chunks, stop = _fifo_reader(fifo)
    try:
        result = distbench_run("--distbench", "--world-size=2", f"--distbench-json={fifo}",
                               f"--distbench-save={link}", "--distbench-overwrite",
                               f"--distbench-markdown={null}")
    finally:
        stop()
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and stat.S_ISCHR(null.lstat().st_mode)
    assert json.loads(b"".join(chunks))["benchmarks"]
    assert link.is_symlink() and json.loads(real.read_text())["benchmarks"]
    assert [p.name for p in real.parent.iterdir()] == ["main.json"]  # no temporary file left


def test_outputs_that_cannot_be_written_fail_the_session_one_line_each(pytester, distbench_run):
    """A device that is full, a FIFO nobody reads and a baseline whose history cannot be
    read: each fails the session with one line naming the file; nothing is replaced."""
    pytester.makepyfile(test_bench=BENCH)
    full = _device_like(pytester.path / "full", "full")
    fifo = pytester.path / "summary.fifo"
    os.mkfifo(fifo)
    damaged = pytester.path / "baselines" / "main.json"
    damaged.parent.mkdir()
    damaged.write_text("not json")
    result = distbench_run("--distbench", "--world-size=2", f"--distbench-json={full}",
                           f"--distbench-markdown={fifo}", "--distbench-save=main",
                           "--distbench-append")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    errors = [line for line in result.stdout.lines if "distbench: ERROR" in line]
    assert len(errors) == 3, result.stdout.str()
    assert f"results file {full}" in errors[0] and "No space left on device" in errors[0]
    assert any(f"{damaged}" in e and "not valid JSON" in e for e in errors), errors
    assert any(f"{fifo}" in e and "nobody reads" in e for e in errors), errors
    assert "replaced results file" not in result.stdout.str()
    assert stat.S_ISCHR(full.lstat().st_mode) and stat.S_ISFIFO(fifo.lstat().st_mode)
    assert damaged.read_text() == "not json"


@pytest.mark.parametrize("body", ["skipped", "failed"])
def test_a_session_that_measured_nothing_fails_naming_its_outputs(pytester, distbench_run, body):
    """Every distbench test skipped (or failed): no results file, no baseline, and the session
    says so in one line instead of passing green (issue 29, item 3)."""
    test = ('@pytest.mark.skip(reason="not today")\n' if body == "skipped" else "") + """
@pytest.mark.distbench(iterations=3, warmup=1)
def test_sleep(distbench):
    assert False, "broken"
"""
    pytester.makepyfile(test_bench="import pytest\n" + test)
    result = distbench_run("--distbench", "--world-size=2", "--distbench-json=run.json",
                           "--distbench-save=main")
    result.assert_outcomes(**{body: 1})
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    [line] = [line for line in result.stdout.lines if "distbench: ERROR" in line]
    assert "nothing was measured" in line
    assert "--distbench-json=run.json" in line and "--distbench-save=main" in line
    assert not (pytester.path / "run.json").exists()
    assert not (pytester.path / "baselines").exists()


@pytest.mark.parametrize(("option", "value", "problem"), [
    ("--distbench-json", "run\0.json", "contains a NUL byte"),  # given in an @argsfile
    ("--distbench-save", "x" * 300, "has a name of 305 bytes; file systems take at most 255"),
    ("--distbench-markdown", "sub", "is a directory, not a file that can be written"),
    ("--distbench-plot", "test_bench.py", "is a regular file, not a directory"),
    ("--distbench-json", "test_bench.py/run.json", "Not a directory"),
])
def test_an_output_path_no_file_can_have_is_a_usage_error_before_any_rank(
        pytester, distbench_run, option, value, problem):
    """Refused when the session starts, in one line naming the option, not after the run
    with a traceback or an INTERNALERROR (issue 29, item 10)."""
    pytester.makepyfile(test_bench=BENCH)
    (pytester.path / "sub").mkdir()
    (pytester.path / "args.txt").write_text(f"{option}={value}\n")
    result = distbench_run("--distbench", "--world-size=2", "@args.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = [line for line in result.stderr.lines if line.strip()]
    assert line.startswith(f"ERROR: {option}: ") and line.endswith(problem), line
    assert "passed" not in result.stdout.str()  # nothing ran


def test_a_record_no_results_file_holds_fails_the_session_and_the_rest_are_written(
        pytester, distbench_run):
    """A record that passed its check when made and was spoilt after it (a share of an
    infinite peak, before the option's bound: issue 54, item 8) is named in an ERROR and left
    out; every other record is written, and the digest does not say "every sample"."""
    pytester.makeconftest("""
from pytest_distbench.results import peaks

def of_peak(record, peak):  # the bug simulated: a share no results file holds
    if record["nbytes"] != 16:
        return None
    return {"pct": float("inf"), "bandwidth": "busbw", "peak_gbps": 1.0, "source": "a bug"}

peaks.of_peak = of_peak
""")
    pytester.makepyfile(test_bench="""
import time, pytest

@pytest.mark.distbench(iterations=3, warmup=1)
def test_sleep(distbench, nbytes):
    distbench.measure(lambda: time.sleep(0.001), nbytes=nbytes)
""")
    out = pytester.path / "run.json"
    result = distbench_run("--distbench", "--world-size=2", "--tensor-size=16B,32B",
                           "--distbench-revisits=0", "--distbench-peak-busbw=gloo:1",
                           f"--distbench-json={out}")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    [error] = [line for line in result.stdout.lines if "distbench: ERROR" in line]
    assert "left out of every output: invalid benchmark record " in error
    assert "16B" in error and ": of_peak: expected an object with pct" in error
    assert [b["distbench"]["nbytes"] for b in json.loads(out.read_text())["benchmarks"]] == [32]
    digest = " ".join(result.stdout.str().split("distbench digest")[-1].split())
    assert f"every sample in {out} but those of 1 record(s) (the ERROR above)" in digest


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB tmpfs (mount: root only), unmounted after the test."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                             capture_output=True, text=True, timeout=30)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    yield disk
    subprocess.run(["umount", str(disk)], check=True, timeout=30)


def _fill(path):
    """Write to `path` until the file system holding it is full."""
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC


def test_a_markdown_append_on_a_full_disk_leaves_the_summary_as_it_was(pytester, distbench_run,
                                                                       small_disk):
    """Part of the tables fits, the rest does not: the part is cut off again, so the summary
    a CI job shows is not left ending mid-line while the session says "not written" (issue
    54, item 11)."""
    pytester.makepyfile(test_bench=BENCH)
    summary = small_disk / "summary.md"
    earlier = "earlier step\n" + "x" * 4000 + "\n"  # 82 bytes left in its page of the disk
    summary.write_text(earlier)
    _fill(small_disk / "filler")
    result = distbench_run("--distbench", "--world-size=2", "--distbench-revisits=0",
                           f"--distbench-markdown={summary}")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([f"*ERROR: could not append markdown to {summary}: *No space "
                                 "left on device*"])
    assert summary.read_text() == earlier
    digest = " ".join(result.stdout.str().split("distbench digest")[-1].split())
    assert f"as markdown: --distbench-markdown: {summary} not written (the ERROR above)" in digest


def test_an_append_cut_off_is_said_where_it_cannot_be_undone(tmp_path, monkeypatch):
    """Without root: the disk fills after 50 bytes of the append (os.write); the append is cut
    off again, and where truncating fails too, the error says what is left in the file."""
    from pytest_distbench.results.document.io import append_output

    path = tmp_path / "summary.md"
    path.write_bytes(b"earlier step\n")
    real_write = os.write

    def full(fd, data):
        if os.fstat(fd).st_size >= len(b"earlier step\n") + 50:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, bytes(data[:25]))

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space left on device"):
        append_output(path, b"## ours\n" + b"x" * 1000)
    assert path.read_bytes() == b"earlier step\n"

    def fails(fd, size):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "ftruncate", fails)
    with pytest.raises(OSError) as caught:
        append_output(path, b"## ours\n" + b"x" * 1000)
    monkeypatch.undo()
    assert str(caught.value) == ("No space left on device; 50 bytes of it left at the end of "
                                 "the file, cut mid-line (removing them failed: Input/output "
                                 "error)")
    assert path.read_bytes() == b"earlier step\n" + b"## ours\n" + b"x" * 42


SIGNAL_MID_WRITE = """
import os, signal

_fsync = os.fsync


def fsync(fd):  # the signal comes when the results file's temporary copy is written
    if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp") and ".run.json." in os.readlink(
            f"/proc/self/fd/{fd}"):
        os.kill(os.getpid(), signal.{name})
    return _fsync(fd)


os.fsync = fsync
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGINT"])
def test_a_signal_while_the_results_file_is_written_leaves_it_whole_and_says_so(
        pytester, distbench_run, name):
    """SIGTERM killed the process mid-write, its temporary file left beside the results file;
    SIGINT printed a 40-line traceback (issue 54, item 10). Now the temporary file is removed,
    the old file is left as it was, the outputs after it are not written, and one ERROR line
    says so; the session ends as interrupted."""
    if not os.path.exists("/proc/self/fd"):
        pytest.skip("needs /proc/self/fd to name the file being synced")
    pytester.makeconftest(SIGNAL_MID_WRITE.replace("{name}", name))
    pytester.makepyfile(test_bench=BENCH)
    out = pytester.path / "run.json"
    out.write_text("the old results\n")
    summary = pytester.path / "summary.md"
    result = distbench_run("--distbench", "--world-size=2", "--distbench-revisits=0",
                           f"--distbench-json={out}", f"--distbench-markdown={summary}")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    [error] = [line for line in result.stdout.lines if "distbench: ERROR" in line]
    assert error.endswith(f"interrupted ({name}) while writing the outputs: the one being "
                          "written is left as it was (no temporary file, no partial append) "
                          "and those after it are not written; written: none")
    text = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert out.read_text() == "the old results\n" and not summary.exists()
    assert sorted(p.name for p in pytester.path.iterdir() if p.name.endswith(".tmp")) == []
