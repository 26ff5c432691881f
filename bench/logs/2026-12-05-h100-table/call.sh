#!/usr/bin/env bash
# Device call: the H100 table's 8-bit entries (measured 2026-11-27) against no table at HEAD, then a
# tune of Adam's and AdamW's 8-bit sets, then no table against the tune's entries merged in.
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
run=build-run; mkdir -p build-run && tar -C build-run -xJf build-pack/run.tar.xz
export LD_LIBRARY_PATH=$PWD/$run OPTGEN_CACHE_DIR=/tmp/kcache
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt"
S="f32:q8:exp_avg_sq=uq8,bf16:q8:exp_avg_sq=uq8"
W=ghostnet_100,resnet50,gpt2,bert-base,llama-1b
start=$(date +%s)
if grep -q H200 "$out/gpu.txt"; then
  # An H200: HEAD beside the range-check experiment (exact() always true), alternately.
  mkdir -p exp && tar -C exp -xJf build-pack/exp.tar.xz
  for r in 1 2; do
    for b in build-run exp; do
      $b/optgen_bench --workload-dir build-run/workloads --workloads gpt2,bert-base,llama-1b --optimizers adamw \
        --storage "$S" --modes eager --steps 20 --host-tensors 0 > "$out/checks_${b}_$r.log" 2>&1
      echo "== $b round $r rc=$? ($(( $(date +%s) - start )) s)"
      grep "| eager" "$out/checks_${b}_$r.log" | awk -F'|' '{print $2,$5,$6,$7,$8,$10,$11,$14}'
    done
  done
  exit 0
fi
bench() {  # $1 table (or none), $2 log name
  local env=()
  [ "$1" != none ] && env=(OPTGEN_TUNING="$1")
  env "${env[@]}" $run/optgen_bench --workload-dir $run/workloads --workloads $W --optimizers adam,adamw \
    --storage "$S" --modes eager --steps 20 --host-tensors 0 > "$out/$2.log" 2>&1
  echo "== $2 rc=$? ($(( $(date +%s) - start )) s)"
  grep "| eager" "$out/$2.log" | awk -F'|' '{print $2,$5,$6,$7,$8,$10,$11,$14}'
}
bench tuning/nvidia-h100-80gb-hbm3.json table_1
bench none none_1
if [ -n "${NO_TUNE:-}" ]; then
  bench tuning/nvidia-h100-80gb-hbm3.json table_2
  bench none none_2
  exit 0
fi
timeout ${TUNE_S:-140} $run/optgen_bench --workload-dir $run/workloads --workloads ghostnet_100,resnet50,gpt2,llama-1b \
  --optimizers adam,adamw --storage "$S" --launch-shapes default,128x8,64x8 --chunk-sizes 8192,16384,32768,65536 \
  --steps 20 --host-tensors 0 --tune "$out/tuning8.json" > "$out/tune8.log" 2>&1
echo "== tune rc=$? ($(( $(date +%s) - start )) s)"
[ -s "$out/tuning8.json" ] || exit 0
python3 - "$out/tuning8.json" tuning/nvidia-h100-80gb-hbm3.json "$out/merged.json" <<'PY'
import json, sys
new, old = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k, v in new["kernels"].items():
    print(k, [(e["elements"], e["chunk_size"], e["block_size"]) for e in old["kernels"].get(k, [])], "->",
          [(e["elements"], e["chunk_size"], e["block_size"]) for e in v])
    old["kernels"][k] = v
json.dump(old, open(sys.argv[3], "w"), indent=2)
PY
bench "$out/merged.json" merged_1
echo "total: $(( $(date +%s) - start )) s"
