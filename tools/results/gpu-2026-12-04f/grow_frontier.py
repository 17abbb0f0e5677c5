#!/usr/bin/env python3
"""Lower bound for in-place growable ranges on a replay of the conversation
trace (the mbbench replay protocol: 3000 requests, x8, 128 KiB a token,
16-token blocks): each range maps whole frames and never moves data, so
its first size is mapped in exact power-of-two frames (binary digits of
its units: the fewest frames with no rounding) and its growth in tail
frames of T bytes, each mapped one block before it is needed (the least
ahead that never waits). Freed ranges, caches and idle memory count zero.
Prints, for each T, the peak of mapped bytes over the peak of live bytes
and the frames mapped at that peak."""
import csv, sys, math
from datetime import datetime

TRACE = sys.argv[1]
REQ, COMP, STEP_MS, TOK, BLK = 3000, 8, 20, 128 << 10, 16
UNIT = 2 << 20
rows = []
with open(TRACE) as f:
    r = csv.reader(f); next(r)
    for i, (ts, ctx, gen) in enumerate(r):
        if i >= REQ: break
        t = datetime.strptime(ts[:26], "%Y-%m-%d %H:%M:%S.%f").timestamp()
        rows.append((t, int(ctx), int(gen)))
t0 = rows[0][0]
step_s = STEP_MS / 1000 * COMP
blk = BLK * TOK
def rnd(tokens): return -(-tokens // BLK) * blk

def run(T):
    active = []   # [ctx_tokens, gen_left, tokens_now, first_bytes, final_bytes]
    i, step, peak_live, best = 0, 0, 0, (0, 0, 0)
    while i < len(rows) or active:
        end = t0 + (step + 1) * step_s
        while i < len(rows) and rows[i][0] < end:
            _, c, g = rows[i]
            active.append([c, g, c, rnd(c), rnd(c + g)])
            i += 1
        live = mapped = frames = 0
        for a in active:
            if a[1] > 0:
                a[2] += 1; a[1] -= 1
            used, first, final = rnd(a[2]), a[3], a[4]
            grown = used - first
            # tail frames of T, each mapped one block before it is needed
            tails = 0 if used >= final else -(-(grown + blk) // T)
            tails = max(tails, -(-grown // T))
            m = min(first + tails * T, max(final, first + -(-grown // T) * T))
            nf = bin(first // UNIT).count("1") + tails
            live += used; mapped += m; frames += nf
        peak_live = max(peak_live, live)
        if mapped > best[0]:
            best = (mapped, frames, live)
        active = [a for a in active if a[1] > 0]
        step += 1
    return peak_live, best

for T in (2, 4, 8, 16, 32):
    pl, (m, nf, l) = run(T << 20)
    print("tail frames of %2d MiB: peak mapped / peak live %.3f, frames at that peak %d (live then %.1f GiB, peak live %.1f GiB)"
          % (T, m / pl, nf, l / 2**30, pl / 2**30))
