#!/usr/bin/env bash
# Device call: bench-only builds (BUILDS, each .carry/NAME.tar.xz; build-run from final.tar.xz)
# benched alternately, AdamW with 8-bit states, eager, the same table (TAB).
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1; cat "$out/gpu.txt"
B=${BUILDS:-build-run dep2}
mkdir -p base && tar -C base -xJf .carry/base.tar.xz
for b in $B; do mkdir -p $b; t=$b; [ $b = build-run ] && t=final; tar -C $b -xJf .carry/$t.tar.xz; done
export OPTGEN_CACHE_DIR=/tmp/kcache
S=${S:-f32:q8:exp_avg_sq=uq8,bf16:q8:exp_avg_sq=uq8}
TAB=${TAB:-tuning/nvidia-h100-80gb-hbm3.json}
W=${WL:-gpt2,bert-base,llama-1b}
start=$(date +%s)
for b in $B; do
  LD_LIBRARY_PATH=$PWD/base $b/optgen_bench --workload-dir base/workloads --workloads ghostnet_100 --optimizers adamw \
    --storage "$S" --launch-shapes 128x8,64x8,32x8 --modes eager --steps 2 > "$out/warm_$b.log" 2>&1 &
done
wait
echo "warm: $(( $(date +%s) - start )) s"
for r in ${ROUNDS:-1 2}; do
  for b in $B; do
    OPTGEN_TUNING=$TAB LD_LIBRARY_PATH=$PWD/base $b/optgen_bench --workload-dir base/workloads --workloads $W \
      --optimizers adamw --storage "$S" --modes eager --steps 20 > "$out/bench_${b}_$r.log" 2>&1
    echo "== $b round $r ($(( $(date +%s) - start )) s)"; grep "| eager" "$out/bench_${b}_$r.log" | awk -F'|' '{print $2,$6,$7,$8,$10,$11,$14}'
  done
done
echo "total: $(( $(date +%s) - start )) s"
