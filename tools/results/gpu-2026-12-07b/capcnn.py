# capture PyTorch's allocation events (default allocator) of bench_torch train --model cnn (35 steps, 5 of them
# warm-up, image sides 64-192) as a lifetimes trace; cap.py of gpu-2026-12-04c with the CNN's arguments
import importlib.util, sys, types, os, json
spec = importlib.util.spec_from_file_location("bt", "tools/bench_torch.py"); bt = importlib.util.module_from_spec(spec); spec.loader.exec_module(bt)
import torch
which, out = "train", sys.argv[1]
a = types.SimpleNamespace(device=0, mb_lib=None, seed=1234, warmup=5, quick=False, steps=30, batch=16,
                          model="cnn", min_image=64, max_image=192, lr=3e-4, layers=6, d_model=512, heads=8,
                          vocab=8192, min_seq=32, max_seq=256)
torch.cuda.init()
try:
    torch.cuda.memory._record_memory_history(max_entries=3000000, context=None, stacks="python")
except TypeError:
    torch.cuda.memory._record_memory_history(True, trace_alloc_max_entries=3000000, trace_alloc_record_context=False)
bt.child_train(a, "torch-default")
snap = torch.cuda.memory._snapshot()
ev = snap["device_traces"][0]
live = {}
lines = []
n = 0
kinds = {}
for e in ev:
    k = e["action"]; kinds[k] = kinds.get(k, 0) + 1
    if k == "alloc":
        live[e["addr"]] = (n, e["size"]); n += 1
    elif k == "free_completed" and e["addr"] in live:
        s, sz = live.pop(e["addr"]); lines.append((s, n, sz)); n += 1
for addr, (s, sz) in live.items():
    lines.append((s, n, sz))
lines.sort()
with open(out, "w") as f:
    for s, e, sz in lines:
        f.write("%d %d %d\n" % (s, e, sz))
print(which, "events", kinds, "tensors", len(lines), "ops", n, file=sys.stderr)
