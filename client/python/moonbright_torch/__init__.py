"""moonbright_torch: route PyTorch's (or CuPy's) CUDA allocations through MoonBright.

The two lines a PyTorch user adds, before the first CUDA allocation:

    import moonbright_torch
    moonbright_torch.enable()

The process then allocates from moonbrightd (tenant $MOONBRIGHT_TENANT,
default "torch") through libmbclient's mb_torch_malloc / mb_torch_free
pair, and PyTorch's caching allocator is no longer used. Each device the
process allocates on gets its own client, with the daemon that serves that
GPU (matched by the GPU's UUID, so CUDA_VISIBLE_DEVICES needs no setting
of MoonBright's). CuPy: cupy.cuda.set_allocator(cupy_allocator()).

torch and cupy are imported only by the function that needs each, so this
module loads without either.
"""
import ctypes
import ctypes.util
import os

__all__ = ["library_path", "enable", "cupy_allocator"]


def _installed_library():
    """The libmbclient installed beside this package, if this is an installed copy."""
    try:
        from . import _install
    except ImportError:          # the source tree: nothing was installed
        return None
    here = os.path.dirname(os.path.abspath(__file__))
    # Relative first, so a copy under a DESTDIR or a moved prefix finds its own library.
    for path in (os.path.normpath(os.path.join(here, _install.LIBRARY_FROM_PACKAGE)),
                 _install.LIBRARY):
        if os.path.exists(path):
            return path
    return None


def library_path(path=None):
    """Where libmbclient is: the argument, $MOONBRIGHT_LIB, the library installed
    with this package, or the dynamic loader's search (ldconfig)."""
    path = (path or os.environ.get("MOONBRIGHT_LIB") or _installed_library()
            or ctypes.util.find_library("mbclient"))
    if not path:
        raise RuntimeError("libmbclient not found: install MoonBright, pass its path, "
                           "or set MOONBRIGHT_LIB")
    return path


def enable(path=None):
    """Make MoonBright PyTorch's CUDA allocator (once, before any CUDA tensor exists)."""
    lib = library_path(path)
    try:
        import torch
    except ImportError as e:
        raise RuntimeError("moonbright_torch.enable() needs PyTorch (import torch failed: %s)"
                           % e) from e
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib, "mb_torch_malloc", "mb_torch_free")
    _register_hooks(alloc, lib)
    torch.cuda.memory.change_current_allocator(alloc)
    return alloc


def _register_hooks(alloc, lib):
    """tensor.record_stream, torch.cuda.empty_cache, and CUDA graphs through
    PyTorch's pool hooks (2.3 and later): memory used on other streams is not
    reused before that work is done, empty_cache gives idle memory back to
    the daemon, and memory a captured graph uses stays the graph's until the
    graph is released."""
    hooks = getattr(alloc, "_allocator", None)
    if hooks is None:
        return
    so = ctypes.CDLL(lib)
    fn = lambda name: ctypes.cast(getattr(so, name), ctypes.c_void_p).value
    if hasattr(hooks, "set_record_stream_fn"):
        hooks.set_record_stream_fn(fn("mb_torch_record_stream"))
    if hasattr(hooks, "set_reset_fn"):   # torch.cuda.empty_cache()
        hooks.set_reset_fn(fn("mb_torch_empty_cache"))
    if not hasattr(hooks, "set_begin_allocate_to_pool"):
        return
    hooks.set_begin_allocate_to_pool(fn("mb_torch_begin_pool"))
    hooks.set_end_allocate_to_pool_fn(fn("mb_torch_end_pool"))
    hooks.set_release_pool(fn("mb_torch_release_pool"))


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
