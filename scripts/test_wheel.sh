#!/usr/bin/env bash
# Tests a wheel as a user gets it: installed into a new virtual environment, away from the source
# tree (the tests and the specs they read are copied to a temporary directory and run there, without
# python/, and OPTGEN_LIBRARY is unset). Runs pytest on tests/python (the GPU tests skip themselves without
# a GPU), then the `optgen` command on a spec. Logs go to LOG_DIR (default: the temporary directory).
#
# Usage: scripts/test_wheel.sh [--offline] [--examples] WHEEL [LOG_DIR]
#   --offline   for a machine without the package index (the GPU machine): pip installs the wheel
#               alone (--no-deps --no-index) into a directory of its own (--target), which python3,
#               with the system's packages (torch, the CUDA wheels, pytest), imports it from.
#               Without it, pip installs the wheel and pytest from the index into a new venv.
#   --examples  then examples/python/run_gpu.sh on the installed package (needs torch and a GPU):
#               LOG_DIR/examples/
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/common.sh

offline=0
examples=0
while [[ ${1:-} == --* ]]; do
  case $1 in
    --offline) offline=1 ;;
    --examples) examples=1 ;;
    *) echo "test_wheel.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
wheel=$(realpath "${1:?usage: scripts/test_wheel.sh [--offline] [--examples] WHEEL [LOG_DIR]}")
repo=$PWD
scratch=$(mktemp -d /tmp/optgen-wheel-test.XXXXXX)
logs=${2:-$scratch}
mkdir -p "$logs"
logs=$(realpath "$logs")
unset OPTGEN_LIBRARY PYTHONPATH

if [ $offline = 1 ]; then
  installed="$scratch/site"
  python3 -m pip install -q --disable-pip-version-check --no-index --no-deps \
    --target "$installed" "$wheel"
  export PYTHONPATH="$installed"
  python=python3
  bin="$installed/bin"
else
  installed="$scratch/venv"
  make_venv "$installed"
  "$installed/bin/python" -m pip install -q --disable-pip-version-check "$wheel" pytest
  python="$installed/bin/python"
  bin="$installed/bin"
fi
echo "== $(basename "$wheel") installed into $installed"

# What the tests read besides the package (specs, examples' specs, c_api.h), without python/.
mkdir -p "$scratch/root/runtime"
cp -r tests specs examples CMakeLists.txt "$scratch/root/"
cp -r runtime/include "$scratch/root/runtime/"
cd "$scratch/root"
# The package must be the installed one, with its own liboptgen.so.
"$python" - "$installed" <<'EOF'
import os, sys
import optgen
installed = os.path.realpath(sys.argv[1])
where = os.path.realpath(optgen.__file__)
assert where.startswith(installed + os.sep), f"optgen imported from {where}, not from {installed}"
assert os.path.realpath(optgen.library_path()).startswith(installed + os.sep), optgen.library_path()
print("optgen", optgen.version(), "from", os.path.dirname(where), "with", len(optgen.builtin_specs()), "built-in specs")
EOF

# Every check runs even when one fails; the exit status says whether any did.
set +e
status=0
echo "== pytest tests/python against the installed package"
"$python" -m pytest -q -rs -p no:cacheprovider tests/python 2>&1 | tee "$logs/wheel_pytest.log" | tail -30
status=$((status | PIPESTATUS[0]))

echo "== the optgen command"
{
  "$bin/optgen" --version
  "$bin/optgen" check "$repo/specs/adamw.yaml"
  "$bin/optgen" emit "$repo/specs/sgd.yaml" --out "$scratch/sgd"
  # NVRTC: the CUDA wheels' (what the package finds), else the toolkit's.
  "$python" -c 'from optgen import _cuda_wheels; print("NVRTC from the CUDA wheels:", _cuda_wheels.wheel_library("nvrtc"))'
  "$bin/optgen" compile "$repo/specs/sgd.yaml" --out "$scratch/sgd" --arch 90
  ls "$scratch/sgd"
} 2>&1 | tee "$logs/wheel_command.log"
status=$((status | PIPESTATUS[0]))

if [ $examples = 1 ]; then
  echo "== examples/python/run_gpu.sh against the installed package"
  PATH="$bin:$PATH" OPTGEN_INSTALLED=1 bash "$repo/examples/python/run_gpu.sh" "$logs/examples" | tail -30
  status=$((status | PIPESTATUS[0]))
fi

[ "$logs" = "$scratch" ] || rm -rf "$scratch"
exit "$status"
