#!/bin/sh
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 16G > /tmp/g.dlog 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
for mode in global thread_local relaxed; do for mib in 1 8 32 128; do
MODE=$mode MIB=$mib PYTHONPATH=client/python MOONBRIGHT_LIB=$B/client/libmbclient.so MOONBRIGHT_LOG=debug timeout 60 python3 - <<'PY' > /tmp/o.txt 2>&1
import os, torch, moonbright_torch
moonbright_torch.enable()
n = int(os.environ["MIB"]) << 18
x = torch.randn(n, device="cuda")
def f(x):
    a = x * 2; b = a + 1; c = torch.cat([b, b]); return c.sum() + a.sum()
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3): f(x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g, capture_error_mode=os.environ["MODE"]):
        y = f(x)
    g.replay(); torch.cuda.synchronize()
    print("RESULT ok", abs(y.item() - f(x).item()) < 1e-2 * abs(f(x).item()))
except Exception as e:
    print("RESULT fail", str(e).splitlines()[0][:120])
PY
echo "$mode ${mib}MiB: $(grep RESULT /tmp/o.txt) | $(grep -c mbclient /tmp/o.txt) mbclient lines"
grep "mbclient" /tmp/o.txt | grep -v "cuda backend: device" | head -4
done; done
kill $DP; wait $DP
