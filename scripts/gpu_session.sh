#!/usr/bin/env bash
# One call on the GPU machine: runs what was built here (nothing is built there) and writes logs
# under $OUT. Usage (from the repository root, with build-gpu/ carried):
#   scripts/gpu_session.sh [TEST_FILTER] [BENCH_ARGS...]
set -uo pipefail
out=${OUT:-/tmp/optgen_out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
filter=${1:-[gpu]}
shift || true
echo "== optgen_tests $filter"
./build-gpu/optgen_tests "$filter" 2>&1 | tee "$out/gpu_tests.log" | tail -40
status=${PIPESTATUS[0]}
if [ -x build-gpu/optgen_bench ] && [ $# -gt 0 ]; then
  echo "== optgen_bench $*"
  ./build-gpu/optgen_bench "$@" 2>&1 | tee "$out/bench.log" | tail -40
fi
exit "$status"
