#!/usr/bin/env bash
# GPU call: 8-bit AdamW at main (m), 3563240 (a), bc5004a (b: resident blocks), 3563240 without the
# fallback (c), once each; then the [gpu] and [torch] tests of branch three-blocks (47bd7c6).
set -u
mkdir -p build-run && tar -xJf build-pack/run.tar.xz -C build-run && tar -xJf build-pack/bench4.tar.xz -C build-run
mkdir -p /work && ln -sfn "$PWD" /work/main
export LD_LIBRARY_PATH=$PWD/build-run
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu_name.txt; cat $OUT/gpu_name.txt
w="--workload-dir build-run/workloads --modes eager --steps 20 --host-tensors 0 --host-matrices 0"
for v in m a b c; do
  echo "== $v" >> $OUT/bench.log
  timeout 100 build-run/$v/optgen_bench $w --workloads ghostnet_100,resnet50,gpt2,bert-base,llama-1b --optimizers adamw,adamw_clip --storage bf16:q8:exp_avg_sq=uq8,f32:q8:exp_avg_sq=uq8 >> $OUT/bench.log 2>&1
  echo "== $v amsgrad allq8" >> $OUT/bench.log
  timeout 40 build-run/$v/optgen_bench $w --workloads gpt2 --optimizers adamw_amsgrad --storage bf16:q8:exp_avg_sq=uq8,f32:q8:exp_avg_sq=uq8 >> $OUT/bench.log 2>&1
  timeout 40 build-run/$v/optgen_bench $w --workloads gpt2 --optimizers adamw --storage bf16:q8,f32:q8 >> $OUT/bench.log 2>&1
  echo "elapsed $SECONDS"
done
grep -E "^==|q8" $OUT/bench.log | awk -F'|' 'NF>5{print $2,$5,$6,$10,$13} NF<=5{print}'
if [ $SECONDS -lt 340 ]; then
  ( time OUT=$OUT timeout $((590 - SECONDS)) scripts/gpu_session.sh tests ) > $OUT/tests.log 2>&1
  echo "rc=$?" >> $OUT/tests.log
  tail -25 $OUT/tests.log
fi
cd $OUT && tar -czf all_logs.tgz *.log 2>/dev/null; ls
