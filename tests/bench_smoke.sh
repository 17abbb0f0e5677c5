#!/bin/sh
# tests/bench_smoke.sh: one mbbench subcommand in smoke mode against a real
# moonbrightd (host backend, temporary runtime directory); its --json output
# must parse and hold the expected keys. Timings are never checked.
# usage: bench_smoke.sh MOONBRIGHTD MBBENCH BENCH_CHECK TRACE SUBCOMMAND
set -eu
daemon=$1 bench=$2 check=$3 trace=$4 sub=$5
dir=$(mktemp -d "${TMPDIR:-/tmp}/mbbench-smoke.XXXXXX")
pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT INT TERM
"$daemon" --foreground --backend host --runtime-dir "$dir/run" --budget 8G >"$dir/daemon.log" 2>&1 &
pid=$!
i=0
while [ ! -S "$dir/run/gpu0.fds" ]; do
  i=$((i + 1))
  if [ $i -gt 200 ] || ! kill -0 "$pid" 2>/dev/null; then
    echo "bench_smoke: moonbrightd did not start"; cat "$dir/daemon.log"; exit 1
  fi
  sleep 0.05
done
export MOONBRIGHT_RUNTIME_DIR="$dir/run"
run() {   # run NAME ARGS...: mbbench --json into $dir/NAME.json
  name=$1; shift
  echo "bench_smoke: mbbench $*"
  "$bench" "$@" --json --quick --quiet >"$dir/$name.json"
}
s=strategies.0
case $sub in
grant)
  # Every row must succeed (mbbench grant exits 1 otherwise): re-grant, first
  # grant, both with large frames off, and in-process create+map, per size.
  run grant grant --no-cuda --sizes 2M,64M,1G
  "$check" "$dir/grant.json" bench date backend frame_bytes notes rows.0.allocator rows.0.size \
    rows.0.ok rows.0.cold_ns rows.0.alloc_ns.p50 rows.0.alloc_ns.p99 rows.0.free_ns.p50 \
    rows.0.pair_ns.p50 rows.14.allocator
  ;;
latency)
  run latency latency --no-cuda
  "$check" "$dir/latency.json" bench date host.cpus backend frame_bytes pairs notes \
    rows.0.allocator rows.0.tier rows.0.size rows.0.ok rows.0.pair_ns.p50 rows.0.pair_ns.p99 \
    rows.0.pair_ns.mean rows.0.alloc_ns.p50 rows.0.free_ns.p50
  if command -v python3 >/dev/null; then
    python3 "$(dirname "$0")/../tools/goals.py" "$dir/latency.json" | grep -q "host: mb_malloc 64 MiB pair p50" || {
      echo "bench_smoke: goals.py found no 64 MiB rows in latency.json"; exit 1; }
    # and bench_vspace's growth table (GPU only: a recorded H100 run's output), each
    # 1024-page row's map_async figure read from its column
    v=$(python3 "$(dirname "$0")/../tools/goals.py" \
          "$(dirname "$0")/../tools/results/gpu-2026-12-06/s134/bench_vspace.txt")
    echo "$v" | grep -Eq "map_async of 1024 64 KiB pages, host us +11\.3 .*met" &&
      echo "$v" | grep -Eq "map_async of 1024 2048 KiB pages, host us +13\.7 .*met" || {
      echo "bench_smoke: goals.py misread bench_vspace's table:"; echo "$v"; exit 1; }
  fi
  # the table form works too
  "$bench" latency --quick --quiet --no-cuda --sizes 4K,16M --pairs 5 >/dev/null
  ;;
rpc)
  run rpc rpc
  "$check" "$dir/rpc.json" bench op cycles rows.0.clients rows.1.clients rows.0.round_trips \
    rows.0.requests_per_s rows.0.round_trip_ns.p50 rows.0.round_trip_ns.p99 rows.0.call_bytes \
    rows.0.alloc_ns.p50 rows.0.free_ns.p50 rows.0.daemon_requests
  run rpc_status rpc --op status --clients 2 --cycles 5
  "$check" "$dir/rpc_status.json" rows.0.round_trip_ns.p50 rows.0.requests_per_s
  ;;
threads)
  # Rows for both thread counts and the three call forms (MoonBright's two
  # and glibc's; cuMemAllocAsync skipped on the host backend), each the
  # median of --repeat runs with the range;
  # the stream-destruction rounds leave nothing live (mbbench exits 1 else).
  run threads threads --threads 1,2 --repeat 3
  "$check" "$dir/threads.json" bench pairs_per_thread repeat rows.0.threads rows.0.calls \
    rows.0.pairs_per_s rows.0.pairs_per_s_min rows.0.pairs_per_s_max rows.0.ok rows.3.threads rows.5.calls \
    stream_destruction.ok stream_destruction.bytes_live_after notes
  grep -q '"repeat":2,' "$dir/threads.json" || {
    echo "bench_smoke: --quick did not cap --repeat at 2"; exit 1; }
  "$bench" threads --quick --quiet --repeat 100 >/dev/null 2>&1 && {
    echo "bench_smoke: --repeat 100 was accepted"; exit 1; }
  # the table form ends with the scaling line
  "$bench" threads --quick --quiet --threads 1,2 | grep -q "2 threads against 1 (medians):.*glibc malloc/free" || {
    echo "bench_smoke: no scaling line"; exit 1; }
  ;;
replay)
  run replay replay "$trace"
  "$check" "$dir/replay.json" bench trace requests compression steps bytes_per_token block_tokens \
    $s.strategy $s.ok $s.peak_live_bytes $s.peak_reserved_bytes $s.reserved_over_live \
    $s.peak_daemon_granted_bytes $s.daemon_over_live $s.alloc_ns.mean $s.alloc_ns.p50 \
    $s.alloc_ns.p99 $s.total_s $s.series.step $s.series.live_bytes $s.series.reserved_bytes \
    $s.series.daemon_bytes strategies.1.strategy strategies.2.strategy $s.alloc_ns.max \
    $s.driver_waits $s.driver_waits_what $s.daemon_requests $s.peak_daemon_frames \
    strategies.2.vspace_page_bytes $s.at_peak.live $s.at_peak.cached $s.at_peak.idle \
    strategies.1.at_peak.grow_ahead strategies.2.at_peak.vspace_free strategies.2.prepare_ns \
    $s.daemon_grant_creates
  # A fresh daemon holds no free frame: realloc's first grant creates its
  # frames on its path, and the daemon counts them.
  grep -q '"daemon_grant_creates":[1-9]' "$dir/replay.json" || {
    echo "bench_smoke: the daemon counted no frame created on a grant path"; exit 1; }
  # vspace readies the first request's pages before the replay; --cold does not
  grep -q '"prepared_pages":[1-9]' "$dir/replay.json" || {
    echo "bench_smoke: vspace prepared no pages"; exit 1; }
  # tools/goals.py reads it: the host goal and each GPU goal get a line
  if command -v python3 >/dev/null; then
    python3 "$(dirname "$0")/../tools/goals.py" "$dir/replay.json" >"$dir/goals.txt"
    for g in "host: realloc mean" "realloc reserved/live" "grow slowest allocation" \
             "vspace p99 us" "daemon descriptors" "every strategy completed   *met"; do
      grep -q "$g" "$dir/goals.txt" || { echo "bench_smoke: goals.py printed no '$g'"; cat "$dir/goals.txt"; exit 1; }
    done
  fi
  # Mooncake-style JSON lines (timestamps in ms)
  printf '{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [1, 2]}\n' \
    0 700 40  100 1500 20  250 90 64  400 3000 10  900 33 100 >"$dir/trace.jsonl"
  run replay_jsonl replay "$dir/trace.jsonl" --strategies realloc,grow,grow_async
  "$check" "$dir/replay_jsonl.json" format requests $s.peak_live_bytes strategies.1.peak_live_bytes \
    strategies.2.peak_live_bytes strategies.2.grow_queued
  grep -Eq '"strategy":"grow_async"[^}]*"ok":true' "$dir/replay_jsonl.json" || {
    echo "bench_smoke: grow_async did not complete"; exit 1; }
  # With the H200's driver costs emulated in the client (the daemon keeps
  # none): the same replay completes and its JSON says so; a value that
  # does not read stops it with an error.
  MOONBRIGHT_HOST_COSTS=gpu run replay_costs replay "$dir/trace.jsonl" --strategies realloc,grow
  grep -q '"host_costs":"gpu"' "$dir/replay_costs.json" || {
    echo "bench_smoke: the replay did not record its emulated costs"; exit 1; }
  [ "$(grep -o '"ok":true' "$dir/replay_costs.json" | wc -l)" -eq 2 ] || {
    echo "bench_smoke: a replay with emulated costs did not complete"; exit 1; }
  if MOONBRIGHT_HOST_COSTS=map=fast "$bench" replay "$dir/trace.jsonl" --quick --quiet \
       --strategies realloc >/dev/null 2>"$dir/costs.err"; then
    echo "bench_smoke: a replay with unreadable costs went on"; exit 1
  fi
  grep -q 'MOONBRIGHT_HOST_COSTS' "$dir/costs.err" || {
    echo "bench_smoke: unreadable costs were not named"; cat "$dir/costs.err"; exit 1; }
  # A JSON line longer than any fixed buffer (Mooncake's hash_ids), and
  # BurstGPT's column names with a zero-token response: every request read.
  awk 'BEGIN { printf "{\"timestamp\": 5, \"input_length\": 900, \"output_length\": 30, \"hash_ids\": [0";
    for (i = 1; i < 3000; i++) printf ", %d", i; printf "]}\n" }' >>"$dir/trace.jsonl"
  run replay_longline replay "$dir/trace.jsonl" --strategies realloc
  grep -q '"requests":6,' "$dir/replay_longline.json" || {
    echo "bench_smoke: a 17 KiB JSON line was not read as one request"; exit 1; }
  printf 'Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n%s\n%s\n%s\n' \
    '0.5,ChatGPT,472,18,490,Conversation log' '1.25,GPT-4,1020,0,1020,API log' \
    '2.0,ChatGPT,30,200,230,Conversation log' >"$dir/burst.csv"
  run replay_burst replay "$dir/burst.csv" --strategies realloc,grow
  grep -q '"format":"csv","requests":3,' "$dir/replay_burst.json" || {
    echo "bench_smoke: BurstGPT's columns were not read"; cat "$dir/replay_burst.json"; exit 1; }
  # Other keys, a quoted date (seconds, never scaled as milliseconds) and a
  # quoted count: 2.5 s apart at 8 x 20 ms a step is 15 steps, not 0.
  printf '%s\n%s\n' '{"arrival_time": "2024-05-01 10:00:00.5", "prompt_tokens": 300, "completion_tokens": 4}' \
    '{"arrival_time": "2024-05-01 10:00:03", "prompt_tokens": "500", "completion_tokens": 2}' >"$dir/dates.jsonl"
  run replay_dates replay "$dir/dates.jsonl" --strategies realloc
  grep -q '"format":"jsonl","requests":2,' "$dir/replay_dates.json" || {
    echo "bench_smoke: JSON lines with arrival_time and prompt_tokens were not read"; exit 1; }
  steps=$(grep -o '"steps":[0-9]*' "$dir/replay_dates.json" | head -1 | cut -d: -f2)
  [ "$steps" -ge 15 ] || { echo "bench_smoke: quoted dates read as $steps steps apart"; exit 1; }
  # --pace-us: every decode step lasts at least that long (the run at
  # least steps x pace), the JSON says so; a bad value is a usage error
  run replay_paced replay "$dir/dates.jsonl" --strategies realloc --pace-us 2000
  grep -q '"pace_us":2000,' "$dir/replay_paced.json" || {
    echo "bench_smoke: the paced replay's JSON has no pace_us"; exit 1; }
  steps=$(grep -o '"steps":[0-9]*' "$dir/replay_paced.json" | head -1 | cut -d: -f2)
  total=$(grep -o '"total_s":[0-9.e+-]*' "$dir/replay_paced.json" | head -1 | cut -d: -f2)
  grep -q '"ok":true' "$dir/replay_paced.json" && awk -v t="$total" -v n="$steps" 'BEGIN { exit !(n > 0 && t >= n * 0.002) }' || {
    echo "bench_smoke: a replay paced at 2 ms a step ran faster than its steps allow"; exit 1; }
  rc=0; "$bench" replay "$dir/dates.jsonl" --quick --quiet --pace-us fast >/dev/null 2>&1 || rc=$?
  [ $rc -eq 2 ] || { echo "bench_smoke: --pace-us fast was not a usage error"; exit 1; }
  # --slow-us names what slow operations waited on (at 1 us, nearly all are)
  "$bench" replay "$dir/trace.jsonl" --strategies grow --quick --quiet --slow-us 1 \
    >/dev/null 2>"$dir/slow.log"
  grep -q "grow: allocation of .* took .* grow waits" "$dir/slow.log" || {
    echo "bench_smoke: --slow-us reported no slow operation"; cat "$dir/slow.log"; exit 1; }
  # Long contexts (6-8.5 k tokens) in blocks smaller than a page (32 KiB
  # tokens, 16-token blocks of 512 KiB): every strategy completes (mbbench
  # exits 1 otherwise), with 512 KiB pages and with 2 MiB pages whose block
  # boundaries fall inside a page.
  awk 'BEGIN { for (i = 0; i < 40; i++)
    printf "{\"timestamp\": %d, \"input_length\": %d, \"output_length\": %d}\n",
      i * 2000, 6000 + (i * 397) % 2500, 40 + (i * 31) % 150 }' >"$dir/long.jsonl"
  run replay_long replay "$dir/long.jsonl" --token-bytes 32K
  "$check" "$dir/replay_long.json" strategies.2.vspace_page_bytes strategies.3.ok
  run replay_long_2m replay "$dir/long.jsonl" --token-bytes 32K --vspace-page 2M \
    --strategies vspace
  "$check" "$dir/replay_long_2m.json" $s.ok $s.driver_waits
  run replay_cold replay "$dir/long.jsonl" --token-bytes 32K --strategies vspace --cold
  grep -q '"prepared_pages":0,' "$dir/replay_cold.json" || {
    echo "bench_smoke: --cold prepared pages"; exit 1; }
  # Tensor lifetimes (a training iteration, repeated): the heap and glibc
  # complete, and nothing else runs by default; a malformed line is refused
  # with its line number.
  run replay_lifetimes replay "$(dirname "$trace")/alexnet_train_lifetimes.log"
  "$check" "$dir/replay_lifetimes.json" format iterations requests steps allocations \
    $s.ok $s.peak_live_bytes $s.reserved_over_live $s.heap.extends strategies.1.ok
  grep -q '"format":"lifetimes","requests":193,"iterations":3,' "$dir/replay_lifetimes.json" || {
    echo "bench_smoke: the lifetimes trace was not read as 193 tensors x 3 iterations"; exit 1; }
  [ "$(grep -o '"strategy":' "$dir/replay_lifetimes.json" | wc -l)" -eq 2 ] || {
    echo "bench_smoke: a lifetimes replay ran other than realloc and malloc"; exit 1; }
  # The heap keeps its classes apart: three rounds hold 1.18 of live (1.51
  # when small tensors may take the large ones' free space).
  rl=$(grep -o '"reserved_over_live":[0-9.]*' "$dir/replay_lifetimes.json" | head -1 | cut -d: -f2)
  awk -v r="$rl" 'BEGIN { exit !(r > 1 && r < 1.3) }' || {
    echo "bench_smoke: the heap held $rl of live over three training rounds"; exit 1; }
  printf '0 5 100\n3 2 100\n' >"$dir/bad.log"
  if "$bench" replay "$dir/bad.log" --quick --quiet >/dev/null 2>"$dir/bad.err"; then
    echo "bench_smoke: a lifetimes trace ending before it starts was accepted"; exit 1
  fi
  grep -q 'bad.log:2: expected' "$dir/bad.err" || { echo "bench_smoke: no line number"; cat "$dir/bad.err"; exit 1; }
  ;;
trims)
  # Both runs (holes filled, and MOONBRIGHT_HEAP_FILL=0) complete (mbbench
  # exits 1 otherwise); the first fills holes, the second never does.
  run trims trims --cycles 6 --sizes 9M,64M
  "$check" "$dir/trims.json" bench cycles burst rows.0.heap rows.0.ok rows.0.peak_granted_bytes \
    rows.0.held_over_live_end rows.0.address_space_growth_bytes rows.0.heap_extends \
    rows.0.heap_fills rows.0.alloc_ns.p99 rows.0.alloc_daemon_wait_s rows.0.slowest_alloc.ns \
    rows.0.slowest_alloc.daemon_wait_us rows.1.ok rows.1.heap_fills
  grep -q '"heap":"MOONBRIGHT_HEAP_FILL=0","ok":true,.*"heap_fills":0,' "$dir/trims.json" || {
    echo "bench_smoke: the run without fills filled holes"; exit 1; }
  grep -q '"heap":"holes filled","ok":true,.*"heap_fills":[1-9]' "$dir/trims.json" || {
    echo "bench_smoke: no hole was filled"; exit 1; }
  "$bench" trims --quick --quiet --sizes 9M >/dev/null 2>&1 && {
    echo "bench_smoke: --sizes without a maximum was accepted"; exit 1; }
  ;;
fdtable)
  # A fresh table grows in the calls timed; one grown ahead (as the daemon's
  # at start-up) never does.
  run fdtable fdtable --fds 900
  "$check" "$dir/fdtable.json" bench fds rows.0.table rows.0.ok rows.0.growths rows.0.growth_max_ns \
    rows.0.other_mean_ns rows.1.table rows.1.growths rows.1.fdsize_start
  grep -q '"table":"fresh table","round":1,"ok":true,"fdsize_start":[0-9]*,"fdsize_end":[0-9]*,"growths":[1-9]' \
    "$dir/fdtable.json" || { echo "bench_smoke: a fresh table never grew"; cat "$dir/fdtable.json"; exit 1; }
  grep -q '"table":"grown ahead","round":1,"ok":true,"fdsize_start":[0-9]*,"fdsize_end":[0-9]*,"growths":0,' \
    "$dir/fdtable.json" || { echo "bench_smoke: a table grown ahead grew"; cat "$dir/fdtable.json"; exit 1; }
  "$bench" fdtable --quick --quiet --fds 0 >/dev/null 2>&1 && {
    echo "bench_smoke: --fds 0 was accepted"; exit 1; }
  ;;
tenants)
  run tenants tenants
  "$check" "$dir/tenants.json" bench tenants rounds frame_bytes ok starve_alloc_ns.p50 \
    starve_alloc_ns.max peak_daemon_granted_bytes static_partition_bytes shared_over_static \
    rounds_detail.0.starve_alloc_ns rounds_detail.0.daemon_granted_bytes
  ;;
*)
  echo "bench_smoke: unknown subcommand $sub"; exit 2 ;;
esac
# the daemon survived and took every frame back
"$(dirname "$bench")/mbctl" --runtime-dir "$dir/run" status >"$dir/status.txt" 2>&1 || {
  echo "bench_smoke: moonbrightd no longer answers"; cat "$dir/daemon.log"; exit 1; }
