"""The command lines README.md and docs/*.md give, read from the docs themselves, and how each
is run by tests/test_docs_commands.py: as written, plus a small budget.

A command is one line of a fenced block (continued by a trailing backslash) that runs the
product: `pytest ... --distbench ...`, `torchrun ... -m pytest --distbench ...`,
`pytest-distbench ...`, or the srun/mpirun forms. Comments after `#` are dropped. In a YAML
block (a CI recipe, docs/ci.md) a line may start with a list item's `- ` and a `run:` or
`script:` key, as GitLab's `script:` lists and GitHub's one-line steps write a command.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conftest import PLUGINS_OFF

DOCS = ("README.md", "docs/*.md")
LAUNCHERS = ("srun", "mpirun", "mpiexec")
# What no machine of this project's CI has: another host, a scheduler, a GPU.
ELSEWHERE = (
    (lambda argv: argv[0] in LAUNCHERS, "needs a SLURM/MPI allocation; its environment is "
     "simulated at the defaults in tests/test_modes_at_defaults.py"),
    (lambda argv: any("HOST" in a or "host0" in a for a in argv), "needs a second machine; "
     "two torchrun agents on loopback run at the defaults in tests/test_modes_at_defaults.py"),
    (lambda argv: "--backend=nccl" in argv, "needs a GPU (docs/gpu.md)"),
)
# Points whose own size makes them minutes long even at the smallest budget: run with -m slow.
SLOW = (
    (lambda argv: _world_sizes(argv) and max(_world_sizes(argv)) > 8,
     "more ranks than the main job (10-80)"),
    (lambda argv: any(a.startswith("--distbench-store-clients=") and max(
        int(n) for n in a.split("=", 1)[1].split(",")) > 512 for a in argv),
     "thousands of store clients"),
    (lambda argv: _runs_everything(argv), "every suite (the main job's selection)"),
    (lambda argv: any(a.startswith("--distbench-credits=") and len(a.split(",")) >= 3
                      for a in argv) and not _chooses_sizes(argv),
     "every default size x three or more credit counts"),
    (lambda argv: "--distbench-allocate=2GiB" in argv and "-k" in argv,
     "a whole family under gigabytes of memory pressure per rank"),
    (lambda argv: sum(a.startswith("pytest_distbench.suites.") for a in argv) >= 2,
     "two whole suites at every default size"),
    (lambda argv: any(a.startswith("--tensor-size=") and any(
        s.endswith(("GB", "GiB")) or s.endswith(("640MB",)) for s in a.split("=", 1)[1].split(","))
        for a in argv), "messages of hundreds of MB to GB"),
)
# A command written with "..." for "any suite" runs on the suites it selects with its own -k,
# or on this one.
ANY_SUITE = ["--pyargs", "pytest_distbench.suites"]
ANY_SELECTION = ["-k", "all_reduce", "--tensor-size=1KiB"]
# What a command with no selection of its own runs, beside the one run of everything: the
# options it shows are the point, not the suites.
ONE_SUITE = ["--pyargs", "pytest_distbench.suites.test_collectives", "-k", "all_reduce",
             "--tensor-size=1KiB,64KiB"]
BUDGET = ["--distbench-iterations=3", "--distbench-warmup=1", "--distbench-timeout=120s"]
# A launched command (torchrun) is shortened by its budget alone and runs with the product's
# revisits: an iteration count, or the revisits off, is another way for a run to stop than the
# user's (every measuring test failed under torchrun at the defaults while its count-mode
# twins passed). Its records are built as a user's are; only the budget is smaller.
LAUNCHED_BUDGET = ["--distbench-budget=0.1s", "--distbench-timeout=120s"]


@dataclass
class Command:
    source: str  # file:line
    text: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    stdout_to: str | None = None  # `> FILE` or `>> FILE` after the command

    @property
    def id(self) -> str:
        return self.source


def documented_commands(root: Path) -> list[Command]:
    found = []
    for pattern in DOCS:
        for path in sorted(root.glob(pattern)):
            found += commands_in(path.read_text(encoding="utf-8"),
                                 str(path.relative_to(root)))
    return found


# What a YAML block writes before a command: a list item's dash, a step's or a job's key.
YAML_LEAD = re.compile(r"^\s*(?:-\s+)?(?:(?:run|script):\s+)?")


def commands_in(markdown: str, name: str) -> list[Command]:
    """Every command line of the fenced blocks of `markdown` that runs the product."""
    out = []
    fenced = yaml = False
    pending: list[str] = []
    start = 0
    for number, line in enumerate(markdown.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            yaml = fenced and line.strip()[3:].strip() in ("yaml", "yml")
            pending = []
            continue
        if not fenced:
            continue
        if not pending:
            start = number
            if yaml:
                line = YAML_LEAD.sub("", line, count=1)
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        text = " ".join(part.strip() for part in pending)
        pending = []
        command = parse(text, f"{name}:{start}")
        if command is not None:
            out.append(command)
    return out


def parse(text: str, source: str) -> Command | None:
    try:
        words = shlex.split(text, comments=True)
    except ValueError:
        return None
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    if not words or not _runs_product(words):
        return None
    stdout_to = None
    for redirect in (">", ">>"):
        if redirect in words:
            at = words.index(redirect)
            stdout_to = words[at + 1] if at + 1 < len(words) else None
            words = words[:at]
    return Command(source, text, words, env, stdout_to)


def _runs_product(words: list[str]) -> bool:
    if words[0] == "pytest-distbench":
        return True
    return words[0] in ("pytest", "torchrun", "python", *LAUNCHERS) and "--distbench" in words


def where_not(command: Command) -> str | None:
    """Why the command cannot run on this machine, or None."""
    for rule, reason in ELSEWHERE:
        if rule(command.argv):
            return reason
    return None


def why_slow(command: Command) -> str | None:
    for rule, reason in SLOW:
        if rule(command.argv):
            return reason
    return None


# Commands of ten seconds and more whose words a quicker documented command or test also
# runs: CI runs them after the README's test command (`pytest -m extended`). Keyed by their
# words (comments dropped), so a command edited in the docs falls back to the quick set, never
# out of CI.
EXTENDED = {
    "pytest --distbench --world-size=2,4,8 --pyargs pytest_distbench.suites.test_collectives "
    "--tensor-size=4B,1KiB,1MiB,64MiB":
        "every collective at three world sizes and 64 MiB (docs/reports.md's 2,4,8 sweep and "
        "tests/test_suite.py run the collectives quickly)",
    "pytest --distbench --world-size=3 --pyargs pytest_distbench.suites -k message_rate "
    "--tensor-size=1B --distbench-credits=1,5,10,100 --distbench-duration=30s "
    "--distbench-report-every=5s":
        "24 duration runs (docs/p2p.md's count-mode twin and README's duration message-rate "
        "command run quickly)",
    "pytest --distbench --pyargs pytest_distbench.suites -k store":
        "the whole store study (tests/test_store_suite.py runs it with both backends)",
    "pytest -n 4 --distbench --distbench-json=run.json":
        "four xdist workers (docs/launchers.md runs two, and tests/test_xdist.py)",
    "pytest -n 4 --distbench --distbench-json=run.json --distbench-save=nightly":
        "four xdist workers saving a baseline (docs/launchers.md runs two workers quickly; "
        "tests/test_xdist.py saves under xdist)",
    "pytest --distbench --world-size=3 --pyargs pytest_distbench.suites -k message_rate "
    "--tensor-size=1B --distbench-credits=1,5,10,100":
        "24 message-rate points (README's and docs/p2p.md's one-size message-rate commands run "
        "quickly)",
    "pytest --distbench --world-size=2 --pyargs pytest_distbench.suites -k transports "
    "--tensor-size=1.25KB,20KB,1.25MB,10MB,40MB":
        "transports up to 40 MB (docs/rpc.md's 4 B and 1 MiB RPC command runs them quickly)",
    "pytest --distbench --pyargs pytest_distbench.suites -k store and barrier "
    "--distbench-store-backend=libuv":
        "the store barrier at every client count (tests/test_store_suite.py picks a backend)",
    "torchrun --standalone --nproc-per-node=4 -m pytest --distbench":
        "four torchrun ranks on the built-in suites (docs/launchers.md's four on a user's "
        "file, also extended; tests/test_launcher_run.py runs torchrun at 2 and 3 ranks)",
    "torchrun --standalone --nproc-per-node=4 -m pytest --distbench bench_comms.py":
        "four torchrun ranks on a user's file (tests/test_launcher_run.py runs torchrun on a "
        "user's file at 2 and 3 ranks)",
    "pytest -n 2 --distbench --distbench-json=run.json bench_comms.py":
        "two xdist workers on a user's file (tests/test_xdist.py runs a user's file under two "
        "workers and checks every record and file)",
    "pytest --distbench --distbench-baseline-python=../main/.venv/bin/python":
        "A/B mode against another installation's interpreter (tests/test_plugin_ab.py runs "
        "--distbench-baseline-python against an installation of its own)",
    "pytest --distbench --distbench-baseline-python=../main/.venv/bin/python "
    "--distbench-markdown=$GITHUB_STEP_SUMMARY --junitxml=report.xml bench_comms.py":
        "docs/ci.md's pull-request gate: A/B mode against another installation's interpreter on a "
        "user's file, 45 s here (tests/test_plugin_ab.py runs --distbench-baseline-python, "
        "tests/test_plugin_reports.py the markdown and JUnit)",
    "pytest --distbench --distbench-baseline-python=../main/.venv/bin/python "
    "--distbench-markdown=distbench.md --junitxml=report.xml bench_comms.py":
        "docs/ci.md's GitLab twin of its GitHub pull-request gate (also extended)",
    "pytest --distbench --world-size=2 --pyargs pytest_distbench.suites -k p2p":
        "the p2p suite at every default size (tests/test_p2p_suite.py runs it at two ranks, "
        "its sizes chosen)",
    "pytest-distbench capture --out trace --steps 1,2 -- torchrun --standalone "
    "--nproc-per-node=2 benchmarks/replay_programs.py ddp":
        "a torchrun DDP step captured (tests/test_replay_trace.py captures a torchrun DDP launch "
        "at three ranks through the same command)",
    "pytest --distbench --world-size=2,4,8 --distbench-plot=plots/":
        "plots of a 2,4,8 sweep (README's 2,4 plot command runs quickly)",
    "pytest --distbench --world-size=3 --pyargs pytest_distbench.suites -k message_rate -v "
    "--tensor-size=1MiB+1B --distbench-credits=1,5,10,100 --distbench-duration=30s "
    "--distbench-report-every=5s":
        "16 message-rate duration runs with live lines (tests/test_duration_live.py runs live "
        "lines under -v, tests/test_p2p_suite.py the message rate with credits)",
}


def why_extended(command: Command, commands: Sequence[Command]) -> str | None:
    words = " ".join(command.argv)
    if words in EXTENDED:
        return EXTENDED[words]
    twin = narrower_twin(command, commands)
    return f"every default size; {twin.source} runs its selection narrowed" if twin else None


# Options that narrow or widen a sweep without changing what a command exercises.
SWEEP_OPTIONS = ("--tensor-size=", "--distbench-credits=", "--distbench-budget=")


def narrower_twin(command: Command, commands: Sequence[Command]) -> Command | None:
    """Another documented command that is this one with its sizes chosen (and maybe credits
    or budget), where this one runs every default size: running that one exercises the same
    words, so this one's whole sweep runs with the extended set."""
    if _chooses_sizes(command.argv):
        return None
    mine = _without_sweep(command.argv)
    for other in commands:
        if (other is not command and _without_sweep(other.argv) == mine
                and _chooses_sizes(other.argv)):
            return other
    return None


def _chooses_sizes(argv: Sequence[str]) -> bool:
    return any(a.startswith("--tensor-size=") for a in argv)


def _without_sweep(argv: Sequence[str]) -> list[str]:
    return [a for a in argv if not a.startswith(SWEEP_OPTIONS)]


def expand(text: str, env: dict[str, str]) -> str:
    """$NAME and ${NAME} replaced from `env` (unknown names left as written)."""
    return re.sub(r"\$(?:\{(\w+)\}|(\w+))",
                  lambda m: env.get(m.group(1) or m.group(2), m.group(0)), text)


def runnable(command: Command, python: str, env: dict[str, str] | None = None) -> list[str]:
    """The command as run here: its own words, "..." filled in, and a small budget."""
    argv = [expand(a, env or {}) for a in command.argv]  # as the shell would
    if "..." in argv:
        at = argv.index("...")
        argv[at:at + 1] = ANY_SUITE + ([] if "-k" in argv else ANY_SELECTION)
    if argv[0] == "pytest-distbench":
        if "--" in argv:  # capture: the launch after -- runs with this Python too
            at = argv.index("--") + 1
            argv[at:] = _with_python(argv[at:], python)
        return [python, "-m", "pytest_distbench.cli", *argv[1:]]
    if argv[0] == "torchrun":
        argv = [python, "-m", "torch.distributed.run", *argv[1:]]
    elif argv[0] == "pytest":
        argv = [python, "-m", "pytest", *argv[1:]]
    if not _has_selection(argv) and not _runs_everything(command.argv):
        argv += ONE_SUITE
    argv += ["-p", "no:cacheprovider", *LAUNCHED_BUDGET] if launched(command) else _budget(argv)
    return argv


def launched(command: Command) -> bool:
    """A command whose pytest runs as the launcher's ranks."""
    return command.argv[0] in ("torchrun", *LAUNCHERS)


def session_env(command: Command) -> dict[str, str]:
    """What the command's pytest sessions run with beside the docs' own environment: a
    launched one with the product's revisits, as its user has them."""
    return {"PYTEST_ADDOPTS": PLUGINS_OFF} if launched(command) else {}


def _with_python(launch: list[str], python: str) -> list[str]:
    if launch[:1] == ["torchrun"]:
        return [python, "-m", "torch.distributed.run", *launch[1:]]
    if launch[:1] == ["python"]:
        return [python, *launch[1:]]
    return launch


def _budget(argv: list[str]) -> list[str]:
    extra = ["-p", "no:cacheprovider"]
    if any(a.startswith("--distbench-duration=") for a in argv):
        extra += ["--distbench-duration=0.2s", "--distbench-warmup=1", "--distbench-timeout=120s"]
        if any(a.startswith("--distbench-report-every=") for a in argv):
            extra.append("--distbench-report-every=0.1s")
        return extra
    extra += BUDGET
    if any(a.startswith("--distbench-rounds=") for a in argv) or any(
            a.startswith("--distbench-baseline-") for a in argv):
        extra.append("--distbench-rounds=3")
    return extra


def _has_selection(argv: list[str]) -> bool:
    """A path, --pyargs or -k of its own."""
    return "--pyargs" in argv or "-k" in argv or any(a.endswith(".py") for a in argv)


def _runs_everything(argv: list[str]) -> bool:
    """A plain `pytest --distbench` with the main job's world size and nothing selected."""
    return (argv[0] in ("pytest", "torchrun") and not _has_selection(argv)
            and any(a == "--world-size=8" for a in argv))


def _world_sizes(argv: list[str]) -> list[int]:
    for a in argv:
        if a.startswith("--world-size="):
            return [int(n) for n in a.split("=", 1)[1].split(",") if n.isdigit()]
    return []
