#!/bin/sh
# the CUDA-graph fix (pool hooks, graph blocks kept until release): the gpu tests that use the hook
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
B=$PWD/build-gpu
cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $B -j16 2>&1 | grep -E "error|warning: "
(cd $B && ctest -R "gpu_torch_graphs|gpu_torch_transformer|gpu_devices|gpu_streams" -V 2>&1 | grep -E "^[0-9]+: (12 replays|20 graphs|PASS|FAIL|mbclient|Traceback|torch\.)|tests passed|Test +#")
