#!/usr/bin/env bash
# Device call: [gpu] tests and pytest on build-run (final.tar.xz), then base (base.tar.xz) and
# build-run benched alternately, AdamW (OPT) with 8-bit states, eager, the same table (TAB).
set -u
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1; cat "$out/gpu.txt"
mkdir -p base build-run && tar -C base -xJf .carry/base.tar.xz && tar -C build-run -xJf .carry/final.tar.xz
export OPTGEN_CACHE_DIR=/tmp/kcache
S=${S:-f32:q8:exp_avg_sq=uq8,bf16:q8:exp_avg_sq=uq8}
OPT=${OPT:-adamw}
TAB=${TAB:-tuning/nvidia-h100-80gb-hbm3.json}
W=${WL:-gpt2,bert-base,llama-1b}
start=$(date +%s)
if [ -z "${SKIP_TESTS:-}" ]; then
  OUT=$out bash scripts/gpu_session.sh tests python > "$out/session.log" 2>&1
  echo "tests+python rc=$? ($(( $(date +%s) - start )) s)"; grep -E "test cases|passed|failed|skipped" "$out/session.log" | tail -8
fi
[ -n "${TESTS_ONLY:-}" ] && exit 0
for b in base build-run; do
  LD_LIBRARY_PATH=$PWD/base $b/optgen_bench --workload-dir base/workloads --workloads ghostnet_100 --optimizers $OPT \
    --storage "$S" --launch-shapes 128x8,64x8,32x8 --modes eager --steps 2 > "$out/warm_$b.log" 2>&1 &
done
wait
echo "warm: $(( $(date +%s) - start )) s"
for r in ${ROUNDS:-1 2}; do
  for b in base build-run; do
    OPTGEN_TUNING=$TAB LD_LIBRARY_PATH=$PWD/base $b/optgen_bench --workload-dir base/workloads --workloads $W \
      --optimizers $OPT --storage "$S" --modes eager --steps 20 > "$out/bench_${b}_$r.log" 2>&1
    echo "== $b round $r ($(( $(date +%s) - start )) s)"; grep "| eager" "$out/bench_${b}_$r.log" | awk -F'|' '{print $2,$5,$6,$7,$8,$10,$11,$14}'
  done
done
echo "total: $(( $(date +%s) - start )) s"
