#!/bin/sh
# probe: CUDA graph capture through the MoonBright hook
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 16G > /tmp/g.dlog 2>&1 & DP=$!
j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done
export MOONBRIGHT_RUNTIME_DIR=$RT
for mode in default hook; do
MODE=$mode PYTHONPATH=client/python MOONBRIGHT_LIB=$B/client/libmbclient.so MOONBRIGHT_LOG=info timeout 120 python3 - <<'PY' 2>&1 | tail -12
import os, torch
if os.environ["MODE"] == "hook":
    import moonbright_torch; moonbright_torch.enable()
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
x = torch.randn(64, 1024, device="cuda")
ref = m(x).detach().clone()
s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3): m(x)
torch.cuda.current_stream().wait_stream(s)
g = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g):
        y = m(x)
except Exception as e:
    print(os.environ["MODE"], "capture failed:", type(e).__name__, str(e)[:300]); raise SystemExit(0)
# churn other allocations between replays: they must not land on the graph's memory
bad = 0
for i in range(20):
    junk = [torch.full((n,), float(i + 1), device="cuda") for n in (1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22) for _ in range(4)]
    g.replay(); torch.cuda.synchronize()
    bad += sum(int((j != float(i + 1)).sum().item()) for j in junk)
    del junk
print(os.environ["MODE"], "elements of tensors made after capture overwritten by replays:", bad)
torch.cuda.synchronize()
err = (y - ref).abs().max().item()
print(os.environ["MODE"], "graph replayed 20 times; max abs diff vs eager %.3g" % err)
# replay with new input
x2 = torch.randn(64, 1024, device="cuda"); x.copy_(x2); g.replay(); torch.cuda.synchronize()
print(os.environ["MODE"], "new input diff %.3g" % (y - m(x2)).abs().max().item())
PY
done
kill $DP; wait $DP; tail -5 /tmp/g.dlog
