#!/usr/bin/env bash
# Device call: build-run (final.tar.xz) and runs (runs.tar.xz) alternately, AdamW 8-bit, eager,
# without a table for this GPU (the generator's 256x8) and with the H100 table.
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name --format=csv,noheader | tee "$out/gpu.txt"
[ -d base ] || { mkdir -p base && tar -C base -xJf .carry/base.tar.xz; }
for b in build-run runs; do t=$b; [ $b = build-run ] && t=final; mkdir -p $b && tar -C $b -xJf .carry/$t.tar.xz; done
printf '{\n  "device": "no such GPU",\n  "measured": "none",\n  "kernels": {\n  }\n}\n' > /tmp/none.json
export OPTGEN_CACHE_DIR=/tmp/kcache
S="f32:q8:exp_avg_sq=uq8,bf16:q8:exp_avg_sq=uq8"
start=$(date +%s)
for b in build-run runs; do
  LD_LIBRARY_PATH=$PWD/base $b/optgen_bench --workload-dir base/workloads --workloads ghostnet_100 --optimizers adamw \
    --storage "$S" --launch-shapes 128x8,64x8,32x8 --modes eager --steps 2 > "$out/warm_$b.log" 2>&1 &
done
wait
for r in 1 2; do
  for tab in none table; do
    T=/tmp/none.json; [ $tab = table ] && T=tuning/nvidia-h100-80gb-hbm3.json
    for b in build-run runs; do
      OPTGEN_TUNING=$T LD_LIBRARY_PATH=$PWD/base $b/optgen_bench --workload-dir base/workloads \
        --workloads ghostnet_100,resnet50,gpt2,bert-base,llama-1b --optimizers adamw --storage "$S" --modes eager --steps 20 \
        > "$out/runs_${tab}_${b}_$r.log" 2>&1
      echo "== $tab $b round $r ($(( $(date +%s) - start )) s)"; grep "| eager" "$out/runs_${tab}_${b}_$r.log" | awk -F'|' '{print $2,$6,$7,$8,$10,$11}'
    done
  done
done
