#!/usr/bin/env bash
# The main job: build optgen, then check and emit every built-in spec.
# Installs missing Debian packages first (needs root or sudo). Usage: ./build.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")"
source scripts/common.sh
build_dir=${1:-build}

install_dependencies
configure_and_build "$build_dir" -DOPTGEN_BUILD_TESTS=OFF

echo "== optgen check specs/*.yaml"
"$build_dir/generator/optgen" check specs/*.yaml
echo "== optgen emit specs/*.yaml --out $build_dir/generated/reference"
"$build_dir/generator/optgen" emit specs/*.yaml --out "$build_dir/generated/reference"
ls "$build_dir/generated/reference"
echo "CUDA kernels, launchers and the GPU example are not generated yet (see README: status)."
