"""tensor.record_stream through MoonBright's PyTorch hook: a tensor read on
a side stream (behind a long spin there) is freed on its own stream, and a
tensor of the same size is made and filled on that stream at once. The
side stream's copy must still see the old contents at every tier's size
(4 KiB, 1 MiB, 64 MiB): the block is not reused before the recorded
stream's work is done. Then 40 such frees in a row must not grow the
device's use (the deferred blocks come back). Exit 77 (skip) without torch
or a GPU.

usage: torch_record_stream.py LIBMBCLIENT
"""
import sys

from torch_env import enable_hook, need_gpu, torch


def once(n, side, spin):
    x = torch.full((n,), 1.0, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(spin)
        z = x * 1.0
    x.record_stream(side)
    del x
    y = torch.full((n,), 7.0, device="cuda")   # its stream's next request: may reuse x's block
    torch.cuda.synchronize()
    bad = int((z != 1.0).sum().item())
    del y, z
    return bad


def main():
    need_gpu()
    enable_hook(sys.argv[1])
    side = torch.cuda.Stream()
    failed = False
    for n in (1 << 10, 1 << 18, 1 << 24):   # 4 KiB, 1 MiB, 64 MiB of floats
        bad = once(n, side, 50_000_000)
        print("%d-byte tensor freed while a recorded stream read it: %d elements changed under "
              "the reader" % (4 * n, bad))
        failed = failed or bad != 0
    torch.cuda.synchronize()
    free0, _ = torch.cuda.mem_get_info()
    for _ in range(40):
        once(1 << 24, side, 1_000_000)
    torch.cuda.synchronize()
    for _ in range(4):   # later requests give the deferred blocks back
        torch.empty(1 << 10, device="cuda")
    free1, _ = torch.cuda.mem_get_info()
    grew = (free0 - free1) / 2**20
    print("40 recorded frees of 64 MiB: device use grew by %.0f MiB" % grew)
    failed = failed or grew > 1024
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
