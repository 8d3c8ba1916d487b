#!/usr/bin/env bash
# The shared H200 README's key commands again, in one call on a machine with one CUDA GPU
# (issue 41 item 7; docs/gpu.md records what they printed). Every output goes under "$OUT"
# (default ./gpu-rerun): summary.txt (the figures to read first) and logs.tgz (every log and
# results file). Each command has its own time limit and the whole run stops by DEADLINE_S
# (default 390 s): a step that would start past it is skipped and says so.
#
#   OUT=/tmp/out bash benchmarks/gpu_rerun.sh
#
# nccl-tests is not run here: its two files of the H200 (tests/data/nccl_tests) are read beside
# the hand loops by bench_cuda_timing.py.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu-rerun}
PY=${PY:-python3}
DEADLINE_S=${DEADLINE_S:-390}
LOGS="$OUT/logs"
mkdir -p "$LOGS"
SUMMARY="$OUT/summary.txt"
STARTED=$SECONDS
: >"$SUMMARY"

say() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME LIMIT_S COMMAND...: COMMAND's output in $LOGS/NAME.txt, its exit status and time in
# the summary; skipped when less than 10 s of the deadline are left.
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE_S - (SECONDS - STARTED)))
    if ((left < 10)); then
        say "$name: skipped, ${left} s of the ${DEADLINE_S} s left"
        return
    fi
    ((limit > left)) && limit=$left
    local began=$SECONDS
    timeout -k 5 "$limit" "$@" >"$LOGS/$name.txt" 2>&1
    local code=$?
    local why=""
    ((code == 124 || code == 137)) && why=" (ran past its ${limit} s)"
    say "$name: exit $code$why in $((SECONDS - began)) s: $*"
}

say "# gpu_rerun.sh at $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 |
    tee -a "$SUMMARY"
# Installed, not only importable from here: pytest finds the plugin by its entry point.
"$PY" -c "import importlib.metadata as m; m.distribution('pytest-distbench')" 2>/dev/null ||
    "$PY" -m pip install -q --no-deps -e . >"$LOGS/pip.txt" 2>&1
"$PY" -c "import torch; print('torch', torch.__version__, 'nccl',
    '.'.join(map(str, torch.cuda.nccl.version())), 'gpus', torch.cuda.device_count())" \
    2>&1 | tee -a "$SUMMARY"

COLLECTIVES=(--distbench --backend=nccl --world-size=1
             --pyargs pytest_distbench.suites.test_collectives)
step plugin_batch 60 "$PY" -m pytest -p no:cacheprovider "${COLLECTIVES[@]}" \
    -k "all_reduce or all_gather" --tensor-size=4B:1GiB:x4 --distbench-json="$LOGS/batch.json"
step plugin_graph 60 "$PY" -m pytest -p no:cacheprovider "${COLLECTIVES[@]}" \
    -k "all_reduce or all_gather" --tensor-size=4B:1GiB:x4 --distbench-cuda-graph \
    --distbench-json="$LOGS/graph.json"
for n in 1 2; do  # issue 38 item 6: two sessions in a row, each inside the other's ±
    step "session_$n" 40 "$PY" -m pytest -p no:cacheprovider "${COLLECTIVES[@]}" \
        -k "all_gather or all_reduce" --tensor-size=1KiB,1MiB,64MiB,1GiB \
        --distbench-json="$LOGS/session_$n.json"
done
step bench_cuda_timing 150 "$PY" benchmarks/bench_cuda_timing.py \
    --nccl-tests=tests/data/nccl_tests/nt_all_gather.json,tests/data/nccl_tests/nt_all_reduce.json \
    --out="$LOGS/bench_cuda_timing.json"
step ws2_one_gpu 25 "$PY" -m pytest -p no:cacheprovider -q --distbench --backend=nccl \
    --world-size=2 --pyargs pytest_distbench.suites.test_collectives -k all_reduce \
    --tensor-size=1KiB
step gpu_tests 90 "$PY" -m pytest -p no:cacheprovider -q -k "(cuda or nccl or gpu) and not docs" \
    tests

# What to read first: the tables' tails, the digest lines, the two sessions side by side.
for name in plugin_batch plugin_graph; do
    say ""
    say "== $name (digest and notes)"
    sed -n '/distbench digest/,$p' "$LOGS/$name.txt" 2>/dev/null | head -12 | tee -a "$SUMMARY"
    grep -E "^# (% of peak|algbw/busbw)|impossible" "$LOGS/$name.txt" 2>/dev/null |
        sort | uniq -c | tee -a "$SUMMARY"
done
say ""
say "== two sessions (p50 us ± %; inside = each p50 within the other's interval)"
"$PY" - "$LOGS/session_1.json" "$LOGS/session_2.json" "$LOGS/batch.json" <<'EOF' 2>&1 |
import json, sys
def records(path):
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as exc:
        print(f"{path}: {exc}")
        return {}, {}
    return ({b["distbench"]["id"]: b["distbench"] for b in doc["benchmarks"]},
            doc["distbench"]["environment"])
(one, _), (two, _), (_, env) = (records(p) for p in sys.argv[1:4])
print("machine_bounds:", env.get("machine_bounds"), "gpus:", env.get("gpus"))
for key in sorted(set(one) & set(two)):
    a, b = one[key], two[key]
    def ci(r):
        c = r.get("p50_ci") or {}
        return c.get("low"), c.get("high"), c.get("half_width_pct")
    (al, ah, ap), (bl, bh, bp) = ci(a), ci(b)
    pa, pb = a["summary"]["p50"], b["summary"]["p50"]
    inside = (None not in (al, ah, bl, bh)) and al <= pb <= ah and bl <= pa <= bh
    peak = (a.get("of_peak") or {}).get("pct")
    print(f"{a['family']:<11} {a['nbytes']:>11} B  {pa * 1e6:10.2f} ± {ap}%  "
          f"{pb * 1e6:10.2f} ± {bp}%  inside={inside}  of_peak={peak}")
EOF
    tee -a "$SUMMARY"
say ""
say "== bench_cuda_timing (verdict)"
grep -E "^# |worst|not judged" "$LOGS/bench_cuda_timing.txt" 2>/dev/null | tee -a "$SUMMARY"
say ""
say "== ws2 on one GPU"
tail -4 "$LOGS/ws2_one_gpu.txt" 2>/dev/null | tee -a "$SUMMARY"
say ""
say "== tests"
tail -3 "$LOGS/gpu_tests.txt" 2>/dev/null | tee -a "$SUMMARY"
say ""
say "total $((SECONDS - STARTED)) s"
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$LOGS"
