"""CUDA graphs through MoonBright's PyTorch hook: a function whose
temporaries span the slab, pool and heap tiers (4 KiB to 128 MiB) is
captured in a CUDA graph, then replayed while other tensors are made and
dropped between replays. The replays must match eager execution, and no
tensor made after the capture may be written by a replay (memory a graph
still uses must not be handed out again). Graphs made and released in turn
must not grow the device's use (a released graph's memory is reused).
Exit 77 (skip) without torch or a GPU.

usage: torch_graphs.py LIBMBCLIENT
"""
import sys

from torch_env import enable_hook, need_gpu, torch


def step(w1, w2, x):
    h = torch.nn.functional.gelu(x @ w1)            # 64 x 8192 floats: 2 MiB
    big = h.repeat(16, 1) * 0.5                      # 32 MiB
    wide = torch.cat([big, big, big, big], dim=0)    # 128 MiB
    small = h[:1, :1024].clone() + 1.0               # 4 KiB
    y = (wide[: h.shape[0]] + h) @ w2
    return y + small.sum()


def main():
    need_gpu()
    enable_hook(sys.argv[1])
    torch.manual_seed(7)
    torch.backends.cuda.matmul.allow_tf32 = False
    w1 = torch.randn(1024, 8192, device="cuda") / 32
    w2 = torch.randn(8192, 1024, device="cuda") / 90
    x = torch.randn(64, 1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(w1, w2, x)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step(w1, w2, x)
    sizes = (1 << 10, 1 << 14, 1 << 18, 1 << 22, 1 << 24, 1 << 25)   # 4 KiB .. 128 MiB
    overwritten = 0
    worst = 0.0
    for i in range(12):
        x.copy_(torch.randn(64, 1024, device="cuda"))
        others = [torch.full((n,), float(i + 1), device="cuda") for n in sizes for _ in range(2)]
        g.replay()
        torch.cuda.synchronize()
        overwritten += sum(int((t != float(i + 1)).sum().item()) for t in others)
        worst = max(worst, (out - step(w1, w2, x)).abs().max().item())
        del others
    print("12 replays: largest difference from eager %.3g; elements of later tensors "
          "written by replays: %d" % (worst, overwritten))
    # Graphs made and dropped in turn: a released graph's memory is reused,
    # so the device's use does not grow with the number of graphs (each
    # holds about 200 MiB of temporaries).
    del out
    g.reset()
    torch.cuda.synchronize()
    free0, total = torch.cuda.mem_get_info()
    for _ in range(20):
        gi = torch.cuda.CUDAGraph()
        with torch.cuda.graph(gi):
            o = step(w1, w2, x)
        gi.replay()
        torch.cuda.synchronize()
        del o
        gi.reset()
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    grew = (free0 - free1) / 2**20
    print("20 graphs made and released: device use grew by %.0f MiB" % grew)
    if worst > 1e-3 or overwritten or grew > 1024:
        print("FAIL")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
