"""Pytest sessions forked from a process that imported torch once, for this suite's own tests.

A pytest session under test is a process of its own with its own files for output, its own
environment, working directory and exit status, as `python -m pytest` in a subprocess would
be; only its start differs. Started as a new interpreter, every session imported torch again
(about a second each, several hundred sessions: most of the suite's time, docs/architecture.md
"The test suite's time"). A zygote imports torch (nothing of pytest's plugins, which pytest
must import itself to rewrite their asserts) and then forks one child per session: the child
takes the session's environment, directory, arguments and output files and runs pytest's own
entry point, then its atexit handlers, then os._exit instead of the interpreter's teardown.
What a session starts (the plugin's forkserver, its ranks, torchrun) is started as before,
with the session's environment.

The plugin's forkserver, which a local session starts as a new interpreter that imports torch
(2.5 s of CPU on the 2-core VM, most of a small session's time), is forked from the session
before pytest starts instead: the same multiprocessing forkserver, with the same preload, in
the session's environment and directory, from a process that imported torch and nothing of the
plugin yet. Sessions in a private network namespace start theirs as before (it must start
inside the namespace), as do launcher-mode ranks (they start none).

Set DISTBENCH_TEST_SUBPROCESS=1 to run every session as a plain subprocess instead.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from leaks import TAG_VARIABLE

PLAIN_SUBPROCESS_VARIABLE = "DISTBENCH_TEST_SUBPROCESS"
# A launcher's variables put a session in launcher mode (this suite may itself run inside a
# SLURM job or under torchrun: tests/conftest.py removes them; the tests set the ones they
# mean to).
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                      "MASTER_PORT", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")
LAUNCHER_PREFIXES = ("TORCHELASTIC_", "SLURM_", "OMPI_COMM_WORLD_")
# harness/local/world.PRELOAD (tests/test_zygote.py holds them equal): named here, since the
# session must not import the plugin before pytest does (its asserts are rewritten on import).
FORKSERVER_PRELOAD = ["torch", "torch.distributed", "pytest",
                      "pytest_distbench.harness.ranks.loop",
                      "pytest_distbench.harness.ranks.measure",
                      "pytest_distbench.harness.local.forkserver_exit"]


@dataclass
class Exited:
    returncode: int
    timed_out: bool


class Zygote:
    """One forking process: one session at a time. The first of a pool is a new interpreter
    that imports torch; the others are forks of an idle one (spares), which cost a fork
    instead of a second import of torch (3.5 s of CPU on the 2-core VM)."""

    def __init__(self, env: dict[str, str] | None, *, channel: tuple | None = None) -> None:
        self.process: subprocess.Popen | None = None
        if channel is not None:  # a spare: its pid and the two FIFOs it serves on
            self.pid, self.requests, self.replies = channel
            return
        assert env is not None
        # Not the leak check's tag of the test that happens to start it: the zygote outlives it.
        env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", TAG_VARIABLE)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})"
             "; import zygote; zygote.serve()"],
            # Unbuffered: a buffered reader could hold the exit status read ahead with the
            # pid, and select() on the pipe would then wait for a line already read.
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd="/", bufsize=0)
        self.pid, self.requests, self.replies = (self.process.pid, self.process.stdin,
                                                 self.process.stdout)

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.poll() is None
        try:  # a spare is its zygote's child, not ours: alive while not a zombie
            with open(f"/proc/{self.pid}/stat", encoding="ascii") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except (OSError, IndexError):
            return False

    def fork_spare(self) -> Zygote:
        """A fork of this (idle) zygote that serves on FIFOs of its own."""
        with tempfile.TemporaryDirectory(prefix="distbench-test-zygote-") as folder:
            paths = [os.path.join(folder, name) for name in ("requests", "replies")]
            for path in paths:
                os.mkfifo(path, 0o600)
            self._send({"spare": paths})
            # Opened in the order the spare opens them: each open waits for the other side.
            requests = open(paths[0], "wb", buffering=0)
            replies = open(paths[1], "rb", buffering=0)
        pid = json.loads(self._reply(None))["pid"]
        return Zygote(None, channel=(pid, requests, replies))

    def run(self, argv: list[str], *, cwd: Path, env: dict[str, str], stdout: Path,
            stderr: Path | None, timeout: float | None) -> Exited:
        """Run `python -m pytest` with `argv` (without the interpreter and -m pytest); a
        stderr of None goes where stdout goes."""
        self._send({"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(stdout),
                    "stderr": None if stderr is None else str(stderr), **_inherited()})
        pid = json.loads(self._reply(None))["pid"]
        try:
            line = self._reply(timeout)
            timed_out = False
        except TimeoutError:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            line = self._reply(None)
            timed_out = True
        return Exited(json.loads(line)["returncode"], timed_out)

    def _send(self, request: dict) -> None:
        data = memoryview(json.dumps(request).encode() + b"\n")
        while data:
            data = data[self.requests.write(data):]

    def _reply(self, timeout: float | None) -> bytes:
        ready, _, _ = select.select([self.replies], [], [], timeout)
        if not ready:
            raise TimeoutError
        line = self.replies.readline()
        if not line:
            status = self.process.wait() if self.process is not None else "a spare"
            raise RuntimeError(f"the test zygote exited ({status})")
        return line

    def close(self) -> None:
        self.requests.close()  # it exits at the end of its requests
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        else:  # its replies end when it exits
            ready, _, _ = select.select([self.replies], [], [], 10)
            if not ready or self.replies.read():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)
        self.replies.close()


class ZygotePool:
    """Zygotes for sessions run side by side (the documented commands run several at once)."""

    def __init__(self) -> None:
        # Zygotes start with the environment of this moment, not that of the test that needs
        # one first (each session gets its own; only what torch reads at import stays).
        self.env = dict(os.environ)
        self.idle: list[Zygote] = []
        self.all: list[Zygote] = []
        self.lock = threading.Lock()

    def run(self, argv: list[str], **kw) -> Exited:
        with self.lock:
            while self.idle and not self.idle[-1].alive():
                self.idle.pop()
            zygote = self.idle.pop() if self.idle else None
            if zygote is None:
                zygote = Zygote(self.env)
                self.all.append(zygote)
            if not self.idle:  # the last idle one: a spare forked from it while it can
                spare = zygote.fork_spare()
                self.all.append(spare)
                self.idle.append(spare)
        try:
            return zygote.run(argv, **kw)
        finally:
            with self.lock:
                self.idle.append(zygote)

    def run_command(self, argv: list[str], *, cwd: Path, env: dict[str, str],
                    timeout: float, merge: bool = False) -> subprocess.CompletedProcess:
        """subprocess.run(argv, capture_output=True, text=True, ...) (stderr into stdout with
        `merge`), a `python -m pytest` of this interpreter forked from a zygote;
        TimeoutExpired as subprocess.run raises it."""
        if plain_subprocess() or argv[:3] != [sys.executable, "-m", "pytest"]:
            return subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                                  text=True, timeout=timeout)
        with tempfile.TemporaryDirectory(prefix="distbench-test-session-") as folder:
            out = Path(folder) / "stdout"
            err = None if merge else Path(folder) / "stderr"
            exited = self.run(argv[3:], cwd=cwd, env=env, stdout=out, stderr=err,
                              timeout=timeout)
            stdout = out.read_text(encoding="utf-8", errors="replace")
            stderr = None if err is None else err.read_text(encoding="utf-8", errors="replace")
        if exited.timed_out:
            raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
        return subprocess.CompletedProcess(argv, exited.returncode, stdout, stderr)

    def close(self) -> None:
        for zygote in reversed(self.all):  # spares first: each is reaped by what it forked from
            zygote.close()


_shared: ZygotePool | None = None


def shared_pool() -> ZygotePool:
    """The session's pool (tests/conftest.py closes it at the end of the session)."""
    global _shared
    if _shared is None:
        _shared = ZygotePool()
    return _shared


def close_shared_pool() -> None:
    global _shared
    if _shared is not None:
        _shared.close()
        _shared = None


def _inherited() -> dict:
    """What a subprocess inherits from the test besides its environment (tests narrow the
    CPUs or the file limit for the sessions they start)."""
    umask = os.umask(0)
    os.umask(umask)
    return {"affinity": sorted(os.sched_getaffinity(0)), "umask": umask,
            "nofile": list(resource.getrlimit(resource.RLIMIT_NOFILE))}


def plain_subprocess() -> bool:
    return os.environ.get(PLAIN_SUBPROCESS_VARIABLE, "") not in ("", "0")


# The zygote's side.

def serve() -> None:
    """Read one request a line; fork a session for it; reply its pid, then its exit status."""
    import pytest  # noqa: F401  (imported before any fork: each session would import it)
    import torch  # noqa: F401

    # What is imported now is never garbage: frozen, a session's collections skip it (pytest
    # collects five times at its end; with torch loaded each took 0.17 s).
    gc.freeze()
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    _serve(requests, replies, sys.path[1:])  # without the folder this module was found in


def _serve(requests, replies, base_path: list[str]) -> None:
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            requests.close()
            replies.close()
            if "spare" in request:  # a zygote of its own, on the FIFOs the pool made
                try:
                    ours = open(request["spare"][0], "rb")
                    theirs = open(request["spare"][1], "wb")
                    _serve(ours, theirs, base_path)
                finally:
                    os._exit(0)
            _session(request, base_path)  # never returns
        replies.write(json.dumps({"pid": pid}).encode() + b"\n")
        replies.flush()
        if "spare" in request:
            continue  # it ends when its requests do; it is reaped when it exits
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}).encode()
                      + b"\n")
        replies.flush()
    while True:  # the spares forked from it, closed before it (ZygotePool.close)
        try:
            os.wait()
        except ChildProcessError:
            return


def _session(request: dict, base_path: list[str]) -> None:
    code = 1
    try:
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = out if request["stderr"] is None else os.open(
            request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in {out, err}:
            os.close(fd)
        os.chdir(request["cwd"])
        os.sched_setaffinity(0, request["affinity"])
        os.umask(request["umask"])
        resource.setrlimit(resource.RLIMIT_NOFILE, tuple(request["nofile"]))
        env = request["env"]
        os.environ.clear()
        os.environ.update(env)  # what the session starts inherits it, as from a subprocess
        # What an interpreter reads from its environment at start, as a new one would.
        sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
        sys.pycache_prefix = env.get("PYTHONPYCACHEPREFIX") or None
        import tempfile

        tempfile.tempdir = None  # found again from TMPDIR, not the zygote's cached choice
        # `python -m pytest` puts its directory first, then PYTHONPATH.
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:] = [request["cwd"], *extra, *base_path]
        import importlib

        importlib.invalidate_caches()
        import pytest.__main__

        # multiprocessing re-imports __main__ in what it spawns unless it is a package's
        # __main__, as under `python -m pytest`.
        sys.modules["__main__"] = pytest.__main__
        if _uses_the_plugins_forkserver(request["argv"], env):
            _fork_the_forkserver()
        sys.argv = [pytest.__main__.__file__, *request["argv"]]
        import pytest

        code = int(pytest.console_main())
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        # What the session registered to run at exit runs, as in `python -m pytest` (the
        # A/B mode's package shim is removed so); only the interpreter's teardown is skipped.
        import atexit

        try:
            atexit._run_exitfuncs()
        except BaseException:
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def _uses_the_plugins_forkserver(argv: list[str], env: dict[str, str]) -> bool:
    words = [*argv, *env.get("PYTEST_ADDOPTS", "").split()]
    launched = any(k in LAUNCHER_VARIABLES or k.startswith(LAUNCHER_PREFIXES) for k in env)
    return ("--distbench" in words and not launched
            and not any(w.startswith("--distbench-private-network") for w in words))


def _fork_the_forkserver() -> None:
    """multiprocessing's forkserver (and its resource tracker) started as they always are,
    except that each is a fork of this process running the code it would have been started
    with, holding only the descriptors it would have been given."""
    from multiprocessing import forkserver, util

    spawn = util.spawnv_passfds

    def fork_instead(path, args, passfds):
        pid = os.fork()
        if pid == 0:
            try:
                keep = {0, 1, 2, *passfds}
                for fd in [int(n) for n in os.listdir("/proc/self/fd")]:
                    if fd not in keep:
                        try:
                            os.close(fd)
                        except OSError:
                            pass  # the listing's own descriptor, closed already
                exec(args[args.index("-c") + 1], {"__name__": "__main__"})
            except SystemExit:
                pass
            finally:
                os._exit(0)
        return pid

    util.spawnv_passfds = fork_instead
    try:
        forkserver.set_forkserver_preload(FORKSERVER_PRELOAD)
        forkserver.ensure_running()
    finally:
        util.spawnv_passfds = spawn
