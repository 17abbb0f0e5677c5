#!/bin/sh
# tools/gpu_check.sh as a newcomer runs it, at 6d08cbc (bench_vspace's parts; its table read by
# goals.py), on whichever card comes: build, ctest -L gpu, then gpu_bench.sh's replay, latency,
# vspace (bench_vspace growth) and torch-train steps, the goals last
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
OUT=$OUT/s136 STEPS="replay latency vspace torch-train" STEP_BUDGET=420 BENCH_TIMEOUT=440 sh tools/gpu_check.sh
cd $OUT && tar czf s136.tgz s136 && rm -rf s136
date -u
