#!/usr/bin/env bash
# One call on the GPU machine: runs what was built here (nothing is built there) and writes logs
# under $OUT. Usage, from the repository root, with build-run/ carried (bench/README.md says how
# to fill it):
#   scripts/gpu_session.sh [tests] [bench] [compare]     (default: tests bench)
#
#   record   records what needs torch into tests/data and $OUT/data: clip_grad_norm_ then a step
#            (tests/record_clipping.py), LAMB as APEX computes it (tests/record_lamb.py), torch.optim.Muon
#            with its Newton-Schulz in float32 (tests/record_torch_muon_f32.py)
#   tests    records torch's fused optimizers under AMP (tests/record_amp_trajectories.py, into
#            tests/data/amp and $OUT/amp), then runs the [gpu] tests, in OPTGEN_TEST_SHARDS processes
#            at once (default 8; $OUT/gpu_tests_<i>.log), and the [torch] tests
#   nccl     the two-GPU test of the reduction hook (tests/distributed_test.cpp), with torch's NCCL
#   bench    optgen_bench (eager, graph and AMP steps; host time) and, when build-run holds it, the
#            benchmark built from an earlier commit (optgen_bench_base), on the same workloads
#   compare  bench/torch_compare.py: optgen beside torch's fused AdamW, eager, in a CUDA graph and
#            under AMP
#   compare8 bench/compare_8bit.py: optgen's 8-bit AdamW beside bitsandbytes' and torchao's AdamW8bit
#            (their packages unpacked into .pylibs/ and carried: bench/README.md says how)
#   storage  optgen_bench over storage types (8-bit states among them), AdamW, eager
#   tune     optgen_bench --tune (a table of chunk sizes and launch shapes for this GPU,
#            $OUT/tuning.json; OPTGEN_TUNE_SHAPES, OPTGEN_TUNE_CHUNKS), then the
#            same steps with it (OPTGEN_TUNING); OPTGEN_TUNE_WORKLOADS, OPTGEN_STORAGE choose
#   master   bench/compare_master.py: optgen's AdamW with an fp32 master copy of bf16 params beside
#            torch's fused AdamW on fp32 and on bf16 params
#   compare_clip  the same for clip_grad_norm_(foreach) + AdamW against optgen's max_grad_norm
#   muon     bench/torch_muon.py: optgen.torch.Muon (eager, in a CUDA graph, without the products)
#            beside torch.optim.Muon, and with AdamW on the rest, on gpt2 and llama-1b; then
#            optgen_newton_schulz_bench (the iteration alone)
#   adafactor bench/torch_adafactor.py: optgen.torch.Adafactor (eager and in a CUDA graph) beside
#            torch.optim.Adafactor (for-loop and foreach) on every workload of bench/workloads
#   adafactor_compile  the same beside torch.compile'd torch.optim.Adafactor (fullgraph if it compiles)
#   python   the Python package's tests (pytest tests/python: the GPU ones against torch.optim and,
#            from .pylibs/ when carried, prodigyopt, dadaptation, schedulefree and adam_mini), on
#            build-run/liboptgen.so and the sources in python/
#   pystep   bench/python_step.py: host and GPU time of optgen.torch's step() beside torch fused
#   examples examples/python/run_gpu.sh: real training, optgen.torch beside torch (JSON in $OUT)
#   wheel    the wheel in build-pack/wheel/ (carried; scripts/build_wheel.sh made it) installed into a
#            new environment that sees the system's torch, no source tree, no OPTGEN_LIBRARY: the
#            Python tests (GPU ones included) and examples/python against it (scripts/test_wheel.sh;
#            logs in $OUT/wheel)
#   fsdp2    examples/python/run_gpu.sh fsdp2: optgen.torch against torch on FSDP2 shards (2 GPUs)
#   ranks    tests/python/test_torch_ranks_gpu.py (DTensor shards of two ranks: NCCL on two GPUs,
#            gloo on one), then bench/sharded_step.py on llama-1b on one GPU and on every GPU
#   sweep    every build-run/optgen_bench_<tuning> (built with OPTGEN_BUILTIN_OPTIONS, see
#            bench/README.md) and optgen_bench, over chunk sizes: a tuning sweep
set -uo pipefail
out=${OUT:-/tmp/optgen_out}
mkdir -p "$out"
# What was built here: build-run, or another folder (OPTGEN_RUN) when the carry limit splits it.
run=${OPTGEN_RUN:-build-run}
# liboptgen.so needs libyaml-cpp.so.0.7, which the GPU machine lacks: build-run carries it (the
# wheel bundles its own, and its step runs without this).
library_path_before=${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH="$PWD/$run${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The test binary reads tests/data through the source path it was built in (OPTGEN_SOURCE_DIR).
source_dir=${OPTGEN_BUILT_IN:-/work/main}
if [ ! -e "$source_dir" ]; then
  mkdir -p "$(dirname "$source_dir")" && ln -s "$PWD" "$source_dir"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
status=0

# Runs the test cases that match the filter $1 in OPTGEN_TEST_SHARDS processes at once (a cold run
# is mostly NVRTC compiling test specs, one thread a process: one process took over 10 minutes),
# each case in one process, which writes $2_<i>.log; prints each process's summary and their sum.
# Fails if a case failed. Catch2 2 reads the names from a file, with commas and brackets escaped.
run_in_shards() {
  local filter=$1 prefix=$2 names i=0 failed=0 pids=() log shard
  names=$(mktemp -d)
  "$run/optgen_tests" --list-test-names-only "$filter" | sed '/^$/d; s/[],[\\]/\\&/g' > "$names/all"
  split -n "r/${OPTGEN_TEST_SHARDS:-8}" "$names/all" "$names/shard_"
  for shard in "$names"/shard_*; do
    "$run/optgen_tests" -f "$shard" -d yes > "${prefix}_$i.log" 2>&1 &
    pids+=($!)
    i=$((i + 1))
  done
  for pid in "${pids[@]}"; do
    wait "$pid"
    case $? in 0 | 4) ;; *) failed=1 ;; esac  # 4: every case of the process skipped (tests/main.cpp)
  done
  for log in "$prefix"_*.log; do
    echo "$(basename "$log"): $(grep -E '^(All tests passed|test cases:)' "$log" | tail -1)"
  done
  # Catch2 2 ends a run with "All tests passed (A assertions in C test cases)", or with
  # "test cases: C | ..." and "assertions: A | ..." where one failed.
  awk '/^All tests passed/ { gsub(/[()]/, ""); a += $4; c += $7 }
       /^test cases:/ { c += $3 } /^assertions:/ { a += $2 }
       END { print "all processes: " c " test cases, " a " assertions" }' "$prefix"_*.log
  rm -rf "$names"
  return "$failed"
}
steps=${*:-tests bench}
for what in $steps; do
  case $what in
    record)
      echo "== record_clipping.py, record_lamb.py, record_torch_muon_f32.py"
      (cd tests && python3 record_clipping.py --out data/clipping && python3 record_lamb.py --out data/published &&
        python3 record_torch_muon_f32.py --out data/torch_f32) 2>&1 | tee "$out/record.log"
      mkdir -p "$out/data" && tar -C tests -cf "$out/data/recorded.tar" data/clipping data/published data/torch_f32
      ;;
    nccl)
      echo "== optgen_tests [nccl]"
      # NVLink multicast stays off (it can take a shared host's GPUs out of service).
      export NCCL_NVLS_ENABLE=0
      OPTGEN_NCCL="$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))')" \
        "$run/optgen_tests" "[nccl]" 2>&1 | tee "$out/nccl.log" | tail -25
      status=$((status | PIPESTATUS[0]))
      ;;
    tests)
      echo "== record_amp_trajectories.py"
      python3 tests/record_amp_trajectories.py --out tests/data/amp 2>&1 | tee "$out/record_amp.log"
      mkdir -p "$out/amp" && cp tests/data/amp/*.json "$out/amp/"
      echo "== optgen_tests [gpu]"
      run_in_shards "[gpu]" "$out/gpu_tests"
      status=$((status | $?))
      echo "== optgen_tests [torch]"
      "$run/optgen_tests" "[torch]" 2>&1 | tail -6
      ;;
    bench)
      workloads=ghostnet_100,resnet50,gpt2,llama-1b
      echo "== optgen_bench"
      "$run/optgen_bench" --workload-dir "$run/workloads" --workloads "$workloads" --optimizers adam,adamw,sgd,adamw_clip,lamb,lamb_clip \
        --modes eager,graph,amp 2>&1 | tee "$out/bench.log" | tail -60
      if [ -x "$run/optgen_bench_base" ]; then
        echo "== optgen_bench_base (the earlier commit)"
        "$run/optgen_bench_base" --workload-dir "$run/workloads" --workloads "$workloads" --optimizers adam,adamw,sgd \
          2>&1 | tee "$out/bench_base.log" | tail -20
      fi
      ;;
    compare)
      echo "== torch_compare.py"
      PYTHONUNBUFFERED=1 python3 bench/torch_compare.py --lib "$run/liboptgen_builtin.so" --workload-dir "$run/workloads" \
        --workloads ghostnet_100 gpt2 llama-1b --optimizers adamw --skip-compile \
        --methods optgen optgen_graph optgen_amp fused fused_graph fused_amp fused_scaler \
        --out "$out/compare.json" 2>&1 | tee "$out/compare.log" | tail -40
      ;;
    compare8)
      echo "== compare_8bit.py"
      PYTHONPATH="$PWD/.pylibs${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 python3 bench/compare_8bit.py \
        --lib "$run/liboptgen_builtin.so" --workload-dir "$run/workloads" ${OPTGEN_COMPARE8_ARGS:-} \
        --out "$out/compare_8bit.json" 2>&1 | tee "$out/compare_8bit.log" | tail -40
      status=$((status | PIPESTATUS[0]))
      ;;
    storage)
      echo "== optgen_bench, storage types"
      "$run/optgen_bench" --workload-dir "$run/workloads" --workloads ghostnet_100,resnet50,gpt2,bert-base,llama-1b \
        --optimizers adamw --modes eager --host-tensors 0 \
        --storage "${OPTGEN_STORAGE:-f32,bf16,bf16:bf16,bf16+master,f32:q8:exp_avg_sq=uq8,bf16:q8:exp_avg_sq=uq8}" \
        2>&1 | tee "$out/bench_storage.log" | tail -40
      status=$((status | PIPESTATUS[0]))
      ;;
    tune)
      # Each kernel set's fastest chunk size and launch shape per workload size, written to
      # $out/tuning.json (optgen/tuning.h); then the same steps with that table (OPTGEN_TUNING) at
      # the default chunk and shape.
      workloads=${OPTGEN_TUNE_WORKLOADS:-ghostnet_100,resnet50,gpt2,llama-1b}
      storage=${OPTGEN_STORAGE:-f32,bf16,bf16:bf16,f32:q8:exp_avg_sq=uq8,bf16:q8:exp_avg_sq=uq8}
      shapes=${OPTGEN_TUNE_SHAPES:-default,128x8,512x8}
      chunks=${OPTGEN_TUNE_CHUNKS:-1024,2048,4096,8192,16384,32768,65536}
      echo "== optgen_bench --tune"
      "$run/optgen_bench" --workload-dir "$run/workloads" --workloads "$workloads" --optimizers adam,adamw \
        --storage "$storage" --launch-shapes "$shapes" --chunk-sizes "$chunks" --steps 20 --host-tensors 0 \
        --tune "$out/tuning.json" 2>&1 | tee "$out/tune.log" | tail -45
      status=$((status | PIPESTATUS[0]))
      echo "== optgen_bench, OPTGEN_TUNING=tuning.json"
      OPTGEN_TUNING="$out/tuning.json" "$run/optgen_bench" --workload-dir "$run/workloads" --workloads "$workloads" \
        --optimizers adam,adamw --storage "$storage" --modes eager --host-tensors 0 2>&1 | tee "$out/tuned.log" | tail -45
      status=$((status | PIPESTATUS[0]))
      ;;
    master)
      echo "== compare_master.py"
      PYTHONUNBUFFERED=1 python3 bench/compare_master.py --lib "$run/liboptgen_builtin.so" --workload-dir "$run/workloads" \
        --out "$out/compare_master.json" 2>&1 | tee "$out/compare_master.log" | tail -20
      status=$((status | PIPESTATUS[0]))
      ;;
    compare_clip)
      echo "== torch_compare.py, clipped AdamW"
      PYTHONUNBUFFERED=1 python3 bench/torch_compare.py --lib "$run/liboptgen_builtin.so" --workload-dir "$run/workloads" \
        --workloads ghostnet_100 gpt2 llama-1b --optimizers adamw_clip --skip-compile --steps 20 --reps 3 \
        --methods optgen optgen_graph foreach fused fused_graph \
        --out "$out/compare_clip.json" 2>&1 | tee "$out/compare_clip.log" | tail -30
      ;;
    muon)
      echo "== torch_muon.py, optgen_newton_schulz_bench"
      OPTGEN_LIBRARY="$run/liboptgen.so" PYTHONPATH=python PYTHONUNBUFFERED=1 python3 bench/torch_muon.py --breakdown \
        --with-adamw --workload-dir "$run/workloads" --out "$out/muon.json" 2>&1 | tee "$out/muon.log" | tail -20
      status=$((status | PIPESTATUS[0]))
      "$run/optgen_newton_schulz_bench" --workload-dir "$run/workloads" 2>&1 | tee "$out/newton_schulz.log"
      status=$((status | PIPESTATUS[0]))
      ;;
    adafactor)
      echo "== torch_adafactor.py"
      OPTGEN_LIBRARY="$run/liboptgen.so" PYTHONPATH=python PYTHONUNBUFFERED=1 python3 bench/torch_adafactor.py \
        --methods optgen optgen_graph forloop foreach --out "$out/adafactor.json" 2>&1 | tee "$out/adafactor.log" |
        tail -30
      status=$((status | PIPESTATUS[0]))
      ;;
    adafactor_compile)
      echo "== torch_adafactor.py, torch.compile"
      OPTGEN_LIBRARY="$run/liboptgen.so" PYTHONPATH=python PYTHONUNBUFFERED=1 python3 bench/torch_adafactor.py \
        --methods optgen compile --steps 20 --reps 3 --out "$out/adafactor_compile.json" 2>&1 |
        tee "$out/adafactor_compile.log" | tail -30
      status=$((status | PIPESTATUS[0]))
      ;;
    python)
      echo "== pytest tests/python"
      # .pylibs: the published optimizers some tests compare with (prodigyopt, dadaptation, schedulefree,
      # adam_mini), when carried.
      OPTGEN_LIBRARY="$run/liboptgen.so" PYTHONPATH="python:$PWD/.pylibs" python3 -m pytest -q -rs tests/python 2>&1 |
        tee "$out/pytest.log" | tail -30
      status=$((status | PIPESTATUS[0]))
      ;;
    pystep)
      echo "== bench/python_step.py"
      OPTGEN_LIBRARY="$run/liboptgen.so" PYTHONPATH=python python3 bench/python_step.py --out "$out/python_step.json" \
        2>&1 | tee "$out/python_step.log"
      ;;
    examples)
      echo "== examples/python/run_gpu.sh"
      OPTGEN_LIBRARY="$run/liboptgen.so" PYTHONPATH=python bash examples/python/run_gpu.sh "$out/examples" 2>&1 |
        tee "$out/examples.log" | tail -30
      status=$((status | PIPESTATUS[0]))
      ;;
    wheel)
      echo "== scripts/test_wheel.sh --offline --examples build-pack/wheel/optgen-*.whl"
      LD_LIBRARY_PATH="$library_path_before" scripts/test_wheel.sh --offline --examples build-pack/wheel/optgen-*.whl \
        "$out/wheel" 2>&1 |
        tee "$out/wheel.log" | tail -40
      status=$((status | PIPESTATUS[0]))
      ;;
    ranks)
      echo "== test_torch_ranks_gpu.py"
      OPTGEN_LIBRARY="$run/liboptgen.so" PYTHONPATH=python python3 -m pytest -q tests/python/test_torch_ranks_gpu.py \
        2>&1 | tee "$out/ranks.log" | tail -15
      status=$((status | PIPESTATUS[0]))
      gpus=$(nvidia-smi -L | wc -l)
      echo "== bench/sharded_step.py: one GPU, then $gpus"
      OPTGEN_LIBRARY="$run/liboptgen.so" PYTHONPATH=python python3 bench/sharded_step.py --out "$out/sharded1.json"
      if [ "$gpus" -gt 1 ]; then
        NCCL_NVLS_ENABLE=0 OPTGEN_LIBRARY="$run/liboptgen.so" PYTHONPATH=python \
          python3 -m torch.distributed.run --standalone --nproc_per_node "$gpus" bench/sharded_step.py \
          --out "$out/sharded$gpus.json"
      fi
      ;;
    fsdp2)
      echo "== examples/python/run_gpu.sh fsdp2"
      OPTGEN_LIBRARY="$run/liboptgen.so" PYTHONPATH=python bash examples/python/run_gpu.sh fsdp2 "$out/examples" \
        2>&1 | tee "$out/fsdp2.log" | tail -30
      status=$((status | PIPESTATUS[0]))
      ;;
    sweep)
      for bench in "$run"/optgen_bench "$run"/optgen_bench_*; do
        case $bench in *_base) continue ;; esac
        echo "== $(basename "$bench")"
        "$bench" --workload-dir "$run/workloads" --workloads ghostnet_100,resnet50,gpt2 --optimizers adam \
          --modes eager,graph --chunk-sizes 2048,4096,8192 --host-tensors 0 2>&1 | tee "$out/sweep_$(basename "$bench").log" | tail -19
      done
      ;;
    *) echo "unknown step '$what' (record, tests, nccl, bench, compare, compare8, storage, compare_clip, adafactor, adafactor_compile, python, pystep, examples, wheel, fsdp2, sweep)"; exit 2 ;;
  esac
done
exit "$status"
