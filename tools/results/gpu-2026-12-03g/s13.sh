#!/bin/sh
CU=$(dirname $(dirname $(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc))); date -u
gcc -O2 -o /tmp/cprobe6 .gpu/cprobe6.c -I$CU/include -L$CU/lib64 -L$CU/lib64/stubs -lcuda -lpthread || exit 1
timeout 30 /tmp/cprobe6 0; timeout 30 /tmp/cprobe6 1
date -u
