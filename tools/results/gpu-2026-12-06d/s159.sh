#!/bin/sh
# A/B on one machine: the code of e3411aa (base, from .gpu/base) against the latest (page-table writes
# counted as a request's driver call; the reserve's workers hold off while a grant exports on its path).
# realloc, grow, grow_async, vspace on a fresh daemon at 100G, daemon and client debug logs, base and new
# alternating, 5 rounds; ctest -L gpu on the new code; the goal replay with cudaMallocAsync, new then base.
. tools/gpu/use-deps.sh .gpudeps >/dev/null 2>&1
date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
O=$OUT/s159; mkdir -p $O
for v in new base; do
  S=.; [ $v = base ] && S=.gpu/base
  cmake -S $S -B $PWD/build-$v -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS= >/dev/null && cmake --build $PWD/build-$v -j16 2>&1 | grep -E "error|warning: "
done
C=.gpu/azure_llm_conv_2023.csv
start() { RT=$(mktemp -d); $B/daemon/moonbrightd --foreground --backend cuda --runtime-dir $RT --budget 100G $2 >$1 2>&1 & DP=$!; j=0; while [ ! -S $RT/gpu0.fds ] && [ $j -lt 300 ]; do sleep 0.1; j=$((j+1)); done; export MOONBRIGHT_RUNTIME_DIR=$RT; }
vs() { python3 - $1 <<'PY'
import json,sys
d=json.load(open(sys.argv[1]))
print(" ".join("%s %.3f %.1fus p99 %.1f max %.2fms" % (r["strategy"], r["reserved_over_live"], r["alloc_ns"]["mean"]/1e3, r["alloc_ns"]["p99"]/1e3, r["alloc_ns"]["max"]/1e6) for r in d["strategies"] if r["strategy"] != "realloc"))
PY
}
for r in 1 2 3 4 5; do for v in base new; do
  B=$PWD/build-$v; start $O/$v-r$r.dlog "--log-level debug"
  MOONBRIGHT_LOG=debug timeout 120 $B/tools/mbbench replay $C --strategies realloc,grow,grow_async,vspace --slow-us 1000 --json --quiet > $O/$v-r$r.json 2>$O/$v-r$r.err
  echo "$v r$r rc=$? $(vs $O/$v-r$r.json) slow-grants $(grep -c '^moonbrightd: grant of' $O/$v-r$r.dlog) passes $(grep -c 'pass of the main loop' $O/$v-r$r.dlog)"
  kill $DP; wait $DP
done; done
for v in base new; do echo "$v slow grants, ms: $(grep -h '^moonbrightd: grant of' $O/$v-r*.dlog | awk '{for(i=1;i<=NF;i++) if($i=="took") print $(i+1)}' | sort -rn | tr '\n' ' ')"; done
(cd build-new && timeout 150 ctest -L gpu --output-on-failure > $O/ctest.log 2>&1; echo "ctest rc=$?"; grep -E "tests passed|Failed" $O/ctest.log | head -8)
for v in new base; do
  B=$PWD/build-$v; start $O/conv-$v.dlog
  timeout 200 $B/tools/mbbench replay $C --json --quiet --strategies realloc,grow,grow_async,vspace,cudaMallocAsync > $O/conv-$v.json 2>$O/conv-$v.err
  echo "conv $v rc=$? $(vs $O/conv-$v.json)"
  kill $DP; wait $DP
  python3 tools/goals.py $O/conv-$v.json | grep -E "MISSED|met" | sed 's/  */ /g' | tr '\n' ';'; echo
done
cd $OUT && tar czf s159.tgz s159 && rm -rf s159
date -u
