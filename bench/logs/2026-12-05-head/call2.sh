#!/usr/bin/env bash
# GPU call at HEAD: AdamW's storage figures, Adam/clipped/LAMB/Adafactor/Adam-mini/Prodigy, then the
# [gpu] shards whose logs the first call could not bring back.
set -u
[ -x build-run/optgen_bench ] || tar -xJf build-pack/head.tar.xz
mkdir -p /work && ln -sfn "$PWD" /work/main 2>/dev/null
export LD_LIBRARY_PATH=$PWD/build-run
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
b="build-run/optgen_bench --workload-dir build-run/workloads --modes eager --steps 20 --host-tensors 0 --host-matrices 0"
{
$b --workloads gpt2,llama-1b,bert-base --optimizers adamw --storage f32,bf16,bf16:bf16,f32:q8:exp_avg_sq=uq8,bf16:q8:exp_avg_sq=uq8
$b --workloads gpt2,llama-1b --optimizers adam,adamw_clip,lamb
$b --workloads ghostnet_100 --optimizers adam,adamw_clip,lamb,adafactor
$b --workloads gpt2,llama-1b,bert-base --optimizers adafactor,adam_mini,prodigy
} > $OUT/bench.log 2>&1
echo "bench rc=$? elapsed $SECONDS"
grep -E "^\| [a-z]" $OUT/bench.log | grep -v "| workload" | awk -F"|" "{print \$2,\$5,\$6,\$10,\$11,\$13}"
names=$(mktemp -d)
build-run/optgen_tests --list-test-names-only "[gpu]" | sed '/^$/d; s/[],[\\]/\\&/g' > $names/all
wc -l < $names/all
split -n r/8 $names/all $names/shard_
for s in $names/shard_f $names/shard_g $names/shard_h; do build-run/optgen_tests -f $s -d yes > $OUT/$(basename $s).log 2>&1 & done; wait
for s in f g h; do tail -3 $OUT/shard_$s.log | grep -E "passed|failed"; done
echo "elapsed $SECONDS"
