#!/usr/bin/env bash
# The main job: build optgen (the generator, the runtime, and a launcher library for every
# built-in spec, its kernels generated and compiled with NVRTC during the build), check the
# built-in specs, install optgen into BUILD_DIR/install, install the Python package into the
# virtual environment BUILD_DIR/venv, build the example application (examples/) against the
# install, and run it when there is a GPU.
# Installs missing Debian packages first (needs root or sudo). Usage: ./build.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")"
source scripts/common.sh
build_dir=${1:-build}

install_dependencies
echo "== building optgen into $build_dir: the generator, the runtime, and each built-in spec generated"
echo "   (kernels, launcher, CPU reference) and its kernels compiled with NVRTC"
configure_and_build "$build_dir" -DOPTGEN_BUILD_TESTS=OFF

echo "== optgen check specs/*.yaml"
"$build_dir/generator/optgen" check specs/*.yaml
echo "== the built-in launcher libraries, generated sources in $build_dir/specs/optgen_<spec>_generated/"
ls "$build_dir"/specs/liboptgen_*

install_prefix="$(cd "$build_dir" && pwd)/install"
echo "== installing optgen into $install_prefix"
cmake --install "$build_dir" --prefix "$install_prefix"

install_python_package "$build_dir"
echo "== the Python package: $build_dir/venv/bin/python -c 'import optgen.torch' (with torch installed there)"
"$build_dir/venv/bin/python" -c "import optgen; print('optgen', optgen.version(), 'built-in:', *optgen.builtin_specs())"

# The examples are a separate CMake project that finds the installed optgen. nvcc compiles
# mlp.cu: name it when it is not on PATH.
examples_dir="$build_dir/examples"
cuda_hint=()
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  cuda_hint=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCUDAToolkit_ROOT=/usr/local/cuda)
fi
echo "== building examples/ in $examples_dir against the installed optgen"
cmake -S examples -B "$examples_dir" -Doptgen_DIR="$install_prefix/lib/cmake/optgen" "${cuda_hint[@]}"
cmake --build "$examples_dir" -j "$(nproc)"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  for optimizer in adamw adabelief; do
    echo "== $examples_dir/mlp --optimizer $optimizer"
    "$examples_dir/mlp" --optimizer "$optimizer"
  done
else
  echo "no GPU (nvidia-smi found none): the example was built but not run"
fi
