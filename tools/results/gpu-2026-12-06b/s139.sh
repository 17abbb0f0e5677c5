#!/bin/sh
# on the H200 s138 ran on, warm, right after it (its build-gpu): the conversation replay paced at 2 ms a
# decode step and back to back, every strategy and cudaMallocAsync, a fresh daemon each
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1; B=$PWD/build-gpu; ls $B/tools/mbbench >/dev/null || exit 3; O=$OUT/s139; mkdir -p $O; date -u
for pace in 2000 0; do
  RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >$O/p$pace.dlog 2>&1 & DP=$!
  i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
  MOONBRIGHT_RUNTIME_DIR=$RT timeout 200 $B/tools/mbbench replay .gpu/azure_llm_conv_2023.csv --pace-us $pace \
    --strategies realloc,grow,grow_async,vspace,cudaMallocAsync --json --quiet > $O/p$pace.json 2>$O/p$pace.err
  echo "pace $pace rc=$?"; kill $DP; wait $DP
  python3 tools/goals.py $O/p$pace.json 2>&1 | grep -E "reserved|mean|slowest|p99"
done; date -u
