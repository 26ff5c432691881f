#!/usr/bin/env bash
# GPU call: 8-bit kernels at a = 3563240 (the fallback's two blocks) and n = dc29e34 (two blocks foreseen), then
# the [gpu] and [torch] tests of n.
set -u
mkdir -p build-run && tar -xJf build-pack/run.tar.xz -C build-run
mkdir -p /work && ln -sfn "$PWD" /work/main
export LD_LIBRARY_PATH=$PWD/build-run
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu_name.txt; cat $OUT/gpu_name.txt
w="--workload-dir build-run/workloads --modes eager --steps 20 --host-tensors 0 --host-matrices 0"
for round in 1 2; do
for v in a n; do
  echo "== $v round $round" >> $OUT/bench.log
  timeout 60 build-run/$v/optgen_bench $w --workloads gpt2,llama-1b --optimizers adamw,adamw_amsgrad --storage bf16:q8:exp_avg_sq=uq8,f32:q8:exp_avg_sq=uq8 >> $OUT/bench.log 2>&1
  timeout 60 build-run/$v/optgen_bench $w --workloads ghostnet_100,resnet50,gpt2 --optimizers adam_mini --storage f32:q8:vmean=f32:v=uq8 >> $OUT/bench.log 2>&1
done
echo "elapsed $SECONDS"
done
grep -E "^==|q8" $OUT/bench.log | awk -F'|' 'NF>5{print $2,$3,$4,$5,$6,$10,$13} NF<=5{print}'
( time OUT=$OUT timeout $((590 - SECONDS)) scripts/gpu_session.sh tests ) > $OUT/tests.log 2>&1
echo "rc=$?" >> $OUT/tests.log
tail -25 $OUT/tests.log
cd $OUT && tar -czf all_logs.tgz *.log 2>/dev/null; ls
