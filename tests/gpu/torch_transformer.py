"""A small transformer (random weights, no download) runs forward and
backward with PyTorch's default allocator and with MoonBright's; the losses
and gradient norms must agree. Exit 77 (skip) without torch or a GPU.

usage: torch_transformer.py LIBMBCLIENT   (runs both variants as subprocesses)
       torch_transformer.py LIBMBCLIENT default|moonbright   (one variant)
"""
import subprocess
import sys

from torch_env import enable_hook, need_gpu, torch


def run(lib, which):
    if which == "moonbright":
        enable_hook(lib)
    torch.manual_seed(1234)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = "cuda"
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.Sequential(torch.nn.Embedding(1000, 256),
                                torch.nn.TransformerEncoder(layer, num_layers=4),
                                torch.nn.Linear(256, 1000)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randint(0, 1000, (16, 128), device=dev)
    y = torch.randint(0, 1000, (16, 128), device=dev)
    losses = []
    for _ in range(3):
        opt.zero_grad()
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, 1000), y.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    gnorm = sum(p.grad.double().norm().item() for p in model.parameters())
    print(f"{which} losses {' '.join(f'{l:.8f}' for l in losses)} gradnorm {gnorm:.8f}")


def main():
    lib = sys.argv[1]
    if len(sys.argv) > 2:
        run(lib, sys.argv[2])
        return 0
    need_gpu()
    got = {}
    for which in ("default", "moonbright"):
        p = subprocess.run([sys.executable, __file__, lib, which], capture_output=True, text=True,
                           timeout=300)
        print(p.stdout + p.stderr)
        if p.returncode != 0:
            print(f"FAIL: {which} run exited {p.returncode}")
            return 1
        line = [l for l in p.stdout.splitlines() if l.startswith(which + " losses")][0].split()
        got[which] = [float(v) for v in line[2:5]] + [float(line[6])]
    for a, b in zip(got["default"], got["moonbright"]):
        if abs(a - b) > 1e-5 * max(1.0, abs(a)):
            print(f"FAIL: default {got['default']} != moonbright {got['moonbright']}")
            return 1
    print("PASS: same losses and gradient norm with both allocators")
    return 0


if __name__ == "__main__":
    sys.exit(main())
