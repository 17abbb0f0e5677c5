#!/bin/sh
# tools/gpu_bench.sh: the benchmark set on a GPU host, from an existing build:
# starts moonbrightd on the cuda backend in a runtime directory of its own,
# runs every mbbench subcommand and tools/bench_torch.py (PyTorch baselines),
# writes JSON and logs under $OUT, and prints a short table last. Builds
# nothing. Every program runs under `timeout`, each step with its own limit
# (torch-train 150 s), and no step runs past STEP_BUDGET seconds (default
# 550) from the script's start: a step gets at most what is left of them and
# is skipped when less than 10 s is left. So the script ends inside the 600 s
# that tools/gpu_check.sh allows it; a subset of STEPS gets every step's own
# limit.
#   usage: tools/gpu_bench.sh BUILD_DIR [RUNTIME_DIR]
#   env:   OUT (default ./gpu-bench-out), TRACE (default ../shared/data/azure_llm_conv_2023.csv,
#          else tests/data/azure_llm_conv_head.csv), BUDGET (daemon budget, default 100G),
#          DEVICE (default 0), BACKEND (default cuda; host for a dry run), QUICK=1 (smoke sizes), STEPS="grant replay torch-replay latency
#          vspace torch-latency torch-train rpc tenants" (which to run, in this order; also: threads,
#          torch-generate),
#          STEP_BUDGET (default 550), REPLAY_ARGS (more options for mbbench replay, e.g. --slow-us 1000)
set -u
START=$(date +%s)
cd "$(dirname "$0")/.."
B=${1:?usage: tools/gpu_bench.sh BUILD_DIR [RUNTIME_DIR]}
B=$(cd "$B" && pwd)
RT=${2:-$(mktemp -d /tmp/mbbench-gpu.XXXXXX)}
OUT=${OUT:-$PWD/gpu-bench-out}
BUDGET=${BUDGET:-100G}
DEVICE=${DEVICE:-0}
BACKEND=${BACKEND:-cuda}
STEPS=${STEPS:-"grant replay torch-replay latency vspace torch-latency torch-train rpc tenants"}
STEP_BUDGET=${STEP_BUDGET:-550}
TRACE=${TRACE:-}
if [ -z "$TRACE" ]; then
  TRACE=../shared/data/azure_llm_conv_2023.csv
  [ -f "$TRACE" ] || TRACE=tests/data/azure_llm_conv_head.csv
fi
Q=""
[ "${QUICK:-0}" = 1 ] && Q="--quick"
mkdir -p "$OUT" "$RT"
MB="$B/tools/mbbench"
export MOONBRIGHT_RUNTIME_DIR="$RT" MOONBRIGHT_DEVICE="$DEVICE"
log() { echo "gpu_bench: $*" | tee -a "$OUT/gpu_bench.log"; }

{ date -u +%Y-%m-%dT%H:%MZ; uname -n; nproc
  timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  timeout 60 python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

timeout 1800 "$B/daemon/moonbrightd" --foreground --backend "$BACKEND" --device "$DEVICE" \
  --runtime-dir "$RT" --budget "$BUDGET" >"$OUT/moonbrightd.log" 2>&1 &
DPID=$!
trap 'kill $DPID 2>/dev/null; wait $DPID 2>/dev/null' EXIT INT TERM
i=0
while [ ! -S "$RT/gpu$DEVICE.fds" ]; do
  i=$((i + 1))
  if [ $i -gt 600 ] || ! kill -0 $DPID 2>/dev/null; then
    log "moonbrightd did not start (see moonbrightd.log)"; tail -20 "$OUT/moonbrightd.log"; exit 1
  fi
  sleep 0.1
done
timeout 20 "$B/tools/mbctl" --runtime-dir "$RT" --device "$DEVICE" status >"$OUT/status-start.txt" 2>&1

# run NAME SECONDS CMD...: stdout to NAME.json (NAME itself when it has an
# extension), stderr to NAME.log; SECONDS shrinks to what is left of
# STEP_BUDGET
run() {
  name=$1 secs=$2; shift 2
  case $name in *.*) file=$name name=${name%.*} ;; *) file=$name.json ;; esac
  left=$((START + STEP_BUDGET - $(date +%s)))
  if [ "$left" -lt 10 ]; then
    log "$name: skipped: ${left} s left of STEP_BUDGET=$STEP_BUDGET"
    return 0
  fi
  [ "$secs" -gt "$left" ] && secs=$left
  log "$name (${secs} s): $*"
  timeout "$secs" "$@" >"$OUT/$file" 2>"$OUT/$name.log"
  rc=$?
  log "$name: exit $rc"
  return 0
}
for step in $STEPS; do
  case $step in
  replay) run replay 170 "$MB" replay "$TRACE" --json $Q ${REPLAY_ARGS:-} ;;
  torch-replay) run torch-replay 150 python3 tools/bench_torch.py --json $Q --mb-lib "$B/client/libmbclient.so" \
                  replay "$TRACE" ;;
  grant) run grant 90 "$MB" grant --json $Q ;;
  latency) run latency 60 "$MB" latency --json $Q --pairs "${LAT_PAIRS:-2000}" \
             --sizes "${LAT_SIZES:-256,4K,64K,1M,64M,1G}" ;;
  threads) run threads 90 "$MB" threads --json $Q --pairs "${THREAD_PAIRS:-100000}" ;;
  torch-latency) run torch-latency 40 python3 tools/bench_torch.py --json $Q --mb-lib "$B/client/libmbclient.so" \
                   latency ;;
  torch-train) run torch-train 150 python3 tools/bench_torch.py --json $Q --mb-lib "$B/client/libmbclient.so" \
                 --child-timeout 60 train ;;
  torch-generate) run torch-generate 150 python3 tools/bench_torch.py --json $Q --mb-lib "$B/client/libmbclient.so" \
                    --child-timeout 60 generate ;;
  vspace) run vspace.txt 60 "$B/tools/bench_vspace" growth ;;   # a table (goals.py reads it)
  rpc) run rpc 90 "$MB" rpc --json $Q --cycles "${RPC_CYCLES:-300}" ;;
  tenants) run tenants 40 "$MB" tenants --json $Q --peak 4G ;;
  *) log "unknown step $step" ;;
  esac
done
timeout 20 "$B/tools/mbctl" --runtime-dir "$RT" --device "$DEVICE" status --json >"$OUT/status-end.json" 2>&1
timeout 120 python3 tools/plot_bench.py -o "$OUT" "$OUT"/*.json >>"$OUT/gpu_bench.log" 2>&1
# The open goals, met or missed, from the JSON that came back (tools/goals.py).
for n in replay.json latency.json vspace.txt torch-train.json; do [ -s "$OUT/$n" ] && echo "$OUT/$n"; done |
  xargs -r timeout 60 python3 tools/goals.py >"$OUT/goals.txt" 2>&1

# The short table, from whatever JSON came back.
timeout 60 python3 - "$OUT" <<'PY'
import glob, json, os, sys
out = sys.argv[1]
def load(n):
    try:
        with open(os.path.join(out, n + ".json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
print("== replay (peak reserved / peak live, allocation us) ==")
for n in ("replay", "torch-replay"):
    d = load(n)
    for s in (d or {}).get("strategies", []):
        a = s["alloc_ns"]
        dr = s.get("daemon_over_live")
        print("%-22s live %6.2f GiB  reserved/live %.3f  daemon/live %s  alloc mean %8.2f p50 %8.2f p99 %9.2f  %6.1f s %s" % (
            s["strategy"], s["peak_live_bytes"] / 2**30, s["reserved_over_live"],
            "%.3f" % dr if dr else "  -  ", a["mean"] / 1e3, a["p50"] / 1e3, a["p99"] / 1e3, s["total_s"],
            s.get("note", "")))
d = load("grant")
if d:
    print("== grant (until the pointer is usable; alloc p50 / p99, free p50, cold us) ==")
    for r in d["rows"]:
        if not r["ok"]:
            print("%-11d %-24s failed: %s" % (r["size"], r["allocator"], r.get("error")))
            continue
        print("%-11d %-24s %9.1f %9.1f %9.1f %9s" % (r["size"], r["allocator"], r["alloc_ns"]["p50"] / 1e3,
              r["alloc_ns"]["p99"] / 1e3, r["free_ns"]["p50"] / 1e3,
              "%.1f" % (r["cold_ns"] / 1e3) if "cold_ns" in r else "-"))
print("== latency (alloc+free pair p50 / p99 us) ==")
for n in ("latency", "torch-latency"):
    d = load(n)
    for r in (d or {}).get("rows", []):
        p = r["pair_ns"]
        print("%-10d %-22s %-7s %9.2f %9.2f" % (r["size"], r["allocator"], r.get("tier", ""), p["p50"] / 1e3, p["p99"] / 1e3))
d = load("threads")
if d:
    print("== threads (%d pairs per thread; M pairs/s in total) ==" % d["pairs_per_thread"])
    for r in d["rows"]:
        print("%3d threads  %-32s %8.2f %s" % (r["threads"], r["calls"], r["pairs_per_s"] / 1e6,
              "" if r["ok"] else "failed: %s" % r.get("error")))
    sd = d["stream_destruction"]
    print("stream destruction: %d rounds x %d threads: %s, %d bytes live after, %d device syncs" % (
        sd["rounds"], sd["threads"], "ok" if sd["ok"] else sd.get("error"), sd["bytes_live_after"],
        sd["device_syncs"]))
for n in ("torch-train", "torch-generate"):
  d = load(n)
  if d:
    print("== %s (GPT, %d warm-up + %d timed %s: ms, peak device GiB in use, %s against torch-default) ==" % (
        n, d["warmup"], d["steps"], "batches" if n == "torch-generate" else "steps",
        "tokens" if n == "torch-generate" else "losses"))
    for r in d.get("rows", []):
        v = r.get("step_vs_default")
        print("%-22s median %8.2f  p90 %8.2f  %7s  peak in use %7.3f GiB  %s %s%s" % (
            r["allocator"], r["step_ms"]["median"], r["step_ms"]["p90"], "%.3fx" % v if v else "-",
            r["peak_device_used_bytes"] / 2**30, "tokens" if n == "torch-generate" else "losses",
            r.get("losses_vs_default"), "  " + r["note"] if r.get("note") else ""))
    for note in d.get("notes", []):
        print("  " + note)
d = load("rpc")
if d:
    print("== rpc (%s, call of %s bytes) ==" % (d["op"], d["rows"][0].get("call_bytes") if d["rows"] else "?"))
    for r in d["rows"]:
        print("%3d clients  p50 %8.2f us  p99 %9.2f us  %9.0f req/s  failed %d" % (
            r["clients"], r["round_trip_ns"]["p50"] / 1e3, r["round_trip_ns"]["p99"] / 1e3, r["requests_per_s"], r["failed"]))
d = load("tenants")
if d:
    print("== tenants: 64 frames to the starving tenant p50 %.3f ms max %.3f ms; shared %.2f GiB vs static %.2f GiB ==" % (
        d["starve_alloc_ns"]["p50"] / 1e6, d["starve_alloc_ns"]["max"] / 1e6,
        d["peak_daemon_granted_bytes"] / 2**30, d["static_partition_bytes"] / 2**30))
PY
echo "== goals (tools/goals.py) =="
cat "$OUT/goals.txt" 2>/dev/null
