#!/usr/bin/env bash
# Builds optgen with its tests and runs them all (ctest). Installs missing Debian packages first
# (needs root or sudo). Usage: ./test.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")"
source scripts/common.sh
build_dir=${1:-build}

install_test_dependencies
configure_and_build "$build_dir" -DOPTGEN_BUILD_TESTS=ON
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
