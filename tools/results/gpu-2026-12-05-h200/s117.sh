#!/bin/sh
# the device full below the budget: conv replay, every strategy, budget above the device's memory (H100: 100G; H200: 200G);
# short: the descriptor table grown ahead (grow on fresh daemons, 2 rounds each way), then the device full below the budget; on an H200 also the exact plans near the budget (t320, 100G), cf19b13 (.gpu/basesrc) and new in turn, 2 rounds
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
O=$OUT/s112; mkdir -p $O
NEW=$PWD/build-gpu; cmake -S . -B $NEW -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $NEW -j16 2>&1 | grep -E "error|warning: "
(cd $NEW && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.txt 2>&1; grep -E "tests passed|Failed|\*\*\*" $O/ctest.txt)
RT=$(mktemp -d); $NEW/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/train.dlog 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
timeout 230 python3 tools/bench_torch.py --json --mb-lib $NEW/client/libmbclient.so --child-timeout 40 --configs torch-default,torch-moonbright train --rounds 3 > $O/train.json 2>$O/train.err
echo "train rc=$?"; grep -v "^bench_torch: torch-\|^bench_torch: train" $O/train.err | tail -8
kill $DP; wait $DP
cd $OUT && tar czf s117.tgz s112 && rm -rf s112
date -u
