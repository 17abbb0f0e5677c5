#!/bin/sh
# torch.cuda.empty_cache through the hook: ctest -L gpu (every gpu test, gpu_torch_empty_cache among them),
# then the same test with the hook's extra functions not registered (must fail)
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && ctest -L gpu -V 2>&1 | grep -E "^[0-9]+: ([0-9]+-byte|40 recorded|tenant|12 replays|20 graphs|PASS|FAIL|mbclient|Traceback|torch\.)|tests passed|Test +#")
echo "== without the hook's extra functions (must fail):"
tests/gpu/with_daemon.sh $B/daemon/moonbrightd $B/tools/mbctl python3 -c "
import sys; sys.path.insert(0, 'client/python'); import moonbright_torch
moonbright_torch._register_hooks = lambda *a: None
sys.argv = ['torch_empty_cache.py', '$B/client/libmbclient.so', '$B/tools/mbctl']
__file__ = 'tests/gpu/torch_empty_cache.py'
exec(open(__file__).read())" 2>&1 | grep -E "tenant|PASS|FAIL|Error" | head -6
