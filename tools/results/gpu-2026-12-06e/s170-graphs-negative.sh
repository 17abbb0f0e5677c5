#!/bin/sh
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "

echo "== without the pool hooks (must fail):"
tests/gpu/with_daemon.sh $B/daemon/moonbrightd $B/tools/mbctl python3 -c "
import sys; sys.path.insert(0, 'client/python'); import moonbright_torch
moonbright_torch._graph_hooks = lambda *a: None
sys.argv = ['torch_graphs.py', '$B/client/libmbclient.so']
__file__ = 'tests/gpu/torch_graphs.py'
exec(open(__file__).read())" 2>&1 | grep -E "12 replays|20 graphs|PASS|FAIL|Error" | head -5
echo "rc=$?"
