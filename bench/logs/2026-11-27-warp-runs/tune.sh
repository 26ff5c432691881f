#!/usr/bin/env bash
# Device call: the final build (run: bench, tests, liboptgen.so) beside base. [gpu] tests, pytest
# with the GPU, a tune of Adam's and AdamW's 8-bit sets merged into the H100 table, then base (old
# table) and run (merged table) alternately.
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1; cat "$out/gpu.txt"
mkdir -p base build-run && tar -C base -xJf .carry/base.tar.xz && tar -C build-run -xJf .carry/final.tar.xz
export OPTGEN_CACHE_DIR=/tmp/kcache
S="f32:q8:exp_avg_sq=uq8,bf16:q8:exp_avg_sq=uq8"
start=$(date +%s)
if [ -z "${SKIP_TESTS:-}" ]; then
  OUT=$out bash scripts/gpu_session.sh tests python > "$out/session.log" 2>&1
  echo "tests+python rc=$? ($(( $(date +%s) - start )) s)"; grep -E "test cases|passed|failed|skipped" "$out/session.log" | tail -8
fi
[ -n "${TESTS_ONLY:-}" ] && exit 0
LD_LIBRARY_PATH=$PWD/build-run build-run/optgen_bench --workload-dir base/workloads --workloads ghostnet_100,resnet50,gpt2,llama-1b \
  --optimizers adam,adamw --storage "$S" --launch-shapes ${TUNE_SHAPES:-128x8,64x8,32x8} --chunk-sizes 4096,8192,16384,32768,65536 \
  --tune "$out/tuning8.json" > "$out/tune8.log" 2>&1
echo "tune rc=$? ($(( $(date +%s) - start )) s)"
python3 - "$out/tuning8.json" tuning/nvidia-h100-80gb-hbm3.json "$out/merged.json" <<'PY'
import json, sys
new, old = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k, v in new["kernels"].items():
    print(k, [(e["elements"], e["chunk_size"], e["block_size"]) for e in old["kernels"].get(k, [])], "->",
          [(e["elements"], e["chunk_size"], e["block_size"]) for e in v])
    old["kernels"][k] = v
json.dump(old, open(sys.argv[3], "w"), indent=2)
PY
LD_LIBRARY_PATH=$PWD/base base/optgen_bench --workload-dir base/workloads --workloads ghostnet_100 --optimizers adam,adamw \
  --storage "$S" --launch-shapes 128x8,64x8,32x8 --modes eager --steps 2 > "$out/warm_base.log" 2>&1
for r in 1 2; do
  for b in base build-run; do
    tab=tuning/nvidia-h100-80gb-hbm3.json; [ $b = build-run ] && tab=$out/merged.json
    OPTGEN_TUNING=$tab LD_LIBRARY_PATH=$PWD/build-run $b/optgen_bench --workload-dir base/workloads \
      --workloads ghostnet_100,resnet50,gpt2,bert-base,llama-1b --optimizers adam,adamw --storage "$S" --modes eager --steps 20 \
      > "$out/verify_${b}_$r.log" 2>&1
    echo "== $b round $r ($(( $(date +%s) - start )) s)"; grep "| eager" "$out/verify_${b}_$r.log" | awk -F'|' '{print $2,$5,$6,$7,$8,$10,$11,$14}'
  done
done
echo "total: $(( $(date +%s) - start )) s"
