#!/usr/bin/env python3
"""plot_bench.py: PNG plots from mbbench --json (and bench_torch.py --json) output.

  plot_bench.py [-o OUTDIR] FILE.json [FILE.json ...]

Files of the same kind are drawn together (mbbench's and bench_torch.py's
replay strategies in one figure):
  replay   -> replay_memory.png   reserved bytes over time per strategy, live bytes dashed
  latency  -> latency.png         alloc+free pair p50 per size and allocator (p99 as a tick)
  rpc      -> rpc.png             round-trip p50/p99 and requests/s against client processes
  tenants  -> tenants.png         daemon bytes per round against static partitioning
Needs matplotlib; without it, says so and exits 0 having drawn nothing.
"""
import argparse
import json
import os
import sys

GiB = float(1 << 30)


def load(paths):
    docs = {}
    for p in paths:
        try:
            with open(p) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            print("plot_bench: skipping %s: %s" % (p, e), file=sys.stderr)
            continue
        if not isinstance(d, dict):
            print("plot_bench: skipping %s: not an mbbench document" % p, file=sys.stderr)
            continue
        d["_file"] = p
        docs.setdefault(d.get("bench", "?"), []).append(d)
    return docs


def plot_replay(plt, docs, out):
    fig, ax = plt.subplots(figsize=(10, 5.5))
    live_drawn = set()
    title = None
    for d in docs:
        per_step = d.get("trace_s_per_step", 0.16)
        title = title or "%s, first %d requests, 20 ms step x %g, %d KiB/token" % (
            os.path.basename(d.get("trace", "")), d.get("requests", 0), d.get("compression", 0),
            d.get("bytes_per_token", 0) // 1024)
        for s in d.get("strategies", []):
            ser = s.get("series") or {}
            x = [st * per_step for st in ser.get("step", [])]
            if not x:
                continue
            ratio = s.get("reserved_over_live") or 0
            line, = ax.plot(x, [v / GiB for v in ser["reserved_bytes"]], lw=1.2,
                            label="%s reserved (peak %.3f x live)" % (s["strategy"], ratio))
            if ser.get("daemon_bytes"):
                ax.plot(x, [v / GiB for v in ser["daemon_bytes"]], lw=0.8, ls=":", color=line.get_color(),
                        label="%s daemon granted" % s["strategy"])
            key = (s.get("peak_live_bytes"), s["strategy"] in ("grow",))
            if key not in live_drawn:
                live_drawn.add(key)
                ax.plot(x, [v / GiB for v in ser["live_bytes"]], lw=0.8, ls="--", color="black",
                        alpha=0.5, label="live (%s)" % s["strategy"])
    ax.set_xlabel("trace time (s)")
    ax.set_ylabel("GiB")
    ax.set_title(title or "replay")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "replay_memory.png"), dpi=120)
    return "replay_memory.png"


def plot_latency(plt, docs, out):
    rows = [r for d in docs for r in d.get("rows", []) if r.get("ok", True)]
    sizes = sorted({r["size"] for r in rows})
    allocs = []
    for r in rows:
        if r["allocator"] not in allocs:
            allocs.append(r["allocator"])
    fig, ax = plt.subplots(figsize=(10, 5))
    w = 0.8 / max(1, len(allocs))
    for k, a in enumerate(allocs):
        xs, p50, p99 = [], [], []
        for i, s in enumerate(sizes):
            for r in rows:
                if r["allocator"] == a and r["size"] == s:
                    xs.append(i + (k - (len(allocs) - 1) / 2) * w)
                    p50.append(max(r["pair_ns"]["p50"], 1) / 1e3)
                    p99.append(max(r["pair_ns"]["p99"], 1) / 1e3)
        bars = ax.bar(xs, p50, w, label=a)
        ax.scatter(xs, p99, marker="_", s=80, color=bars.patches[0].get_facecolor() if bars.patches else None)
    ax.set_yscale("log")
    ax.set_xticks(range(len(sizes)))
    ax.set_xticklabels([fmt_size(s) for s in sizes])
    ax.set_ylabel("alloc+free pair, us (bar p50, tick p99)")
    ax.set_title("allocation latency")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "latency.png"), dpi=120)
    return "latency.png"


def plot_rpc(plt, docs, out):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4.5))
    for d in docs:
        rows = d.get("rows", [])
        c = [r["clients"] for r in rows]
        tag = "%s (%s)" % (d.get("op", "?"), d.get("backend", "?"))
        a1.plot(c, [r["round_trip_ns"]["p50"] / 1e3 for r in rows], "o-", label="p50 " + tag)
        a1.plot(c, [r["round_trip_ns"]["p99"] / 1e3 for r in rows], "s--", label="p99 " + tag)
        a2.plot(c, [r["requests_per_s"] for r in rows], "o-", label=tag)
    for a in (a1, a2):
        a.set_xscale("log", base=2)
        a.set_xlabel("client processes")
        a.grid(alpha=0.3)
        a.legend(fontsize=8)
    a1.set_yscale("log")
    a1.set_ylabel("round trip, us")
    a2.set_ylabel("requests/s (all clients)")
    fig.suptitle("daemon round trips")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "rpc.png"), dpi=120)
    return "rpc.png"


def plot_tenants(plt, docs, out):
    d = docs[-1]
    rounds = d.get("rounds_detail", [])
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.bar(range(1, len(rounds) + 1), [r["daemon_granted_bytes"] / GiB for r in rounds],
           label="daemon granted at each peak (shared)")
    ax.axhline(d.get("static_partition_bytes", 0) / GiB, color="red", ls="--",
               label="static partitioning (sum of peaks)")
    for i, r in enumerate(rounds):
        ax.text(i + 1, r["daemon_granted_bytes"] / GiB, "t%d\n%.2f ms" % (r["tenant"], r["starve_alloc_ns"] / 1e6),
                ha="center", va="bottom", fontsize=7)
    ax.set_xlabel("round (tenant peaking, time to its first 64 frames)")
    ax.set_ylabel("GiB")
    ax.set_title("%d tenants with alternating peaks" % d.get("tenants", 0))
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "tenants.png"), dpi=120)
    return "tenants.png"


def fmt_size(b):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if b >= 1 << shift and b % (1 << shift) == 0:
            return "%d %s" % (b >> shift, unit)
    return "%d B" % b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--outdir", default=".")
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot_bench: matplotlib is not installed; no plots drawn "
              "(pip install matplotlib, or apt-get install python3-matplotlib)", file=sys.stderr)
        return 0
    docs = load(args.files)
    os.makedirs(args.outdir, exist_ok=True)
    plotters = {"replay": plot_replay, "latency": plot_latency, "rpc": plot_rpc, "tenants": plot_tenants}
    for kind, ds in docs.items():
        if kind not in plotters:
            print("plot_bench: skipping %s (bench %r)" % (ds[0]["_file"], kind), file=sys.stderr)
            continue
        name = plotters[kind](plt, ds, args.outdir)
        print("plot_bench: wrote %s" % os.path.join(args.outdir, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
