# Shared by build.sh, test.sh and scripts/fuzz.sh: dependency installation and the CMake build.

# Debian packages optgen builds with. The CUDA toolkit (NVRTC, driver API headers) is not among
# them: it comes from NVIDIA's installer, and CMake stops with a message if it is missing.
OPTGEN_PACKAGES=(cmake g++ make libyaml-cpp-dev catch2 nlohmann-json3-dev libcli11-dev libxxhash-dev)

# What the tests need besides: clang-format checks the sources' format (test format.clang_format).
OPTGEN_TEST_PACKAGES=(clang-format)

# What scripts/fuzz.sh needs besides: clang with libFuzzer and the sanitizers' runtimes.
OPTGEN_FUZZ_PACKAGES=(clang libclang-rt-dev)

install_dependencies() {
  install_packages "${OPTGEN_PACKAGES[@]}"
}

install_test_dependencies() {
  install_packages "${OPTGEN_PACKAGES[@]}" "${OPTGEN_TEST_PACKAGES[@]}"
}

install_fuzz_dependencies() {
  install_packages "${OPTGEN_PACKAGES[@]}" "${OPTGEN_FUZZ_PACKAGES[@]}"
}

# Installs those of the named Debian packages that are missing, through apt-get.
install_packages() {
  local missing=()
  for package in "$@"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "== installing missing Debian packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
}

# pip's builds (scikit-build-core) run `cmake --build` without -j: as many jobs as cores.
export CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}

# A virtual environment at the path given, unless there is one; extra arguments go to `python3 -m
# venv` (e.g. --system-site-packages).
make_venv() {
  local venv=$1
  shift
  [ -x "$venv/bin/python" ] && return 0
  python3 -m venv "$@" "$venv" 2>/dev/null || {
    install_packages python3 python3-venv
    /usr/bin/python3 -m venv "$@" "$venv"
  }
}

# The Python package (pyproject.toml), installed with pip into the virtual environment
# BUILD_DIR/venv (made first, with pytest). scikit-build-core builds its native targets,
# liboptgen.so and the generator, in BUILD_DIR itself, so nothing is compiled twice; extra arguments
# are CMake definitions for that configure, e.g. OPTGEN_BUILD_TESTS=ON to keep a test build's.
install_python_package() {
  local build_dir=$1
  shift
  local venv="$build_dir/venv"
  make_venv "$venv"
  local defines=()
  for define in "$@"; do defines+=(-C "cmake.define.$define"); done
  echo "== pip install .[test] into $venv (liboptgen.so built in $build_dir)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check \
    -C build-dir="$(cd "$build_dir" && pwd)" "${defines[@]}" ".[test]"
}

configure_and_build() {
  local build_dir=$1
  shift
  local cuda_hint=()
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    cuda_hint=(-DCUDAToolkit_ROOT=/usr/local/cuda)
  fi
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cuda_hint[@]}" "$@"
  cmake --build "$build_dir" -j "$(nproc)"
}
