#!/bin/sh
# cuCtxSynchronize called as CUDA 13's version: does "context is destroyed" go away?
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && timeout 200 ctest -L gpu 2>&1 | grep -E "tests passed|Failed|\*\*\*" | tail -5)
date -u
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
for r in 1 2 3; do echo "== probe $r"; MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 python3 .gpu/p34.py $B/client/libmbclient.so 2>&1 | grep -v "^$" | tail -8; done
for r in 1 2; do echo "== threads $r"; MOONBRIGHT_LOG=info MOONBRIGHT_RUNTIME_DIR=$RT timeout 90 $B/tools/mbbench threads --threads 1,16 --pairs 20000 --repeat 2 --rounds 2 2>&1 | grep -iE "error|warn|destroyed|x$|ratio|scal" | head -12; done
echo "== train, moonbright only"
MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 45 --configs torch-default,torch-moonbright train 2>&1 >/dev/null | grep -v "^$" | tail -8
kill $DP; wait $DP
date -u
