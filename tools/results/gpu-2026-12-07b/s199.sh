#!/bin/bash
# GPT training through the hook, spares capped all orders together (the working tree) against
# d32449c (spares capped per order, in abold/), alternating on one fresh daemon per run, one
# round each (default allocator, then MoonBright), twice. Run with bash.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s199; mkdir -p $O
for v in new old; do
  S=$PWD; [ $v = old ] && S=$PWD/abold
  cmake -S $S -B $PWD/build-$v -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $PWD/build-$v -j16 2>&1 | grep -E "error|warning: "
done
for k in 1 2 3; do for v in old new; do
  B=$PWD/build-$v
  RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/d-$v-$k.log 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT
  timeout 100 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train > $O/train-$v-$k.json 2>$O/train-$v-$k.err; echo "$v $k rc=$?"
  grep -E "^1 +torch" $O/train-$v-$k.err
  $B/tools/mbctl status | grep -E "^reserve"
  kill $DP; wait $DP
done; done
cd $OUT && tar czf s199.tgz s199 && rm -rf s199
date -u
