#!/bin/sh
# tools/gpu_check.sh as a newcomer runs it, at df5c256 (bench_vspace's parts; its table read by
# goals.py), on whichever card comes: build, ctest -L gpu, then gpu_bench.sh's latency and vspace
# (bench_vspace growth) steps, the goals last (the replay and training ran in s134 on the same
# client and daemon code)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
OUT=$OUT/s136 STEPS="latency vspace" STEP_BUDGET=200 BENCH_TIMEOUT=220 sh tools/gpu_check.sh
cd $OUT && tar czf s136.tgz s136 && rm -rf s136
date -u
