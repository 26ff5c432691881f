#!/usr/bin/env bash
# GPU call: AdamW 8-bit with CheckedMath's range checks (HEAD) and without them (an experiment:
# exact() always true, wrong numerics where a check would fail), in turn, two rounds.
set -u
[ -x build-run/optgen_bench ] || tar -xJf build-pack/head.tar.xz
xz -dkf build-pack/exp/optgen_bench_nochecks.xz
export LD_LIBRARY_PATH=$PWD/build-run
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
a="--workload-dir build-run/workloads --modes eager --steps 20 --host-tensors 0 --host-matrices 0"
for round in 1 2; do
  for v in head nochecks; do
    b=build-run/optgen_bench; [ $v = nochecks ] && b=build-pack/exp/optgen_bench_nochecks
    echo "== $v round $round" >> $OUT/bench.log
    $b $a --workloads gpt2,llama-1b,bert-base --optimizers adamw --storage bf16:q8:exp_avg_sq=uq8,f32:q8:exp_avg_sq=uq8 >> $OUT/bench.log 2>&1
    $b $a --workloads gpt2,ghostnet_100 --optimizers adam_mini --storage f32,f32:q8:vmean=f32:v=uq8 >> $OUT/bench.log 2>&1
  done
done
grep -E "^==|^\| [a-z]" $OUT/bench.log | grep -v "| workload" | awk -F"|" 'NF>5{print $2,$5,$6,$10,$13} NF<=5{print}'
echo "elapsed $SECONDS"
