"""moonbright_torch: route PyTorch's CUDA allocations through MoonBright.

The two lines a PyTorch user adds, before the first CUDA allocation:

    import moonbright_torch
    moonbright_torch.enable()          # or enable("/usr/local/lib/libmbclient.so")

The process then allocates from moonbrightd (tenant $MOONBRIGHT_TENANT,
default "torch"; device $MOONBRIGHT_DEVICE, default 0) through
libmbclient's mb_torch_malloc / mb_torch_free pair, and PyTorch's caching
allocator is no longer used.
"""
import ctypes.util
import os

import torch


def library_path(path=None):
    """Where libmbclient is: the argument, $MOONBRIGHT_LIB, or the loader's search."""
    path = path or os.environ.get("MOONBRIGHT_LIB") or ctypes.util.find_library("mbclient")
    if not path:
        raise RuntimeError("libmbclient not found: pass its path or set MOONBRIGHT_LIB")
    return path


def enable(path=None):
    """Make MoonBright PyTorch's CUDA allocator (once, before any CUDA tensor exists)."""
    alloc = torch.cuda.memory.CUDAPluggableAllocator(library_path(path), "mb_torch_malloc",
                                                     "mb_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    return alloc


def cupy_allocator(path=None):
    """A CuPy allocator over the same pair: cupy.cuda.set_allocator(cupy_allocator())."""
    import cupy
    lib = ctypes.CDLL(library_path(path))
    lib.mb_torch_malloc.restype = ctypes.c_void_p
    lib.mb_torch_malloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    lib.mb_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]

    def malloc(size):
        dev = cupy.cuda.Device().id
        ptr = lib.mb_torch_malloc(size, dev, None)
        if not ptr:
            raise cupy.cuda.memory.OutOfMemoryError(size, 0, 0)
        mem = cupy.cuda.memory.UnownedMemory(ptr, size, None, dev)

        class _Owner:
            def __del__(self):
                lib.mb_torch_free(ptr, size, dev, None)
        owner = _Owner()
        mem._mb_owner = owner
        return cupy.cuda.memory.MemoryPointer(mem, 0)
    return malloc
