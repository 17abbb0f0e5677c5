#!/usr/bin/env python3
"""bench_torch.py: the PyTorch baselines of mbbench, in mbbench's --json schema.

  bench_torch.py latency [--sizes 256,4K,64K,2M,64M] [--pairs N]
  bench_torch.py replay TRACE [--requests 3000] [--compression 8] ...
  bench_torch.py train [--steps 50] [--warmup 5] [--rounds 1] ...
  bench_torch.py generate [--steps 8] [--warmup 1] [--rounds 1] ...

Each allocator setting runs in its own child process (PYTORCH_CUDA_ALLOC_CONF
is read once, at CUDA initialisation; this parent never touches CUDA):
  torch-default        the caching allocator as shipped
  torch-expandable     PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  torch-cudaMallocAsync PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync
  torch-moonbright     libmbclient's mb_torch_malloc/mb_torch_free through
                       CUDAPluggableAllocator (only with --mb-lib PATH and a
                       running moonbrightd)
  torch-pluggable-cudaMallocAsync
                       the driver's cuMemAllocAsync/cuMemFreeAsync through
                       CUDAPluggableAllocator (libmbtorchpass.so, only with
                       --pass-lib PATH): against torch-cudaMallocAsync, what
                       the pluggable interface itself costs
The replay protocol is mbbench replay's, operation for operation: the first
N requests; one decode step covers 20 ms x compression of trace time;
arrivals allocate their context rounded up to 16-token blocks of 128 KiB per
token; each token that crosses a block boundary allocates the larger buffer
and then frees the old one; finished requests free at the end of the step.
Tensors are torch.empty (uint8): memory is never touched.

The training run (defaults; each has a flag): a GPT-style decoder (6 layers,
d_model 512, 8 heads, feed-forward 4 x d_model, vocabulary 8192, pre-norm,
causal attention), batch 16, a sequence length drawn per step from [32, 256]
(one seeded sequence, the same in every child), AdamW, next-token cross
entropy on random tokens; weights and tokens come from fixed seeds. TF32 is
off and attention runs on the math kernel (the fused kernels may sum
gradients in a varying order), so every allocator must produce the same
losses. `train --model cnn` trains a ResNet-18-style network instead (basic
residual blocks of 64-512 channels, batch norm, 100 classes) on random
images whose side is drawn per step from [--min-image, --max-image] (64-192,
a multiple of 16), cuDNN deterministic. After the warm-up steps, each step is timed between two
torch.cuda.synchronize() calls; after every step the device memory in use is
read with torch.cuda.mem_get_info() (total - free: every process on the
device counts, so a running moonbrightd's context is in every row and the
frames it holds are in the torch-moonbright row, and in the rows after it
while the daemon keeps them: torch-moonbright runs last in the default
--configs). The idle figure, read before the model is built, is in the JSON
as device_used_idle_bytes. torch.cuda.max_memory_reserved() is reported
where the allocator keeps PyTorch's statistics (not for torch-moonbright).
Step times of one process drift from run to run (a config's median moves by
up to 30 % between runs), so with --rounds N the configs run in turn N times
and each run is compared with the torch-default run of its own round; the
summary gives the median of those ratios and their range, and the peak
memory of the first round.

The generation run (defaults; each has a flag) is the same decoder (12
layers, d_model 1024, 16 heads) serving batches of 8 prompts: one prompt
length per batch drawn from [128, 1024], a prefill, then 256 tokens decoded
greedily one at a time, every layer's keys and values kept in a cache that
grows by torch.cat at each token (a new, larger tensor each time and the
old one freed, as a framework's dynamic cache does: above 8 MiB per tensor
from about 260 tokens on). A step is one whole batch, timed between two
torch.cuda.synchronize() calls; the tokens generated take the place of the
losses and must be identical with every allocator. The device memory in use
is read at the end of each batch's decoding (the cache at its largest) and
after it. Rounds, ratios and peak memory are reported as for train.
"""
import argparse
import csv
import datetime
import json
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import time

CONFIGS = {
    "torch-default": "",
    "torch-expandable": "expandable_segments:True",
    "torch-cudaMallocAsync": "backend:cudaMallocAsync",
    "torch-moonbright": None,   # pluggable allocator, --mb-lib
    "torch-pluggable-cudaMallocAsync": None,   # pluggable allocator, --pass-lib
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


def nearest_rank(v, q):
    """The q-th percentile of sorted v, nearest rank (as summary())."""
    return v[max(0, (len(v) * q + 99) // 100 - 1)] if v else 0


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


# The names each field goes by, in any case (mbbench replay takes the same).
TS_NAMES = ("TIMESTAMP", "arrival_time", "time")
CTX_NAMES = ("ContextTokens", "input_length", "Request tokens", "input_tokens", "prompt_tokens",
             "context_tokens")
GEN_NAMES = ("GeneratedTokens", "output_length", "Response tokens", "output_tokens",
             "completion_tokens", "generated_tokens")


def first_of(names, keys):
    """The index in keys of the first of names present (case-insensitive)."""
    low = [k.lower() for k in keys]
    for n in names:
        if n.lower() in low:
            return low.index(n.lower())
    raise SystemExit("bench_torch.py: the trace has none of " + ", ".join(names))


def load_trace(path, max_req, jsonl_scale):
    reqs = []
    with open(path) as f:
        lines = (l for l in f if l.strip() and not l.lstrip().startswith("#"))
        first = next(lines)
        if first.lstrip().startswith("{"):
            fmt = "jsonl"
            for line in [first] + list(lines) if max_req == 0 else _head([first], lines, max_req):
                o = json.loads(line)
                keys = list(o)
                ts, ctx, gen = (o[keys[first_of(n, keys)]] for n in (TS_NAMES, CTX_NAMES, GEN_NAMES))
                t = parse_ts(ts) if isinstance(ts, str) and ":" in ts else float(ts) * jsonl_scale
                reqs.append((t, int(float(ctx)), int(float(gen))))
        else:
            fmt = "csv"
            cols = [c.strip() for c in first.split(",")]
            it, ic, ig = (first_of(n, cols) for n in (TS_NAMES, CTX_NAMES, GEN_NAMES))
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
    elif name == "torch-pluggable-cudaMallocAsync":
        alloc = torch.cuda.memory.CUDAPluggableAllocator(args.pass_lib, "mbpass_malloc", "mbpass_free")
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


# ---- the training run ----

def train_shapes(args):
    """One sequence length per step (--model cnn: one image side, a multiple
    of 16), warm-up included: the same list in every child."""
    rng = random.Random(args.seed)
    if args.model == "cnn":
        return [rng.randint(args.min_image, args.max_image) // 16 * 16 for _ in range(args.warmup + args.steps)]
    return [rng.randint(args.min_seq, args.max_seq) for _ in range(args.warmup + args.steps)]


CNN_CLASSES = 100   # the CNN's output classes, and the labels' range


def build_cnn(torch, args):
    """A ResNet-18-style network: basic residual blocks, 64-512 channels,
    batch norm, CNN_CLASSES classes."""
    nn = torch.nn

    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = nn.BatchNorm2d(cout)
            self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = nn.BatchNorm2d(cout)
            self.skip = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                         if stride != 1 or cin != cout else nn.Identity())

        def forward(self, x):
            y = torch.relu(self.b1(self.c1(x)))
            return torch.relu(self.b2(self.c2(y)) + self.skip(x))

    layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for i, cout in enumerate((64, 128, 256, 512)):
        layers += [Basic(cin, cout, 1 if i == 0 else 2), Basic(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, CNN_CLASSES)]
    return nn.Sequential(*layers)


def build_gpt(torch, args):
    nn, F = torch.nn, torch.nn.functional

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, n, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            d = args.d_model
            self.tok, self.pos = nn.Embedding(args.vocab, d), nn.Embedding(args.max_seq, d)
            self.blocks = nn.ModuleList(Block(d, args.heads) for _ in range(args.layers))
            self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, args.vocab, bias=False)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln(x))

    return GPT()


def exact_math(torch):
    """TF32 off, deterministic cuDNN, attention on the math kernel (the fused
    kernels may sum in a varying order): every allocator gives the same
    numbers."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    for kernel in ("enable_flash_sdp", "enable_mem_efficient_sdp", "enable_cudnn_sdp"):
        if hasattr(torch.backends.cuda, kernel):
            getattr(torch.backends.cuda, kernel)(False)
    torch.backends.cuda.enable_math_sdp(True)


class DeviceMemory:
    """The device memory in use (every process's) and PyTorch's own
    statistics where the allocator keeps them."""
    def __init__(self, torch, dev):
        self.torch, self.dev = torch, dev

    def in_use(self):
        free, total = self.torch.cuda.mem_get_info(self.dev)
        return total - free

    def stat(self, fn):
        try:
            return fn(self.dev)
        except RuntimeError:
            return None


def timed_row(torch, mem, args, name, what, unit, times, values, err, note, idle_used, peak_used, wall):
    """A train or generate result row: step (or batch) times, the values
    compared with the default allocator's (losses, tokens), memory."""
    peak_res, peak_alloc = mem.stat(torch.cuda.max_memory_reserved), mem.stat(torch.cuda.max_memory_allocated)
    st = summary(times)
    st["p90"] = nearest_rank(sorted(times), 90)
    ms = lambda v: v / 1e6
    row = {
        "allocator": name, "source": "bench_torch.py",
        "what": "%s, PYTORCH_CUDA_ALLOC_CONF=%r" % (what, os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")),
        "ok": err is None, "note": note, "warmup": args.warmup, "steps": len(times),
        "step_ns": st, "step_times_ns": times,
        "step_ms": {"median": ms(statistics.median(times)) if times else 0,
                    "mean": ms(statistics.mean(times)) if times else 0, "p90": ms(st["p90"])},
        "losses": values,
        "device_total_bytes": torch.cuda.mem_get_info(mem.dev)[1], "device_used_idle_bytes": idle_used,
        "peak_device_used_bytes": peak_used,
        "max_memory_reserved_bytes": peak_res, "max_memory_allocated_bytes": peak_alloc,
        "total_s": wall,
    }
    print("bench_torch: %s: %d %s, median %.2f ms, peak in use %.2f GiB%s" % (
        name, len(times), unit, row["step_ms"]["median"], peak_used / 2**30, ", " + note if note else ""),
        file=sys.stderr)
    return [row]


def child_train(args, name):
    torch, dev = child_setup(args, name)
    F = torch.nn.functional
    exact_math(torch)
    mem = DeviceMemory(torch, dev)
    in_use = mem.in_use
    cnn = args.model == "cnn"
    lens = train_shapes(args)
    torch.cuda.synchronize(dev)
    idle_used = in_use()
    torch.manual_seed(args.seed)
    # initialised on the host: the same weights everywhere
    model = (build_cnn(torch, args) if cnn else build_gpt(torch, args)).to(dev)
    gen = torch.Generator().manual_seed(args.seed + 1)
    if cnn:   # one batch of images per step, cropped to the step's side; labels from CNN_CLASSES classes
        data = torch.randn((len(lens), args.batch, 3, args.max_image, args.max_image), generator=gen).to(dev)
        labels = torch.randint(0, CNN_CLASSES, (len(lens), args.batch), generator=gen).to(dev)
    else:
        data = torch.randint(0, args.vocab, (len(lens), args.batch, args.max_seq + 1), generator=gen).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    mem.stat(torch.cuda.reset_peak_memory_stats)
    classes = CNN_CLASSES if cnn else args.vocab

    def step(x, y):   # every tensor of the step is freed before it returns
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, classes), y.reshape(-1))
        loss.backward()
        opt.step()
        return loss.detach()

    now = time.perf_counter_ns
    times, losses = [], []
    peak_used = in_use()
    err, note = None, ""
    t_start = now()
    for i, n in enumerate(lens):
        if cnn:
            x, y = data[i, :, :, :n, :n], labels[i]
        else:
            x, y = data[i, :, :n], data[i, :, 1:n + 1]
        try:
            torch.cuda.synchronize(dev)
            t0 = now()
            loss = step(x, y)
            torch.cuda.synchronize(dev)
            t1 = now()
        except torch.cuda.OutOfMemoryError as e:
            err, note = "out of memory", "step %d: %s" % (i, str(e).splitlines()[0][:190])
            break
        losses.append(loss.item())
        del loss
        peak_used = max(peak_used, in_use())
        if i >= args.warmup:
            times.append(t1 - t0)
    wall = (now() - t_start) / 1e9
    return timed_row(torch, mem, args, name, "CNN training steps" if cnn else "GPT training steps", "steps",
                     times, losses, err, note, idle_used, peak_used, wall)


def gen_prompt_lens(args):
    """One prompt length per batch, warm-up included: the same list in every child."""
    rng = random.Random(args.seed)
    return [rng.randint(args.min_prompt, args.max_prompt) for _ in range(args.warmup + args.steps)]


def child_generate(args, name):
    torch, dev = child_setup(args, name)
    F = torch.nn.functional
    exact_math(torch)
    mem = DeviceMemory(torch, dev)
    in_use = mem.in_use
    lens = gen_prompt_lens(args)
    torch.cuda.synchronize(dev)
    idle_used = in_use()
    torch.manual_seed(args.seed)
    model = build_gpt(torch, args).to(dev).eval()
    gen = torch.Generator().manual_seed(args.seed + 1)
    prompts = torch.randint(0, args.vocab, (len(lens), args.batch, args.max_prompt), generator=gen).to(dev)
    mem.stat(torch.cuda.reset_peak_memory_stats)
    heads = args.heads

    def forward(idx, start, cache):
        """idx's tokens at positions start..; cache: per layer [keys, values] or None."""
        b, n = idx.shape
        x = model.tok(idx) + model.pos(torch.arange(start, start + n, device=dev))
        for i, blk in enumerate(model.blocks):
            d = x.shape[2]
            q, k, v = blk.qkv(blk.ln1(x)).view(b, n, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            if cache[i] is not None:
                k = torch.cat([cache[i][0], k], dim=2)   # a new tensor; the old one is freed
                v = torch.cat([cache[i][1], v], dim=2)
            cache[i] = (k, v)
            a = F.scaled_dot_product_attention(q, k, v, is_causal=n > 1)
            x = x + blk.proj(a.transpose(1, 2).reshape(b, n, d))
            x = x + blk.out(F.gelu(blk.fc(blk.ln2(x))))
        return model.head(model.ln(x[:, -1]))

    @torch.no_grad()
    def batch(p):
        """The generated tokens, and the device memory in use with the cache at its largest."""
        cache = [None] * args.layers
        nxt = forward(p, 0, cache).argmax(-1, keepdim=True)
        out = [nxt]
        for t in range(args.new_tokens - 1):
            nxt = forward(nxt, p.shape[1] + t, cache).argmax(-1, keepdim=True)
            out.append(nxt)
        return torch.cat(out, dim=1), in_use()

    now = time.perf_counter_ns
    times, tokens = [], []
    peak_used = in_use()
    err, note = None, ""
    t_start = now()
    for i, n in enumerate(lens):
        try:
            torch.cuda.synchronize(dev)
            t0 = now()
            toks, used = batch(prompts[i, :, :n])
            torch.cuda.synchronize(dev)
            t1 = now()
        except torch.cuda.OutOfMemoryError as e:
            err, note = "out of memory", "batch %d: %s" % (i, str(e).splitlines()[0][:190])
            break
        tokens += toks.flatten().tolist()
        del toks
        peak_used = max(peak_used, used, in_use())
        if i >= args.warmup:
            times.append(t1 - t0)
    wall = (now() - t_start) / 1e9
    return timed_row(torch, mem, args, name, "GPT generation batches", "batches", times, tokens, err, note,
                     idle_used, peak_used, wall)


def compare_losses(got, ref):
    """'identical', 'within 1e-6' or 'DIFFER', and the largest relative difference."""
    if len(got) != len(ref):
        return "DIFFER (%d steps against %d)" % (len(got), len(ref)), None
    worst = max((abs(a - b) / max(abs(b), 1e-30) for a, b in zip(got, ref)), default=0.0)
    if got == ref:
        return "identical", 0.0
    return ("within 1e-6" if worst <= 1e-6 else "DIFFER"), worst


def judge_train(results):
    """Set each row's time ratio and loss comparison against the torch-default row of its round."""
    for rnd in sorted({r["round"] for r in results}):
        judge_round([r for r in results if r["round"] == rnd])


def judge_round(results):
    ref = next((r for r in results if r["allocator"] == "torch-default" and r["ok"]), None)
    for r in results:
        r["step_vs_default"] = None
        r["losses_vs_default"], r["loss_max_rel_diff"] = "no default run", None
        if ref is None:
            continue
        if ref["step_ms"]["median"] and r["steps"]:
            r["step_vs_default"] = r["step_ms"]["median"] / ref["step_ms"]["median"]
        if r is ref:
            r["losses_vs_default"], r["loss_max_rel_diff"] = "(reference)", 0.0
        else:
            r["losses_vs_default"], r["loss_max_rel_diff"] = compare_losses(r["losses"], ref["losses"])


def summarize_train(results, configs):
    """Per config over the rounds: the median of its per-round medians and of
    its per-round ratios to torch-default (each ratio pairs two runs made one
    after the other, so drift between rounds cancels), the ratios' range,
    and the first round's peak device memory in use (later rounds may find
    frames a running moonbrightd kept from the round before)."""
    out = []
    for name in configs:
        rows = [r for r in results if r["allocator"] == name and r["ok"] and r["steps"]]
        if not rows:
            continue
        ratios = [r["step_vs_default"] for r in rows if r["step_vs_default"]]
        first = min(rows, key=lambda r: r["round"])
        out.append({"allocator": name, "rounds": len(rows),
                    "median_step_ms": statistics.median(r["step_ms"]["median"] for r in rows),
                    "ratio_median": statistics.median(ratios) if ratios else None,
                    "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
                    "losses_all_match": all(r["losses_vs_default"] in ("identical", "(reference)")
                                            for r in rows),
                    "first_round_peak_device_used_bytes": first["peak_device_used_bytes"]})
    return out


def print_train_table(doc, f):
    gen = doc["bench"] == "generate"
    if gen:
        print("bench_torch generate: %d layers, d_model %d, batch %d, prompts %d-%d, %d new tokens, "
              "%d warm-up + %d timed batches, torch %s" % (
                  doc["layers"], doc["d_model"], doc["batch"], doc["min_prompt"], doc["max_prompt"],
                  doc["new_tokens"], doc["warmup"], doc["steps"], doc["torch"]), file=f)
    elif doc.get("model_kind") == "cnn":
        print("bench_torch train --model cnn: ResNet-18-style, batch %d, images %d-%d px square, "
              "%d warm-up + %d timed steps, torch %s" % (doc["batch"], doc["min_image"], doc["max_image"],
                                                         doc["warmup"], doc["steps"], doc["torch"]), file=f)
    else:
        print("bench_torch train: %d layers, d_model %d, batch %d, seq %d-%d, %d warm-up + %d timed steps, "
              "torch %s" % (doc["layers"], doc["d_model"], doc["batch"], doc["min_seq"], doc["max_seq"],
                            doc["warmup"], doc["steps"], doc["torch"]), file=f)
    what = "TOKENS" if gen else "LOSSES"
    print("%-5s %-22s %9s %9s %9s %10s %12s %12s  %s" % ("ROUND", "CONFIG", "MEDIAN ms", "MEAN ms", "P90 ms", "VS DEFAULT",
                                                  "PEAK USE GiB", "MAX RES GiB", what + " MATCH DEFAULT"), file=f)
    for r in doc["rows"]:
        s = r["step_ms"]
        res = r["max_memory_reserved_bytes"]
        match = r["losses_vs_default"]
        if r["loss_max_rel_diff"]:
            match += " (max rel diff %.3g)" % r["loss_max_rel_diff"]
        print("%-5d %-22s %9.2f %9.2f %9.2f %10s %12.3f %12s  %s%s" % (
            r["round"] + 1, r["allocator"], s["median"], s["mean"], s["p90"],
            "%.3fx" % r["step_vs_default"] if r["step_vs_default"] else "-",
            r["peak_device_used_bytes"] / 2**30, "%.3f" % (res / 2**30) if res is not None else "-",
            match, "  " + r["note"] if r["note"] else ""), file=f)
    print("PEAK USE: total - free from torch.cuda.mem_get_info() after every %s (every process on "
          "the device, moonbrightd included); MAX RES: torch.cuda.max_memory_reserved()"
          % ("batch" if gen else "step"), file=f)
    if doc["rounds"] > 1:
        print("over %d rounds (each config once per round, in turn; VS DEFAULT within each round):"
              % doc["rounds"], file=f)
        print("%-22s %7s %15s %15s %17s %18s  %s" % ("CONFIG", "ROUNDS", "MEDIAN OF ms", "MEDIAN RATIO",
                                                    "RATIO RANGE", "PEAK USE, 1st GiB", what), file=f)
        for sm in doc["summary"]:
            rr = "%.3f-%.3f" % (sm["ratio_min"], sm["ratio_max"]) if sm["ratio_median"] else "-"
            print("%-22s %7d %15.2f %15s %17s %18.3f  %s" % (
                sm["allocator"], sm["rounds"], sm["median_step_ms"],
                "%.3fx" % sm["ratio_median"] if sm["ratio_median"] else "-", rr,
                sm["first_round_peak_device_used_bytes"] / 2**30,
                "all identical" if sm["losses_all_match"] else "SOME DIFFER"), file=f)


# ---- parent ----

def run_children(args, argv):
    results, notes = [], []
    rounds = getattr(args, "rounds", 1)
    for rnd, name in [(r, n) for r in range(rounds) for n in args.configs]:
        env = dict(os.environ)
        if name == "torch-moonbright":
            if not args.mb_lib:
                notes.append("torch-moonbright skipped: no --mb-lib")
                continue
        elif name == "torch-pluggable-cudaMallocAsync":
            if not args.pass_lib:
                notes.append("torch-pluggable-cudaMallocAsync skipped: no --pass-lib")
                continue
        else:
            env["PYTORCH_CUDA_ALLOC_CONF"] = CONFIGS[name]
            if not CONFIGS[name]:
                env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        print("bench_torch: %s %s%s" % (args.cmd, name, " (round %d of %d)" % (rnd + 1, rounds)
                                        if rounds > 1 else ""), file=sys.stderr)
        try:
            p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", name] + argv,
                               env=env, stdout=subprocess.PIPE, timeout=args.child_timeout)
        except subprocess.TimeoutExpired:
            notes.append("%s stopped after %d s (--child-timeout)" % (name, args.child_timeout))
            continue
        if p.returncode != 0:
            notes.append("%s failed (exit %d)" % (name, p.returncode))
            continue
        rows = json.loads(p.stdout)
        for r in rows:
            r["round"] = rnd
        results += rows
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
    ap.add_argument("--pass-lib", help="libmbtorchpass.so for torch-pluggable-cudaMallocAsync")
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
    tr = sub.add_parser("train", help="GPT training steps through each allocator")
    tr.add_argument("--steps", type=int, default=None, help="timed steps (default 50; 10 with --quick)")
    tr.add_argument("--warmup", type=int, default=None, help="untimed steps first (default 5; 2 with --quick)")
    tr.add_argument("--model", choices=["gpt", "cnn"], default="gpt",
                    help="gpt (default), or cnn: a ResNet-18-style network on images whose side is drawn "
                         "per step from [--min-image, --max-image]")
    tr.add_argument("--min-image", type=int, default=64)
    tr.add_argument("--max-image", type=int, default=192)
    tr.add_argument("--batch", type=int, default=16)
    tr.add_argument("--layers", type=int, default=6)
    tr.add_argument("--d-model", type=int, default=512)
    tr.add_argument("--heads", type=int, default=8)
    tr.add_argument("--vocab", type=int, default=8192)
    tr.add_argument("--min-seq", type=int, default=32)
    tr.add_argument("--max-seq", type=int, default=256)
    tr.add_argument("--lr", type=float, default=3e-4)
    tr.add_argument("--seed", type=int, default=1234, help="weights, tokens and sequence lengths")
    tr.add_argument("--rounds", type=int, default=1,
                    help="run the configs in turn this many times, each run a new process (default 1)")
    ge = sub.add_parser("generate", help="GPT generation batches (a KV cache grown by torch.cat) through each allocator")
    ge.add_argument("--steps", type=int, default=None, help="timed batches (default 8; 2 with --quick)")
    ge.add_argument("--warmup", type=int, default=None, help="untimed batches first (default 1)")
    ge.add_argument("--batch", type=int, default=8)
    ge.add_argument("--layers", type=int, default=12)
    ge.add_argument("--d-model", type=int, default=1024)
    ge.add_argument("--heads", type=int, default=16)
    ge.add_argument("--vocab", type=int, default=8192)
    ge.add_argument("--min-prompt", type=int, default=128)
    ge.add_argument("--max-prompt", type=int, default=1024)
    ge.add_argument("--new-tokens", type=int, default=256)
    ge.add_argument("--seed", type=int, default=1234, help="weights, prompts and prompt lengths")
    ge.add_argument("--rounds", type=int, default=1,
                    help="run the configs in turn this many times, each run a new process (default 1)")
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
    elif args.cmd in ("train", "generate"):
        gen = args.cmd == "generate"
        if args.steps is None:
            args.steps = (2 if args.quick else 8) if gen else (10 if args.quick else 50)
        if args.warmup is None:
            args.warmup = 1 if gen else (2 if args.quick else 5)
        lo, hi = ("min_prompt", "max_prompt") if gen else ("min_seq", "max_seq")
        for k in ("steps", "batch", "layers", "d_model", "heads", "vocab", lo) + (("new_tokens",) if gen else ()):
            if getattr(args, k) < 1:
                ap.error("--%s must be at least 1" % k.replace("_", "-"))
        if args.rounds < 1:
            ap.error("--rounds must be at least 1")
        if args.warmup < 0:
            ap.error("--warmup must not be negative")
        if getattr(args, hi) < getattr(args, lo):
            ap.error("--%s must be at least --%s" % (hi.replace("_", "-"), lo.replace("_", "-")))
        if args.d_model % args.heads:
            ap.error("--d-model must be a multiple of --heads")
        if gen:
            args.max_seq = args.max_prompt + args.new_tokens   # the position table build_gpt makes
        elif args.model == "cnn" and not 16 <= args.min_image <= args.max_image:
            ap.error("--min-image must be at least 16 and at most --max-image")
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
        elif args.cmd == "train":
            out = child_train(args, args.child)
        elif args.cmd == "generate":
            out = child_generate(args, args.child)
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
    elif args.cmd == "train":
        judge_train(results)
        if args.model == "cnn":
            doc.update({"model": "ResNet-18-style CNN, batch norm, AdamW, random images and labels",
                        "min_image": args.min_image, "max_image": args.max_image,
                        "image_sides": train_shapes(args)})
        else:
            doc.update({"model": "GPT decoder, pre-norm, causal math attention, AdamW, random tokens",
                        "layers": args.layers, "d_model": args.d_model, "heads": args.heads,
                        "vocab": args.vocab, "min_seq": args.min_seq, "max_seq": args.max_seq,
                        "seq_lens": train_shapes(args)})
        doc.update({"model_kind": args.model, "batch": args.batch, "lr": args.lr, "seed": args.seed,
                    "warmup": args.warmup, "steps": args.steps, "rounds": args.rounds, "rows": results,
                    "summary": summarize_train(results, args.configs)})
    elif args.cmd == "generate":
        judge_train(results)
        doc.update({"model": "GPT decoder, pre-norm, causal math attention, greedy decoding, "
                             "a KV cache grown by torch.cat per token",
                    "layers": args.layers, "d_model": args.d_model, "heads": args.heads, "vocab": args.vocab,
                    "batch": args.batch, "min_prompt": args.min_prompt, "max_prompt": args.max_prompt,
                    "new_tokens": args.new_tokens, "seed": args.seed, "warmup": args.warmup,
                    "steps": args.steps, "prompt_lens": gen_prompt_lens(args),
                    "rounds": args.rounds, "rows": results,
                    "summary": summarize_train(results, args.configs)})
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
        if args.cmd in ("train", "generate"):
            print_train_table(doc, sys.stderr)
    elif args.cmd in ("train", "generate"):
        print_train_table(doc, sys.stdout)
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
