"""torch.cuda.empty_cache() through MoonBright's PyTorch hook gives the
process's idle memory back to the daemon: after a 1 GiB tensor and some
small ones are freed, the tenant holds at least 1 GiB (freed memory stays
mapped for reuse); after empty_cache() it holds under 128 MiB, and a new
tensor still works. Exit 77 (skip) without torch or a GPU.

usage: torch_empty_cache.py LIBMBCLIENT MBCTL   (under with_daemon.sh)
"""
import json
import os
import subprocess
import sys

from torch_env import enable_hook, need_gpu, torch


def tenant_bytes(mbctl, name):
    out = subprocess.run([mbctl, "tenants", "--json"], capture_output=True, text=True, check=True)
    for t in json.loads(out.stdout)["tenants"]:
        if t["name"] == name:
            return t["bytes"]
    return 0


def main():
    need_gpu()
    lib, mbctl = sys.argv[1], sys.argv[2]
    enable_hook(lib)
    tenant = os.environ.get("MOONBRIGHT_TENANT", "torch")
    big = torch.ones(1 << 28, device="cuda")               # 1 GiB
    small = [torch.ones(1 << k, device="cuda") for k in range(8, 20)]
    total = big.sum().item() + sum(s.sum().item() for s in small)
    del big, small
    torch.cuda.synchronize()
    before = tenant_bytes(mbctl, tenant)
    torch.cuda.empty_cache()
    after = tenant_bytes(mbctl, tenant)
    again = torch.ones(1 << 20, device="cuda").sum().item()
    print("tenant %s holds %d MiB after the frees, %d MiB after empty_cache(); sums %.0f, %.0f"
          % (tenant, before >> 20, after >> 20, total, again))
    ok = before >= 1 << 30 and after < 128 << 20 and again == float(1 << 20)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
