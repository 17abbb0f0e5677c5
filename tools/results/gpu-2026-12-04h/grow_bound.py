#!/usr/bin/env python3
"""grow_bound.py TRACE: the replay protocol of mbbench replay (first 3000
requests, a step of 160 ms of trace time, 16-token blocks of 128 KiB per
token) played without an allocator, to count what any growable-range
design must hold at the peak of live bytes: the ranges live, one block
ahead for each (the least a range can keep mapped so that its next growth
waits for nothing), and the bytes grown since each range's first size (the
part a range maps in growth steps)."""
import csv
import datetime
import sys

BLOCK, TOKEN, STEP_S, N = 16, 128 * 1024, 0.16, 3000
rows = []
with open(sys.argv[1]) as f:
    for i, x in enumerate(csv.DictReader(f)):
        if i >= N:
            break
        ts = datetime.datetime.strptime(x['TIMESTAMP'][:26], '%Y-%m-%d %H:%M:%S.%f')
        rows.append((ts, int(x['ContextTokens']), int(x['GeneratedTokens'])))
t0 = rows[0][0]
arr = [((ts - t0).total_seconds(), c, g) for ts, c, g in rows]


def blk(t):
    return (t + BLOCK - 1) // BLOCK * BLOCK


active, k, s, best = [], 0, 0, None
while k < len(arr) or active:
    end = (s + 1) * STEP_S
    while k < len(arr) and arr[k][0] < end:
        _, c, g = arr[k]
        active.append([c, g, 0, c])   # tokens now, to generate, generated, first context
        k += 1
    for a in active:
        a[0] += 1
        a[2] += 1
    live = sum(blk(a[0]) * TOKEN for a in active)
    if best is None or live > best[0]:
        grown = sum((blk(a[0]) - blk(a[3] + 1)) * TOKEN for a in active)
        best = (live, len(active), grown)
    active = [a for a in active if a[2] < a[1]]
    s += 1
live, n, grown = best
ahead = n * BLOCK * TOKEN
print("peak live %.2f GiB: %d ranges live; one block ahead each %.2f GiB (%.3f of live); "
      "grown since their first sizes %.2f GiB (%d blocks of %d MiB)"
      % (live / 2**30, n, ahead / 2**30, ahead / live, grown / 2**30,
         grown // (BLOCK * TOKEN), BLOCK * TOKEN >> 20))
