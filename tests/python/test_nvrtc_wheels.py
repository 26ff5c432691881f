"""NVRTC from NVIDIA's CUDA wheels (optgen/_nvrtc.py), for a machine without the CUDA toolkit: found
on sys.path and loaded before liboptgen.so, so that the runtime's dlopen of libnvrtc.so.1x by name
finds it; put on the loader's path of the `optgen` command. The tests that need such a wheel
(torch's CUDA builds install one) skip themselves without it."""

import ctypes
import os

import pytest

import optgen
from optgen import _nvrtc

WHEEL_NVRTC = None if os.environ.get("OPTGEN_NVRTC_LIBRARY") else _nvrtc.wheel_nvrtc()
needs_wheel = pytest.mark.skipif(WHEEL_NVRTC is None,
                                 reason="no nvidia-cuda-nvrtc wheel on sys.path (or OPTGEN_NVRTC_LIBRARY set)")


@needs_wheel
def test_the_wheels_nvrtc_is_loaded_with_the_library_and_found_by_name():
    optgen._capi.library()
    # By name, as the runtime asks: the loaded library answers, whatever the loader's path holds.
    ctypes.CDLL(os.path.basename(WHEEL_NVRTC))


@needs_wheel
def test_the_command_gets_the_wheels_nvrtc_on_its_loader_path():
    environment = _nvrtc.environment_for_command({"LD_LIBRARY_PATH": "/elsewhere"})
    assert environment["LD_LIBRARY_PATH"] == os.path.dirname(WHEEL_NVRTC) + os.pathsep + "/elsewhere"


def test_a_chosen_nvrtc_is_left_alone(monkeypatch):
    environment = {"OPTGEN_NVRTC_LIBRARY": "/opt/nvrtc/libnvrtc.so"}
    assert _nvrtc.environment_for_command(environment) == environment
    monkeypatch.setenv("OPTGEN_NVRTC_LIBRARY", "/opt/nvrtc/libnvrtc.so")
    assert _nvrtc.preload() is None
