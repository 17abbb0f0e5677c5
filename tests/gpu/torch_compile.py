"""torch.compile through MoonBright's PyTorch hook: Inductor compiles four
small transformer blocks, called with sequence lengths that change between
calls. Checked: every output matches eager execution of the same blocks,
and no tensor made after a call is written by a later one. Then the same
with mode="reduce-overhead", CUDA graph trees on and off, with the same
checks where PyTorch's pluggable-allocator interface lets it run; where
PyTorch raises for a call the interface lacks, that is printed, not
failed. Exit 77
(skip) without torch, Triton or a GPU.

usage: torch_compile.py LIBMBCLIENT
"""
import sys

from torch_env import enable_hook, need_gpu, torch


class Block(torch.nn.Module):
    def __init__(self, d=512, heads=8):
        super().__init__()
        self.ln1 = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = torch.nn.LayerNorm(d)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 4 * d), torch.nn.GELU(),
                                       torch.nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.ln1(x)
        a, _ = self.attn(h, h, h, need_weights=False)
        x = x + a
        return x + self.mlp(self.ln2(x))


def run(fn, block, lengths, seed):
    """Calls fn on inputs of the given sequence lengths; for each, the
    largest difference from eager execution, and the elements of tensors
    made after the call that a later call wrote."""
    worst, overwritten = 0.0, 0
    with torch.no_grad():
        for i, n in enumerate(lengths):
            x = torch.randn(8, n, 512, device="cuda")
            # Outputs may live in a pool the next call reuses: keep a copy,
            # then make tensors that must survive the next calls untouched.
            out = fn(x).clone()
            others = [torch.full((k,), float(seed + i), device="cuda")
                      for k in (1 << 10, 1 << 16, 1 << 20, 1 << 24)]
            worst = max(worst, (out - block(x)).abs().max().item())
            fn(torch.randn(8, n, 512, device="cuda"))
            torch.cuda.synchronize()
            overwritten += sum(int((t != float(seed + i)).sum().item()) for t in others)
            del others
    return worst, overwritten


def main():
    need_gpu()
    try:
        import triton  # noqa: F401  (inductor's GPU code generator)
    except ImportError:
        print("SKIP: triton is not installed (torch.compile cannot generate GPU code)")
        return 77
    enable_hook(sys.argv[1])
    torch.manual_seed(11)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    block = torch.nn.Sequential(*[Block() for _ in range(4)]).cuda().eval()
    lengths = (64, 128, 64, 256, 128, 256, 64, 192, 192, 128)
    failed = False
    # Inductor's kernels, their buffers from the hook.
    worst, overwritten = run(torch.compile(block), block, lengths, 1)
    print("torch.compile: %d calls (%d shapes): largest difference from eager %.3g; elements "
          "of later tensors written: %d" % (2 * len(lengths), len(set(lengths)), worst, overwritten))
    failed |= worst > 1e-3 or overwritten != 0
    # mode="reduce-overhead": CUDA graphs of the compiled code, first as
    # graph trees (the default), then as one graph per shape (graph trees
    # off). Graph trees ask the allocator for calls PyTorch's pluggable
    # interface does not pass on (checkPoolLiveAllocations,
    # getCheckpointState), so PyTorch raises with any pluggable allocator;
    # whatever runs is checked.
    for trees in (True, False):
        torch._dynamo.reset()
        torch._inductor.config.triton.cudagraph_trees = trees
        what = "torch.compile(mode=\"reduce-overhead\"), graph trees %s" % ("on" if trees else "off")
        try:
            worst, overwritten = run(torch.compile(block, mode="reduce-overhead"), block, lengths,
                                     100 if trees else 200)
        except RuntimeError as e:
            if "does not yet support" not in str(e):
                raise
            print("%s: not run: PyTorch says \"%s\"" % (what, str(e).split(". If")[0]))
        else:
            print("%s: %d calls: largest difference from eager %.3g; elements of later tensors "
                  "written by replays: %d" % (what, 2 * len(lengths), worst, overwritten))
            failed |= worst > 1e-3 or overwritten != 0
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
