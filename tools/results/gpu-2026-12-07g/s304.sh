#!/bin/bash
# xproc_probe.c: does another process's frame work (cuMemCreate, export, release:
# what moonbrightd's reserve workers do) stall this process's maps and unmaps; child
# frames of 2 MiB and of 64 MiB. Then grow alone on a fresh daemon (100G) with the
# client's waits over 1 ms at debug level. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s304; mkdir -p $O
P=tools/results/gpu-2026-12-07g
CU=$(dirname $(dirname $(command -v nvcc)))
gcc -O2 -I$CU/include $P/xproc_probe.c -o /tmp/xprobe -L$CU/lib64/stubs -lcuda && {
  timeout 60 /tmp/xprobe 3 2; timeout 60 /tmp/xprobe 3 64; } 2>&1 | tee $O/xproc.txt
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
RT=$(mktemp -d); MOONBRIGHT_LOG=info $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/grow.dlog 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT
date -u
MOONBRIGHT_LOG=debug timeout 100 $B/tools/mbbench replay $C --json --quiet --slow-us 1000 --strategies grow > $O/grow.json 2>$O/grow.err; echo "grow rc=$?"
kill $DP; wait $DP
python3 $W $O/grow.err $O/grow.json
grep "waited" $O/grow.err | sort -t' ' -k1 | awk '{for(i=1;i<=NF;i++) if($i=="waited" && $(i+1)+0>2) print}' | head -12
cd $OUT && tar czf s304.tgz s304 && rm -rf s304
date -u
