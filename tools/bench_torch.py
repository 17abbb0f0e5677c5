#!/usr/bin/env python3
"""bench_torch.py: the PyTorch baselines of mbbench, in mbbench's --json schema.

  bench_torch.py latency [--sizes 256,4K,64K,2M,64M] [--pairs N]
  bench_torch.py replay TRACE [--requests 3000] [--compression 8] ...

Each allocator setting runs in its own child process (PYTORCH_CUDA_ALLOC_CONF
is read once, at CUDA initialisation; this parent never touches CUDA):
  torch-default        the caching allocator as shipped
  torch-expandable     PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  torch-cudaMallocAsync PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
  torch-moonbright     libmbclient's mb_torch_malloc/mb_torch_free through
                       CUDAPluggableAllocator (only with --mb-lib PATH and a
                       running moonbrightd)
The replay protocol is mbbench replay's, operation for operation: the first
N requests; one decode step covers 20 ms x compression of trace time;
arrivals allocate their context rounded up to 16-token blocks of 128 KiB per
token; each token that crosses a block boundary allocates the larger buffer
and then frees the old one; finished requests free at the end of the step.
Tensors are torch.empty (uint8): memory is never touched.
"""
import argparse
import csv
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time

CONFIGS = {
    "torch-default": "",
    "torch-expandable": "expandable_segments:True",
    "torch-cudaMallocAsync": "backend:cudaMallocAsync",
    "torch-moonbright": None,   # pluggable allocator, --mb-lib
}


def parse_size(s):
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(i?B)?\s*", s, re.I)
    if not m:
        raise argparse.ArgumentTypeError("bad size %r" % s)
    return int(m.group(1)) << (10 * " KMGT".index(m.group(2).upper() or " "))


def summary(v):
    if not v:
        return {"n": 0, "mean": 0, "min": 0, "p50": 0, "p99": 0, "max": 0}
    v = sorted(v)
    n = len(v)
    rank = lambda q: v[max(0, (n * q + 99) // 100 - 1)]   # nearest rank, as mbbench
    return {"n": n, "mean": sum(v) / n, "min": v[0], "p50": rank(50), "p99": rank(99), "max": v[-1]}


def header(bench, args):
    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "bench": bench, "tool": "bench_torch.py",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": {"hostname": platform.node(), "kernel": platform.release(), "cpu": cpu,
                 "cpus": os.cpu_count()},
        "device": args.device, "quick": args.quick,
    }


# ---- the replay protocol (same as tools/mbbench_replay.c) ----

def parse_ts(s):
    s = s.strip()
    m = re.fullmatch(r"(\d+)-(\d+)-(\d+)[ T](\d+):(\d+):(\d+(?:\.\d*)?)", s)
    if m:
        Y, M, D, h, mi = (int(m.group(i)) for i in range(1, 6))
        base = datetime.datetime(Y, M, D, h, mi, tzinfo=datetime.timezone.utc).timestamp()
        return base + float(m.group(6))
    return float(s)


def load_trace(path, max_req, jsonl_scale):
    reqs = []
    with open(path) as f:
        lines = (l for l in f if l.strip() and not l.lstrip().startswith("#"))
        first = next(lines)
        if first.lstrip().startswith("{"):
            fmt = "jsonl"
            for line in [first] + list(lines) if max_req == 0 else _head([first], lines, max_req):
                o = json.loads(line)
                reqs.append((float(o["timestamp"]) * jsonl_scale, int(o["input_length"]),
                             int(o["output_length"])))
        else:
            fmt = "csv"
            cols = [c.strip() for c in first.split(",")]
            it, ic, ig = (cols.index(c) for c in ("TIMESTAMP", "ContextTokens", "GeneratedTokens"))
            for row in csv.reader(lines):
                if max_req and len(reqs) >= max_req:
                    break
                reqs.append((parse_ts(row[it]), int(float(row[ic])), int(float(row[ig]))))
    reqs = reqs[:max_req] if max_req else reqs
    reqs.sort(key=lambda r: r[0])
    t0 = reqs[0][0]
    return [(t - t0, c, g) for t, c, g in reqs], fmt


def _head(first, rest, n):
    out = list(first)
    for line in rest:
        if len(out) >= n:
            break
        out.append(line)
    return out


def build_protocol(reqs, step_s, bpt, block):
    """Operations: ('a', req, bytes), ('r', req, bytes), ('f', req), ('s', step)."""
    ops, nxt, active = [], 0, []
    cap, tokens, done = {}, {}, {}
    step = 0
    while nxt < len(reqs) or active:
        end = (step + 1) * step_s
        while nxt < len(reqs) and reqs[nxt][0] < end:
            i = nxt
            nxt += 1
            ctx = reqs[i][1] or 1
            cap[i] = (ctx + block - 1) // block * block
            tokens[i], done[i] = reqs[i][1], 0
            ops.append(("a", i, cap[i] * bpt))
            active.append(i)
        for i in active:
            if done[i] >= reqs[i][2]:
                continue
            tokens[i] += 1
            done[i] += 1
            if tokens[i] > cap[i]:
                cap[i] += block
                ops.append(("r", i, cap[i] * bpt))
        # the same swap-remove order as mbbench
        k = 0
        while k < len(active):
            i = active[k]
            if done[i] >= reqs[i][2]:
                ops.append(("f", i))
                active[k] = active[-1]
                active.pop()
            else:
                k += 1
        ops.append(("s", step))
        step += 1
    return ops, step


# ---- children: one allocator setting each ----

def child_setup(args, name):
    import torch
    if name == "torch-moonbright":
        alloc = torch.cuda.memory.CUDAPluggableAllocator(args.mb_lib, "mb_torch_malloc", "mb_torch_free")
        torch.cuda.memory.change_current_allocator(alloc)
    dev = torch.device("cuda", args.device)
    torch.cuda.set_device(dev)
    torch.empty(1, dtype=torch.uint8, device=dev)   # initialise CUDA and the allocator
    return torch, dev


def child_latency(args, name):
    torch, dev = child_setup(args, name)
    rows = []
    now = time.perf_counter_ns
    for size in args.sizes:
        pair, al, fr = [], [], []
        warm = max(5, args.pairs // 10)
        for i in range(warm + args.pairs):
            t0 = now()
            t = torch.empty(size, dtype=torch.uint8, device=dev)
            t1 = now()
            del t
            t2 = now()
            if i >= warm:
                pair.append(t2 - t0)
                al.append(t1 - t0)
                fr.append(t2 - t1)
        torch.cuda.synchronize()
        rows.append({"allocator": name, "source": "bench_torch.py", "tier": "torch", "size": size,
                     "ok": True, "pair_ns": summary(pair), "alloc_ns": summary(al), "free_ns": summary(fr)})
    return rows


def child_replay(args, name):
    torch, dev = child_setup(args, name)
    reqs, _ = load_trace(args.trace, args.requests, args.jsonl_scale)
    ops, steps = build_protocol(reqs, args.step_ms / 1000.0 * args.compression, args.token_bytes,
                                args.block_tokens)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(dev)
    reserved = lambda: torch.cuda.memory_reserved(dev)
    buf, size = {}, {}
    live = peak_live = peak_res = 0
    st_live = st_res = 0
    bucket = max(1, (steps + args.points - 1) // args.points)
    series = {"step": [], "live_bytes": [], "reserved_bytes": [], "daemon_bytes": []}
    al, fr = [], []
    now = time.perf_counter_ns
    err, note = None, ""
    t_start = now()
    failed_step = None
    for op in ops:
        kind = op[0]
        try:
            if kind == "a" or kind == "r":
                i, nbytes = op[1], op[2]
                t0 = now()
                t = torch.empty(nbytes, dtype=torch.uint8, device=dev)
                al.append(now() - t0)
                live += nbytes
                if kind == "r":
                    st_live = max(st_live, live)
                    peak_live = max(peak_live, live)
                    r = reserved()
                    st_res, peak_res = max(st_res, r), max(peak_res, r)
                    t0 = now()
                    del buf[i]
                    fr.append(now() - t0)
                    live -= size[i]
                buf[i], size[i] = t, nbytes
                del t
            elif kind == "f":
                i = op[1]
                t0 = now()
                del buf[i]
                fr.append(now() - t0)
                live -= size.pop(i)
            else:
                step = op[1]
                st_live, st_res = max(st_live, live), max(st_res, reserved())   # idle steps hold memory too
                if (step + 1) % bucket == 0 or step + 1 == steps:
                    series["step"].append(step)
                    series["live_bytes"].append(st_live)
                    series["reserved_bytes"].append(st_res)
                    st_live = st_res = 0
                continue
        except torch.cuda.OutOfMemoryError as e:   # the figure a user would hit
            err = "out of memory"
            note = str(e).splitlines()[0][:190]
            failed_step = next((o[1] for o in ops[ops.index(op):] if o[0] == "s"), None)
            break
        st_live = max(st_live, live)
        peak_live = max(peak_live, live)
        r = reserved()
        st_res, peak_res = max(st_res, r), max(peak_res, r)
    torch.cuda.synchronize()
    wall = (now() - t_start) / 1e9
    peak_res = max(peak_res, torch.cuda.max_memory_reserved(dev))
    buf.clear()
    if failed_step is not None:
        note = "stopped at step %d: %s" % (failed_step, note)
    return [{
        "strategy": name, "source": "bench_torch.py",
        "what": "torch.empty new + del old, PYTORCH_CUDA_ALLOC_CONF=%r" % os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
        "ran": True, "ok": err is None, "note": note,
        "peak_live_bytes": peak_live, "peak_reserved_bytes": peak_res,
        "reserved_over_live": peak_res / peak_live if peak_live else 0,
        "peak_daemon_granted_bytes": None, "daemon_over_live": None, "peak_daemon_created_bytes": None,
        "allocations": len(al), "frees": len(fr), "alloc_ns": summary(al), "free_ns": summary(fr),
        "alloc_total_s": sum(al) / 1e9, "free_total_s": sum(fr) / 1e9, "total_s": wall,
        "series": series,
    }]


# ---- parent ----

def run_children(args, argv):
    results, notes = [], []
    for name in args.configs:
        env = dict(os.environ)
        if name == "torch-moonbright":
            if not args.mb_lib:
                notes.append("torch-moonbright skipped: no --mb-lib")
                continue
        else:
            env["PYTORCH_CUDA_ALLOC_CONF"] = CONFIGS[name]
            if not CONFIGS[name]:
                env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        print("bench_torch: %s %s" % (args.cmd, name), file=sys.stderr)
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name] + argv,
                           env=env, stdout=subprocess.PIPE, timeout=args.child_timeout)
        if p.returncode != 0:
            notes.append("%s failed (exit %d)" % (name, p.returncode))
            continue
        results += json.loads(p.stdout)
    return results, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--json", action="store_true", help="JSON on stdout (mbbench's schema)")
    ap.add_argument("--quick", action="store_true", help="smoke mode: small counts")
    ap.add_argument("--device", type=int, default=int(os.environ.get("MOONBRIGHT_DEVICE", "0")))
    ap.add_argument("--configs", default="torch-default,torch-expandable,torch-cudaMallocAsync,torch-moonbright",
                    help="comma-separated: " + ",".join(CONFIGS))
    ap.add_argument("--mb-lib", help="libmbclient.so for torch-moonbright (needs a running moonbrightd)")
    ap.add_argument("--child-timeout", type=int, default=1800)
    sub = ap.add_subparsers(dest="cmd", required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--sizes", default="256,4K,64K,2M,64M")
    lat.add_argument("--pairs", type=int, default=None)
    rep = sub.add_parser("replay")
    rep.add_argument("trace")
    rep.add_argument("--requests", type=int, default=None)
    rep.add_argument("--compression", type=float, default=8)
    rep.add_argument("--step-ms", type=float, default=20)
    rep.add_argument("--token-bytes", type=parse_size, default=128 * 1024)
    rep.add_argument("--block-tokens", type=int, default=16)
    rep.add_argument("--jsonl-ts-unit", choices=["s", "ms"], default="ms")
    rep.add_argument("--points", type=int, default=2000)
    argv = sys.argv[1:]
    args = ap.parse_args()
    args.configs = [c for c in args.configs.split(",") if c]
    for c in args.configs:
        if c not in CONFIGS:
            ap.error("unknown config %r" % c)
    if args.cmd == "latency":
        args.sizes = [parse_size(s) for s in args.sizes.split(",")]
        if args.pairs is None:
            args.pairs = 50 if args.quick else 10000
    else:
        if args.requests is None:
            args.requests = 40 if args.quick else 3000
        args.jsonl_scale = 1e-3 if args.jsonl_ts_unit == "ms" else 1.0

    try:
        import torch
    except ImportError:
        print("bench_torch: PyTorch is not installed here; nothing to measure", file=sys.stderr)
        return 3
    if args.child:
        if not torch.cuda.is_available():
            print("bench_torch: PyTorch sees no CUDA device; nothing to measure", file=sys.stderr)
            return 3
        if args.cmd == "latency":
            out = child_latency(args, args.child)
        else:
            out = child_replay(args, args.child)
        json.dump(out, sys.stdout)
        return 0

    # The parent never initialises CUDA: its children are forked and exec'd.
    results, notes = run_children(args, [a for a in argv if a != "--json"])
    doc = header(args.cmd, args)
    doc["torch"] = torch.__version__
    doc["unit"] = "ns"
    if args.cmd == "latency":
        doc["pairs"] = args.pairs
        doc["rows"] = results
    else:
        reqs, fmt = load_trace(args.trace, args.requests, args.jsonl_scale)
        ops, steps = build_protocol(reqs, args.step_ms / 1000.0 * args.compression, args.token_bytes,
                                    args.block_tokens)
        doc.update({"trace": args.trace, "format": fmt, "requests": len(reqs),
                    "compression": args.compression, "step_ms": args.step_ms,
                    "trace_s_per_step": args.step_ms * args.compression / 1000.0,
                    "bytes_per_token": args.token_bytes, "block_tokens": args.block_tokens,
                    "steps": steps, "allocations": sum(1 for o in ops if o[0] == "a"),
                    "resizes": sum(1 for o in ops if o[0] == "r"), "strategies": results})
    doc["notes"] = notes
    if args.json:
        json.dump(doc, sys.stdout)
        print()
    elif args.cmd == "latency":
        print("bench_torch latency: torch %s, %d pairs per row, times in us" % (torch.__version__, args.pairs))
        print("%-10s %-22s %9s %9s %9s" % ("SIZE", "ALLOCATOR", "PAIR p50", "PAIR p99", "PAIR mean"))
        for r in results:
            s = r["pair_ns"]
            print("%-10d %-22s %9.2f %9.2f %9.2f" % (r["size"], r["allocator"], s["p50"] / 1e3,
                                                     s["p99"] / 1e3, s["mean"] / 1e3))
    else:
        print("bench_torch replay: %s, %d requests, %d steps, torch %s" % (args.trace, len(reqs), steps,
                                                                         torch.__version__))
        print("%-22s %9s %9s %7s %9s %9s %9s %8s" % ("STRATEGY", "LIVE GiB", "RES GiB", "RATIO",
                                                    "ALLOC avg", "p50", "p99", "TOTAL s"))
        for r in results:
            a = r["alloc_ns"]
            print("%-22s %9.2f %9.2f %7.3f %9.2f %9.2f %9.2f %8.2f %s" % (
                r["strategy"], r["peak_live_bytes"] / 2**30, r["peak_reserved_bytes"] / 2**30,
                r["reserved_over_live"], a["mean"] / 1e3, a["p50"] / 1e3, a["p99"] / 1e3, r["total_s"],
                r["note"]))
    for n in notes:
        print("bench_torch: " + n, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
