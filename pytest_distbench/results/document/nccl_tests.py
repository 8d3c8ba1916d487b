"""nccl-tests' own JSON (`all_reduce_perf ... -J FILE`, format version 3) read as a results
document, so `pytest-distbench compare`, `plot` and `--distbench-compare` put nccl-tests' figures
from the same machine beside the plugin's.

Each size of the file becomes one record of that collective, at the file's world size (one rank
per device it lists), timed as nccl-tests times (CUDA events around `iterations` back-to-back
calls: `cuda-batch`, or `cuda-graph` with `-G`), its one sample the file's average time per
call. nccl-tests times every size out of place and in place; the record takes the one the
plugin's built-in suite runs (torch's all_reduce, broadcast and reduce write over their input;
its all_gather, reduce_scatter and all_to_all do not), and its name says which.

Records of the two tools are matched by what they measured (collective, world size, size and
type, on nccl), not by pytest node id: `aligned` re-keys both documents of a pair where one
of them came from nccl-tests.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from ..rendering.fit import QUOTED, printable
from ..statistics import stats
from .fields import SchemaError, is_int, is_number, short
from .record import Record
from .schema import RecordError, check_values, stored_record

FORMAT_VERSION = 3
SOURCE = "nccl-tests"
# What an nccl-tests file tells of the environment a comparison holds equal (no torch, CPU).
FINGERPRINT = ("gpus", "nccl", "world_sizes")

# nccl-tests' binary -> (the collective, its bus-bandwidth factor as nccl-tests' PERFORMANCE.md
# gives it, whether the plugin's call of it is in place).
BINARIES: dict[str, tuple[str, str, bool]] = {
    "all_reduce_perf": ("all_reduce", "2(n-1)/n", True),
    "all_gather_perf": ("all_gather", "(n-1)/n", False),
    "reduce_scatter_perf": ("reduce_scatter", "(n-1)/n", False),
    "alltoall_perf": ("all_to_all", "(n-1)/n", False),
    "broadcast_perf": ("broadcast", "1", True),
    "reduce_perf": ("reduce", "1", True),
}
# nccl-tests' type names (its -d option) in torch's spelling, the plugin's `dtype`.
TYPES = {"float": "float32", "half": "float16", "double": "float64", "bfloat16": "bfloat16",
         "int8": "int8", "uint8": "uint8", "int32": "int32", "uint32": "uint32",
         "int64": "int64", "uint64": "uint64", "f8e4m3": "float8_e4m3fn",
         "f8e5m2": "float8_e5m2"}


class NcclTestsError(ValueError):
    """A damaged nccl-tests file: `field` names where (e.g. `results[3].in_place.time`)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def is_nccl_tests(raw: Any) -> bool:
    """Whether parsed JSON is nccl-tests' own output rather than a results document."""
    return (isinstance(raw, dict) and "distbench" not in raw and "results" in raw
            and "config" in raw)


def from_document(doc: dict[str, Any]) -> bool:
    """Whether a results document was read from an nccl-tests file."""
    environment = doc.get("distbench", {}).get("environment", {})
    return isinstance(environment, dict) and environment.get("source") == SOURCE


def as_document(raw: dict[str, Any], path: str | os.PathLike[str]) -> dict[str, Any]:
    """The results document of an nccl-tests file; NcclTestsError names a damaged field.

    The file goes through the results schema's own checks: every value's size and depth
    (check_values) before anything is read, and each record it becomes (stored_record), so
    what a results file may not hold is refused here, naming the entry, not later in a sum."""
    from .build import make_document

    try:
        check_values(raw, "not an nccl-tests file this reads")
    except SchemaError as exc:
        raise NcclTestsError(exc.field, exc.message) from None
    version = raw.get("version")
    if version != FORMAT_VERSION:
        raise NcclTestsError("version", f"nccl-tests JSON format {short(version)}: this reads "
                                        f"format {FORMAT_VERSION} (nccl-tests 2.17 and later)")
    args = _field(raw, "args", list, "a list (the command line)")
    if not args or not isinstance(args[0], str):
        raise NcclTestsError("args[0]", "expected the nccl-tests binary that wrote the file")
    binary = os.path.basename(args[0])
    if binary not in BINARIES:
        raise NcclTestsError("args[0]", f"{short(binary)} is not one of nccl-tests' binaries this "
                                        f"reads ({', '.join(sorted(BINARIES))})")
    family, factor, in_place = BINARIES[binary]
    config = _field(raw, "config", dict, "an object")
    devices = _field(config, "devices", list, "a list of the ranks' devices", "config.")
    if not devices or not all(isinstance(d, dict) for d in devices):
        raise NcclTestsError("config.devices", "expected one object per rank")
    world_size = len(devices)
    graph = config.get("graph")
    if not is_int(graph) or graph < 0:
        raise NcclTestsError("config.graph", f"expected an integer >= 0, got {short(graph)}")
    results = _field(raw, "results", list, "a list of sizes")
    if not results:
        raise NcclTestsError("results", "no size was measured")
    records = [_record(entry, f"results[{i}]", family, factor, in_place, world_size, graph,
                       binary) for i, entry in enumerate(results)]
    # A size below one element per rank is rounded down to 0 B by nccl-tests, which then
    # times a call of nothing (all_gather -b 4 at one rank): no figure of a size.
    records = [r for r in records if r["nbytes"]]
    if not records:
        raise NcclTestsError("results", "every size is 0 B: nothing was measured")
    environment = {
        "source": SOURCE,
        "command": " ".join(str(a) for a in args),
        "gpus": sorted({str(d["device_info"]) for d in devices if d.get("device_info")}),
        "nccl": _nccl_version(raw.get("nccl_version")),
        "hostname": next((str(d["hostname"]) for d in devices if d.get("hostname")), None),
        "world_sizes": [world_size],
        "start_time": raw.get("start_time"),
    }
    return make_document(records, environment, [str(a) for a in args],
                         commit_info={"id": "unknown", "source": os.fspath(path)})


def describe(doc: dict[str, Any]) -> str | None:
    """What an nccl-tests document's figures are, for the output that shows them; None for a
    results file of the plugin."""
    if not from_document(doc):
        return None
    records = [b["distbench"] for b in doc["benchmarks"]]
    first = records[0]
    place = "in-place" if first["params"].get("in_place") else "out-of-place"
    calls = sorted({r["batch_iterations"] for r in records})
    # The command is the file's own text: shown safe, and short (args may be megabytes).
    command = printable(doc["distbench"]["environment"].get("command"), most=QUOTED)
    return (f"{command}: nccl-tests' {place} times "
            f"(the plugin's {first['family']} is {place}), {first['timing']}, one sample per "
            f"size: its mean over {'/'.join(map(str, calls))} calls, no interval")


def _record(entry: Any, where: str, family: str, factor: str, in_place: bool,
            world_size: int, graph: int, binary: str) -> Record:
    if not isinstance(entry, dict):
        raise NcclTestsError(where, "expected an object per size")
    size = entry.get("size")
    if not is_int(size) or size < 0:
        raise NcclTestsError(f"{where}.size",
                             f"expected bytes (an integer >= 0), got {short(size)}")
    count = entry.get("count")
    if not is_int(count) or count < 0:
        raise NcclTestsError(f"{where}.count", f"expected an integer >= 0, got {short(count)}")
    kind = entry.get("type")
    if not isinstance(kind, str) or kind not in TYPES:
        raise NcclTestsError(f"{where}.type", f"unknown type {short(kind)}")
    place = "in_place" if in_place else "out_of_place"
    timed = entry.get(place)
    if not isinstance(timed, dict):
        raise NcclTestsError(f"{where}.{place}", "expected an object with time (us)")
    time_us = timed.get("time")
    # In seconds too: 1e-320 us is 0 s, and no bandwidth is made of a time of nothing.
    seconds = time_us * 1e-6 if is_number(time_us) else None
    if not (seconds is not None and seconds > 0):
        raise NcclTestsError(f"{where}.{place}.time",
                             f"expected a time per call in us (> 0), got {short(time_us)}")
    wrong = timed.get("nwrong", 0)
    if not (is_number(wrong) and wrong >= 0 and float(wrong).is_integer()):
        raise NcclTestsError(f"{where}.{place}.nwrong", f"expected a count, got {short(wrong)}")
    iterations = entry.get("actual_iterations")
    if not is_int(iterations) or iterations < 1:
        raise NcclTestsError(f"{where}.actual_iterations",
                             f"expected an integer >= 1, got {short(iterations)}")
    summary = stats.summarize([seconds])
    bus = _bus_factor(factor, world_size)
    moves_no_data = ("one rank, in place: the output is the input"
                     if in_place and world_size == 1 else None)
    algbw = None if moves_no_data else stats.algbw_gbps(size, seconds)
    shown = place.replace("_", "-")
    record: Record = {
        "id": "",
        "name": f"{binary} {shown} (as the plugin calls {family})",
        "family": family, "backend": "nccl", "world_size": world_size, "device": "cuda",
        "placement": None, "params": {"nbytes": size, "source": SOURCE, "in_place": in_place},
        "figures": {}, "nbytes": size, "count": count, "dtype": TYPES[kind],
        "busbw_factor": bus, "moves_no_data": moves_no_data, "warmup": None,
        "iterations": 1, "samples": [seconds], "rank_samples": [],
        "summary": summary.as_dict(), "p50_ci": None,
        "algbw_gbps": algbw, "busbw_gbps": None if algbw is None else algbw * bus,
        "wrong": int(wrong), "skew": None, "stalls": None,
        "timing": "cuda-graph" if graph else "cuda-batch", "batch_iterations": iterations,
    }
    record["id"] = key(record)
    try:
        return stored_record(record)
    except RecordError as exc:  # a value no results file holds (a bandwidth beyond a float)
        raise NcclTestsError(where, f"its figures make a record no results file holds: "
                                    f"{exc.field}: {exc.message}") from None


def _bus_factor(factor: str, n: int) -> float:
    if factor == "2(n-1)/n":
        return 2 * (n - 1) / n
    if factor == "(n-1)/n":
        return (n - 1) / n
    return 1.0


def _nccl_version(code: Any) -> str | None:
    """22809 -> "2.28.9" (NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9)."""
    if not is_int(code) or code < 20900:
        return None
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


def key(record: Record) -> str:
    """What a record of either tool measured: collective, world size, size and type on nccl."""
    return (f"{record['family']}[{record['backend']}-ws{record['world_size']}-"
            f"{record.get('nbytes')}B-{record.get('dtype')}]")


def aligned(baseline: dict[str, Any], current: dict[str, Any]
            ) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two documents with their records keyed by `key` where one came from nccl-tests
    (their ids as they are otherwise), so a comparison pairs what measured the same thing."""
    if not (from_document(baseline) or from_document(current)):
        return baseline, current
    return rekeyed(baseline), rekeyed(current)


def rekeyed(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of `doc` whose sized records' ids are their `key` (the first of two records
    with one key keeps it; the others keep their own ids)."""
    out = copy.deepcopy(doc)
    taken: set[str] = set()
    for bench in out["benchmarks"]:
        record = bench["distbench"]
        if record.get("nbytes") is None:
            continue
        new = key(record)
        if new not in taken:
            taken.add(new)
            record["id"] = bench["fullname"] = new
    return out


def _field(mapping: dict[str, Any], name: str, kind: type, expected: str,
           prefix: str = "") -> Any:
    value = mapping.get(name)
    if not isinstance(value, kind):
        got = "nothing" if value is None else type(value).__name__
        raise NcclTestsError(prefix + name, f"expected {expected}, got {got}")
    return value
