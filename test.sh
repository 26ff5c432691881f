#!/usr/bin/env bash
# Builds optgen with its tests and runs them all: ctest, then the Python package installed with pip
# into BUILD_DIR/venv and its tests (pytest tests/python). Installs missing Debian packages first
# (needs root or sudo) and the Python packages from PyPI. Usage: ./test.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")"
source scripts/common.sh
build_dir=${1:-build}

install_test_dependencies
configure_and_build "$build_dir" -DOPTGEN_BUILD_TESTS=ON
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)"
install_python_package "$build_dir" OPTGEN_BUILD_TESTS=ON
"$build_dir/venv/bin/python" -m pytest -q -rs tests/python
