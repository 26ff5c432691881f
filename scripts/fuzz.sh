#!/usr/bin/env bash
# Fuzzes optgen's spec pipeline (load, lower, passes, every emitter) with libFuzzer, then checks
# that the specs `optgen check` accepts among those the run produced compile (NVRTC and the host
# compiler). Exits non-zero on any finding. Installs missing Debian packages first (needs root or
# sudo). Usage: scripts/fuzz.sh [SECONDS] [BUILD_DIR]      (defaults: 20, build-fuzz)
#
#   SECONDS     how long libFuzzer runs (CI's smoke run: a few seconds; a long run: 1800 or more)
#   BUILD_DIR   the fuzzing build, a CMake configure of its own with clang: BUILD_DIR/findings/
#               holds what was found, BUILD_DIR/corpus/ the corpus saved across runs
#
# Environment: OPTGEN_FUZZ_FLAGS (more libFuzzer flags, e.g. "-fork=8" or "-only_ascii=1"),
# OPTGEN_FUZZ_MAX_COMPILED (how many accepted specs the property check compiles; default
# 8 + SECONDS / 20, about 3 seconds each), OPTGEN_FUZZ_CORPUS (the saved corpus; default
# BUILD_DIR/corpus), OPTGEN_FUZZ_SAMPLE_RATE (the fuzz target saves one in that many accepted
# inputs for the property check; default 16).
#
# Why a CMake configure (OPTGEN_BUILD_FUZZER=ON, CMAKE_CXX_COMPILER=clang++) and not one clang++
# command line: the generator's sources, the runtime's, the embedded templates and the yaml-cpp
# and CUDA paths are all known to CMake already; a command line would repeat those lists and drift
# from them. The configure builds only the runtime, the generator and tests/fuzz, in a directory
# of its own, everything instrumented for libFuzzer with ASan and UBSan at -O1 -g.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh
seconds=${1:-20}
build_dir=${2:-build-fuzz}
case $seconds in '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS] [BUILD_DIR]" >&2; exit 2 ;; esac
max_compiled=${OPTGEN_FUZZ_MAX_COMPILED:-$((8 + seconds / 20))}

install_fuzz_dependencies
mkdir -p "$build_dir"
echo "== building the spec fuzzer into $build_dir (clang, libFuzzer, ASan, UBSan; log: $build_dir/build.log)"
configure_and_build "$build_dir" -DOPTGEN_BUILD_FUZZER=ON -DCMAKE_CXX_COMPILER=clang++ > "$build_dir/build.log" 2>&1 \
  || { tail -n 60 "$build_dir/build.log"; echo "fuzz.sh: the fuzzing build failed (log: $build_dir/build.log)" >&2; exit 2; }
fuzzer=$build_dir/tests/fuzz/optgen_spec_fuzzer
spec_compiles=$build_dir/tests/fuzz/optgen_spec_compiles

# The run's own corpus, fresh each time: the seeds, copied (not kept twice in git). libFuzzer
# writes what it finds into the first corpus directory, so the saved corpus is only read.
run_dir=$build_dir/run
findings=$build_dir/findings
saved_corpus=${OPTGEN_FUZZ_CORPUS:-$build_dir/corpus}
rm -rf "$run_dir"
mkdir -p "$run_dir/corpus" "$run_dir/sample" "$findings"
cp specs/*.yaml examples/*.yaml tests/specs/*.yaml tests/bad_specs/*.yaml tests/fuzz/seeds/*.yaml "$run_dir/corpus/"
corpora=("$run_dir/corpus")
[ -d "$saved_corpus" ] && corpora+=("$saved_corpus")
touch "$run_dir/started"

# A finding stops the run: libFuzzer writes the input as BUILD_DIR/findings/crash-<sha1> (also
# leak-, timeout-, oom-) and exits non-zero. -timeout: an input running 10 s is a hang.
echo "== fuzzing for ${seconds}s: corpus ${corpora[*]} (log: $run_dir/fuzz.log)"
status=0
# shellcheck disable=SC2086
OPTGEN_FUZZ_SAMPLE_DIR=$run_dir/sample UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
  "$fuzzer" -dict=tests/fuzz/spec.dict -max_len=16384 -timeout=10 -max_total_time="$seconds" \
    -artifact_prefix="$findings/" -print_final_stats=1 ${OPTGEN_FUZZ_FLAGS:-} "${corpora[@]}" \
    > "$run_dir/fuzz.log" 2>&1 || status=$?
executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$run_dir/fuzz.log" | tail -n 1)
# With -fork, libFuzzer prints no stats; its last progress line ("#N: cov: ...") counts them.
executions=${executions:-$(sed -n 's/^#\([0-9]*\): .*/\1/p' "$run_dir/fuzz.log" | tail -n 1)}
if [ "$status" -ne 0 ]; then
  tail -n 80 "$run_dir/fuzz.log"
  echo "== the fuzzer found something (exit status $status); reproduce with: $fuzzer FILE"
else
  grep -E '^(stat::|Done )' "$run_dir/fuzz.log" || true
  echo "== ${executions:-?} executions in ${seconds}s, no finding; the run's corpus: $(ls "$run_dir/corpus" | wc -l) inputs"
  # Keep what this run learnt for the next: merge adds the inputs with new coverage.
  mkdir -p "$saved_corpus"
  "$fuzzer" -merge=1 "$saved_corpus" "$run_dir/corpus" > "$run_dir/merge.log" 2>&1 \
    || echo "fuzz.sh: warning: merging into $saved_corpus failed (log: $run_dir/merge.log)"
fi

# The property check, on at most max_compiled accepted specs, taken in turn from the fuzz target's
# sample of accepted inputs (varied names and text, which coverage does not reward) and from the
# corpus (varied structure), newest first: what this run found comes before the seeds, which
# ctest compiles anyway.
echo "== property check: accepted specs compile (NVRTC for sm_90, host ${CXX:-c++}), at most $max_compiled of them"
compile_status=0
ls -t "$run_dir"/sample > "$run_dir/sample.list"
ls -t "$run_dir"/corpus > "$run_dir/corpus.list"
paste -d '\n' <(sed "s|^|$run_dir/sample/|" "$run_dir/sample.list") <(sed "s|^|$run_dir/corpus/|" "$run_dir/corpus.list") \
  | ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} "$spec_compiles" --arch 90 --cxx "${CXX:-c++}" \
      --max-accepted "$max_compiled" --findings "$findings" --from - > "$run_dir/spec_compiles.log" 2>&1 \
  || compile_status=$?
grep -avE '^(ok|stopping) ' "$run_dir/spec_compiles.log" | tail -n 200 || true

new_findings=$(find "$findings" -type f -newer "$run_dir/started" | sort)
if [ "$status" -ne 0 ] || [ "$compile_status" -ne 0 ]; then
  echo "== findings (in $findings):"
  echo "${new_findings:-  (none saved: see the logs above)}"
  exit 1
fi
echo "== fuzz.sh: no finding (${executions:-?} executions)"
