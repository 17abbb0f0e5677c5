#!/usr/bin/env python3
"""repeat_batches.py TRACE K OUT: the captured generation trace with its
model kept live and its two batches replayed K times (the tensors the model
load makes and that live to the end of the batches stay live to the end)."""
import sys
src, K, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ts = [tuple(map(int, l.split())) for l in open(src)]
last = max(e for s, e, b in ts)
L = 151                                        # the first op of the first batch
E = max(e for s, e, b in ts if e < last - 1000) + 1
persist = [t for t in ts if t[0] < L and t[1] >= E - 1]
pre = [t for t in ts if t[0] < L and t[1] < E - 1]
batch = [t for t in ts if t[0] >= L and t[1] < E]
span = E - L
end = E + span * (K - 1) + 1
with open(out, "w") as f:
    for s, e, b in persist:
        f.write("%d %d %d\n" % (s, end, b))
    for s, e, b in pre:
        f.write("%d %d %d\n" % (s, e, b))
    for k in range(K):
        for s, e, b in batch:
            f.write("%d %d %d\n" % (s + k * span, e + k * span, b))
