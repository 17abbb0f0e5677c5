"""What every PyTorch test under tests/gpu starts with: torch itself (exit
77, the skip code, when it is not installed), the check for a usable
device (exit 77 without one), and MoonBright's hook enabled from the
libmbclient the test was given. A test imports it as
`from torch_env import torch, need_gpu, enable_hook`."""
import os
import sys

try:
    import torch  # noqa: F401  (the tests take it from here)
except ImportError:
    print("SKIP: torch is not installed")
    sys.exit(77)


def need_gpu():
    """Exits 77 (skip) where PyTorch sees no CUDA device."""
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        sys.exit(77)


def enable_hook(lib):
    """Routes PyTorch's CUDA allocations through MoonBright (client/python)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "client", "python"))
    import moonbright_torch
    moonbright_torch.enable(lib)
    return moonbright_torch
