"""Put on PYTHONPATH by `pytest-distbench capture`: every Python process of the wrapped
launch runs it, and a process that initializes a process group starts capturing then.

Nothing is imported here but the standard library: the launcher's own processes (torchrun's
agent) never load torch because of it. An import hook waits for torch.distributed's c10d
module and wraps init_process_group / destroy_process_group once it has loaded.

Every such process also dies with the process that started it (Linux's parent-death signal,
SIGKILL): the launcher dies with the command, its ranks (torchrun starts each in a session of
its own, out of reach of a signal to the command's group) with the launcher, so a command
killed outright (SIGKILL, the OOM killer) leaves no rank running.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_TARGET = "torch.distributed.distributed_c10d"


def _chain() -> None:
    # A sitecustomize of the environment's own, shadowed by this one, still runs.
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if os.path.abspath(entry or ".") == here:
            continue
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is not None and spec.loader is not None:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return


def _die_with_parent() -> None:
    # The signal comes when the thread that started this process ends: the command's and
    # torchrun's main threads start theirs. A launch that starts ranks from a thread that
    # ends before them would lose them: none of the launchers this is tried with does.
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PDEATHSIG
    except (OSError, AttributeError):
        return


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):  # noqa: ANN001 - the import protocol's
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):  # noqa: ANN001
            run(module)
            from pytest_distbench.families.replay.launched import install

            install(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("DISTBENCH_CAPTURE_OUT"):
    _die_with_parent()
    sys.meta_path.insert(0, _Hook())
_chain()
