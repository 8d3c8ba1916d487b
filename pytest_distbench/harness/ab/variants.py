"""A/B variants: the baseline's ranks come from a forkserver of their own.

The candidate's ranks are forked by the session's usual forkserver. The baseline's come from a
second forkserver, started with the baseline's environment overrides and/or another Python
interpreter, which imports torch (the baseline's torch, for another interpreter) before it
forks. Environment variables read at torch import time (or by a test module at import) thus
take effect, and nothing of the candidate's installation leaks into the baseline's ranks: the
ranks start from the baseline interpreter's own sys.path, with only this package's directory put
in front so the rank loop is the same code on both sides.

multiprocessing keeps one forkserver per process; a second one is a ForkServer instance of our
own, and a context whose processes are launched through it.
"""

from __future__ import annotations

import atexit
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import context as mp_context
from multiprocessing import forkserver, popen_forkserver, process, spawn, util
from pathlib import Path
from typing import Any

PACKAGE_DIR = Path(__file__).resolve().parent.parent
CHECK_TIMEOUT_S = 120.0
_shim: list[str] = []


def package_shim() -> str:
    """A directory holding only a link to this pytest_distbench package.

    The package's own parent directory will not do: for an installed plugin that is the
    candidate's site-packages, and putting it on the baseline's path would hand the baseline
    the candidate's torch."""
    if not _shim:
        shim = tempfile.mkdtemp(prefix="distbench-shim-")
        os.symlink(PACKAGE_DIR, os.path.join(shim, "pytest_distbench"))
        atexit.register(shutil.rmtree, shim, True)
        _shim.append(shim)
    return _shim[0]


def own_paths(controller_path: list[str]) -> list[str]:
    """The controller's sys.path without its interpreter's installation (the test's
    directories, the rootdir, what the user added)."""
    prefixes = tuple({sys.prefix, sys.base_prefix, sys.exec_prefix})
    return [p for p in controller_path if p and not p.startswith(prefixes)]

_CHECK = """
import json, sys
import torch, pytest
import pytest_distbench.harness.ranks.loop
print(json.dumps({"version": list(sys.version_info[:2]), "torch": torch.__version__,
                  "sys_path": [p for p in sys.path if isinstance(p, str) and p],
                  "executable": sys.executable}))
"""

# Spawning a forkserver reads the process-wide executable and environment; one at a time.
_SPAWN_LOCK = threading.Lock()


class BaselinePythonError(Exception):
    """The baseline interpreter cannot run ranks; str() says why."""


@dataclass(frozen=True)
class InterpreterFacts:
    executable: str
    version: tuple[int, int]
    torch: str
    sys_path: tuple[str, ...]


def check_interpreter(path: str, env: Mapping[str, str] | None = None) -> InterpreterFacts:
    """Run the interpreter once: it must exist, be this Python version, and import torch,
    pytest and the rank loop. Raises BaselinePythonError otherwise."""
    executable = Path(path).expanduser()
    if not executable.exists():
        raise BaselinePythonError(f"{path}: no such file")
    if not os.access(executable, os.X_OK) or executable.is_dir():
        raise BaselinePythonError(f"{path}: not an executable file")
    try:
        done = subprocess.run(
            [str(executable), "-c", _CHECK],
            env=interpreter_environment(env),
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise BaselinePythonError(f"{path}: could not run it: {exc}") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        last = lines[-1] if lines else f"exit status {done.returncode}"
        raise BaselinePythonError(
            f"{path}: cannot run the benchmark ranks (it needs torch and pytest installed): {last}"
        )
    try:
        facts = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise BaselinePythonError(f"{path}: unexpected output {done.stdout[-200:]!r}") from None
    version = tuple(facts["version"])
    if version != tuple(sys.version_info[:2]):
        raise BaselinePythonError(
            f"{path} is Python {version[0]}.{version[1]} but this session runs "
            f"{sys.version_info[0]}.{sys.version_info[1]}; the two must be the same Python "
            "version (processes are handed between them pickled)"
        )
    return InterpreterFacts(
        executable=str(executable),
        version=version,  # type: ignore[arg-type]
        torch=str(facts["torch"]),
        sys_path=tuple(facts["sys_path"]),
    )


def interpreter_environment(overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """os.environ with the overrides, and this package's directory first on PYTHONPATH."""
    env = dict(os.environ)
    env.update(overrides or {})
    parts = [package_shim()] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


@contextmanager
def _spawning_as(executable: str, env: Mapping[str, str]) -> Iterator[None]:
    """The process-wide executable and environment that multiprocessing spawns with, swapped
    for the duration of one forkserver start."""
    with _SPAWN_LOCK:
        saved_exe = spawn.get_executable()
        saved_env = dict(os.environ)
        spawn.set_executable(executable)
        os.environ.clear()
        os.environ.update(env)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved_env)
            spawn.set_executable(saved_exe)


@dataclass
class VariantServer:
    """A forkserver of one variant: its executable, environment and rank sys.path."""

    preload: list[str]
    env_overrides: dict[str, str] = field(default_factory=dict)
    interpreter: InterpreterFacts | None = None
    _server: Any = None

    @property
    def executable(self) -> str:
        return self.interpreter.executable if self.interpreter else sys.executable

    def ensure_running(self) -> Any:
        if self._server is None:
            self._server = forkserver.ForkServer()
            self._server.set_forkserver_preload(self.preload)
        env = (interpreter_environment(self.env_overrides) if self.interpreter
               else {**os.environ, **self.env_overrides})
        with _spawning_as(self.executable, env):
            self._server.ensure_running()
        return self._server

    def rank_sys_path(self, controller_path: list[str]) -> list[str]:
        """Where a rank of this variant imports from: its own interpreter's path (this
        package first, the test's directories last, so the baseline's installed packages win),
        or the controller's when only the environment differs."""
        if self.interpreter is None:
            return list(controller_path)
        return list(dict.fromkeys(
            [package_shim(), *self.interpreter.sys_path, *own_paths(controller_path)]
        ))

    def stop(self) -> None:
        """Stop the server and, through their parent-death signal, any rank it forked.

        Not ForkServer's own stop: that waits until every forked child has gone, which a
        rank that hangs would make forever."""
        server, self._server = self._server, None
        if server is None or server._forkserver_pid is None:
            return
        pid, alive_fd = server._forkserver_pid, server._forkserver_alive_fd
        server._forkserver_pid = server._forkserver_alive_fd = None
        try:
            os.close(alive_fd)
        except OSError:
            pass
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        address = server._forkserver_address
        if address and not util.is_abstract_socket_namespace(address):
            try:
                os.unlink(address)
            except OSError:
                pass

    def context(self, name: str) -> mp_context.BaseContext:
        """A multiprocessing context whose processes this server forks; `name` is the key the
        launched processes carry to find the server again."""
        _SERVERS[name] = self
        return _VariantContext(name)


# Variant name -> its server. Processes carry the name (a string pickles anywhere); the classes
# below live at module level because the process object is pickled by reference to its class.
_SERVERS: dict[str, VariantServer] = {}


class _VariantPopen(popen_forkserver.Popen):
    """popen_forkserver.Popen, launched through the variant's server with its sys.path."""

    def _launch(self, process_obj: Any) -> None:
        variant = _SERVERS[process_obj._distbench_variant]
        prep = spawn.get_preparation_data(process_obj._name)
        prep["sys_path"] = variant.rank_sys_path(prep.get("sys_path", []))
        if variant.interpreter is not None:
            # The controller's __main__ (pytest's entry script) means nothing over there.
            prep.pop("init_main_from_path", None)
            prep.pop("init_main_from_name", None)
        buf = io.BytesIO()
        mp_context.set_spawning_popen(self)
        try:
            mp_context.reduction.dump(prep, buf)
            mp_context.reduction.dump(process_obj, buf)
        finally:
            mp_context.set_spawning_popen(None)
        server = variant.ensure_running()
        self.sentinel, w = server.connect_to_new_process(self._fds)
        parent_w = os.dup(w)  # the child watches this end to notice the controller is gone
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _VariantProcess(process.BaseProcess):
    _start_method = "forkserver"
    _distbench_variant = ""

    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        return _VariantPopen(process_obj)


class _VariantContext(mp_context.BaseContext):
    _name = "forkserver"

    def __init__(self, variant: str) -> None:
        self.variant = variant

    def Process(self, *args: Any, **kwargs: Any) -> _VariantProcess:  # noqa: N802 - mp's name
        launched = _VariantProcess(*args, **kwargs)
        launched._distbench_variant = self.variant
        return launched
