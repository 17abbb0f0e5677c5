#!/bin/sh
# grow alone on the conversation trace, a fresh daemon each run, four settings taking
# turns, three rounds, on one build of the latest code with xp.patch (switches read from
# the environment, for this comparison only): the defaults; XP_STALE=250 (cached frames
# past the cache's size go back after 250 ms unused instead of 50); XP_CAP=5 (freed ranges
# kept mapped up to 1/32 of the bytes in use plus 128 MiB instead of 1/64, spare ranges
# made as before: fewer freed ranges unmapped only to map spares); both. XP_PRINT=1: the
# background thread's grants at exit. (xp.patch also reads XP_CUT, not used here.)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
O=$OUT/s184; mkdir -p $O /tmp/xp
git archive HEAD | tar x -C /tmp/xp && (cd /tmp/xp && patch -s -p1 < $OLDPWD/tools/results/gpu-2026-12-06h/xp.patch) || exit 1
B=/tmp/xp/build-gpu
cmake -S /tmp/xp -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
g() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
env XP_PRINT=1 MOONBRIGHT_LOG=info MOONBRIGHT_RUNTIME_DIR=$RT "$@" timeout 60 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --json --quiet --strategies grow > $O/$L.json 2>$O/$L.err
kill $DP; wait $DP
echo "$L $(python3 tools/results/gpu-2026-12-06h/waits.py - $O/$L.json) $(grep XP $O/$L.err)"
}
for k in 1 2 3; do L=base$k g XP_STALE=50; L=stale$k g XP_STALE=250; L=cap$k g XP_CAP=5; L=both$k g XP_STALE=250 XP_CAP=5; done
cd $OUT && tar czf s184.tgz s184 && rm -rf s184
date -u
