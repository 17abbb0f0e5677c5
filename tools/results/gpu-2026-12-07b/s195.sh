#!/bin/bash
# The CNN's allocations under PyTorch's default allocator, captured as a
# lifetimes trace (capcnn.py) for replay on the host backend. Run with bash.
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s195; mkdir -p $O
timeout 200 python3 tools/results/gpu-2026-12-07b/capcnn.py $O/cnn-lifetimes.log > $O/cap.out 2>&1; echo "cap rc=$?"
tail -3 $O/cap.out; wc -l $O/cnn-lifetimes.log; gzip $O/cnn-lifetimes.log
date -u
