#!/bin/sh
# Ran on an H100 80GB HBM3 at 01:50-01:53 UTC on 2026-12-07 (s188.tgz; outputs.txt).
# After s187.sh, on the same machine: ed2f66c's daemon (each order's share of the
# descriptors) with ba93577's client (the demand measure) against 0f60d61 (.gpu/mid.tgz),
# grow alone on a fresh daemon, in turn: 1-token blocks once more, the conversation trace
# twice; then GPT training through the hook (2 rounds) and ctest -L gpu.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s188; mkdir -p $O
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
if [ ! -x /tmp/mid/b/daemon/moonbrightd ]; then
  mkdir -p /tmp/mid && tar xzf .gpu/mid.tgz -C /tmp/mid
  cmake -S /tmp/mid -B /tmp/mid/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build /tmp/mid/b -j16 --target moonbrightd mbbench 2>&1 | grep -E "error|warning: "
fi
W=tools/results/gpu-2026-12-06h/waits.py
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); MOONBRIGHT_LOG=$3 $1/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$2 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
ab() {   # ab LABEL FIRST LAST [mbbench args]: grow alone, each build in turn, fresh daemons
  L=$1; F=$2; N=$3; shift 3
  for r in $(seq $F $N); do for v in mid new; do
    BB=$B; [ $v != new ] && BB=/tmp/$v/b
    start $BB $O/$L-$v$r.dlog info
    timeout 60 $BB/tools/mbbench replay $C --json --quiet --strategies grow "$@" > $O/$L-$v$r.json 2>$O/$L-$v$r.err
    echo "$L-$v$r rc=$?"; kill $DP; wait $DP
    python3 $W - $O/$L-$v$r.json | sed "s/^/$L-$v$r /"
  done; done
}
ab blk1 2 2 --block-tokens 1
ab conv 1 2
start $B $O/train.dlog info
timeout 170 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train --rounds 2 > $O/train.json 2>$O/train.err; echo "train rc=$?"
kill $DP; wait $DP
python3 tools/goals.py $O/train.json
(cd $B && timeout 240 ctest -L gpu > $O/ctest.log 2>&1; echo "ctest rc=$?")
grep -E "tests passed|Failed|\*\*\*|Test +#" $O/ctest.log | head -20
cd $OUT && tar czf s188.tgz s188 && rm -rf s188
date -u
