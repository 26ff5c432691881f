"""NVRTC and cuBLASLt from NVIDIA's CUDA wheels (optgen/_cuda_wheels.py), for a machine without the
CUDA toolkit: found on sys.path and loaded before liboptgen.so, so that the runtime's dlopen of
libnvrtc.so.1x and libcublasLt.so.1x by name finds them; NVRTC put on the loader's path of the
`optgen` command. The tests that need such a wheel (torch's CUDA builds install both) skip
themselves without it."""

import ctypes
import os

import pytest

import optgen
from optgen import _cuda_wheels

WHEEL_NVRTC = None if os.environ.get("OPTGEN_NVRTC_LIBRARY") else _cuda_wheels.wheel_library("nvrtc")
WHEEL_CUBLASLT = None if os.environ.get("OPTGEN_CUBLASLT") else _cuda_wheels.wheel_library("cublasLt")
needs_nvrtc_wheel = pytest.mark.skipif(WHEEL_NVRTC is None,
                                       reason="no nvidia-cuda-nvrtc wheel on sys.path (or OPTGEN_NVRTC_LIBRARY set)")
needs_cublas_wheel = pytest.mark.skipif(WHEEL_CUBLASLT is None,
                                        reason="no nvidia-cublas wheel on sys.path (or OPTGEN_CUBLASLT set)")


@needs_nvrtc_wheel
def test_the_wheels_nvrtc_is_loaded_with_the_library_and_found_by_name():
    optgen._capi.library()
    # By name, as the runtime asks: the loaded library answers, whatever the loader's path holds.
    ctypes.CDLL(os.path.basename(WHEEL_NVRTC))


@needs_cublas_wheel
def test_the_wheels_cublaslt_is_loaded_with_the_library_and_found_by_name():
    optgen._capi.library()
    assert _cuda_wheels._preloaded["cublasLt"]._name == WHEEL_CUBLASLT
    ctypes.CDLL(os.path.basename(WHEEL_CUBLASLT))


@needs_nvrtc_wheel
def test_the_command_gets_the_wheels_nvrtc_on_its_loader_path():
    environment = _cuda_wheels.environment_for_command({"LD_LIBRARY_PATH": "/elsewhere"})
    assert environment["LD_LIBRARY_PATH"] == os.path.dirname(WHEEL_NVRTC) + os.pathsep + "/elsewhere"


def test_a_chosen_library_is_left_alone(monkeypatch):
    environment = {"OPTGEN_NVRTC_LIBRARY": "/opt/nvrtc/libnvrtc.so"}
    assert _cuda_wheels.environment_for_command(environment) == environment
    monkeypatch.setenv("OPTGEN_NVRTC_LIBRARY", "/opt/nvrtc/libnvrtc.so")
    monkeypatch.setenv("OPTGEN_CUBLASLT", "/opt/cublas/libcublasLt.so")
    assert _cuda_wheels.preload() == {}


def test_a_wheel_is_found_on_sys_path(tmp_path, monkeypatch):
    library = tmp_path / "nvidia" / "cu13" / "lib" / "libcublasLt.so.13"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _cuda_wheels.wheel_library("cublasLt") == str(library)
