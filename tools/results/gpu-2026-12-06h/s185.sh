#!/bin/sh
# export_probe.c with 1-4 threads creating and exporting at once (the host emulation's
# reserve workers sleep one export each, the driver's may overlap); then grow alone on the
# conversation trace, fresh daemon each, four rounds taking turns: as committed (XP_CAPN=0)
# and a caller's path that maps at most 8 cached frames and takes the rest as the plan's
# large frames unless the process is near its budget (XP_CAPN=8; xp3.patch, which reads the
# switch from the environment, for this comparison only). MOONBRIGHT_LOG=debug for the
# waits over 1 ms and 2 ms and what they spent.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
N=$(dirname $(which nvcc)); nvcc -O2 tools/results/gpu-2026-12-06h/export_probe.c -o /tmp/ep -L$N/../lib64/stubs -lcuda -lpthread && /tmp/ep 4
O=$OUT/s185; mkdir -p $O /tmp/xp
tar --exclude='./build*' --exclude=./.git -cf - . | tar x -C /tmp/xp && (cd /tmp/xp && patch -s -p1 < tools/results/gpu-2026-12-06h/xp3.patch) || exit 1
B=/tmp/xp/build-gpu
cmake -S /tmp/xp -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
g() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
env MOONBRIGHT_LOG=debug MOONBRIGHT_RUNTIME_DIR=$RT XP_CAPN=$2 timeout 60 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --json --quiet --strategies grow > $O/$1.json 2>$O/$1.err
kill $DP; wait $DP
echo "$1 $(python3 tools/results/gpu-2026-12-06h/waits.py $O/$1.err $O/$1.json | grep -E '^(waits|grow)' | tr '\n' ' ')"
}
for k in 1 2 3 4; do g base$k 0; g cap$k 8; done
cd $OUT && tar czf s185.tgz s185 && rm -rf s185
date -u
