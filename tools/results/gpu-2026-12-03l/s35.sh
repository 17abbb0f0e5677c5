#!/bin/sh
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
rm -rf /tmp/O && mkdir -p /tmp/O && tar --exclude=./build-gpu --exclude=./.gpudeps -cf - . | tar -xf - -C /tmp/O && cp .gpu/torch_old.c /tmp/O/client/torch.c
cmake -S /tmp/O -B /tmp/O/b -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build /tmp/O/b -j16 --target mbclient 2>&1 | grep -E "error|warning: "
RT=$(mktemp -d)
$B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G >/dev/null 2>&1 & DP=$!; i=0; while [ ! -S $RT/gpu0.fds ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
for L in /tmp/O/b $B; do echo "== probe with $L"; MOONBRIGHT_RUNTIME_DIR=$RT timeout 60 python3 .gpu/p34.py $L/client/libmbclient.so 2>&1 | grep -v "^$" | tail -8; done
echo "== train, moonbright only, full stderr"
MOONBRIGHT_RUNTIME_DIR=$RT timeout 100 python3 tools/bench_torch.py --json --mb-lib $B/client/libmbclient.so --child-timeout 45 --configs torch-moonbright train 2>&1 >/dev/null | grep -v "^$" | tail -12
kill $DP; wait $DP
