"""NVRTC and cuBLASLt from NVIDIA's CUDA wheels, the ones torch installs, for a machine with no CUDA
toolkit.

liboptgen.so loads both with dlopen when it first needs them: NVRTC to compile kernels (a spec
loaded at run time, a launch shape or chunk size set on an engine, a GPU no embedded image fits),
cuBLASLt for the matrix products of matrix functions (Muon's Newton-Schulz). It tries
$OPTGEN_NVRTC_LIBRARY (or $OPTGEN_CUBLASLT), else the .so.13 then .so.12 by name on the loader's
path, else in the toolkit's lib64/. The loader's path does not reach site-packages, so this module
finds the wheels' libraries there and loads them before liboptgen.so asks: a library already in the
process is found by its name. The wheels: nvidia-cuda-nvrtc and nvidia-cublas for CUDA 13
(nvidia/cu13/lib/), nvidia-cuda-nvrtc-cu12 (nvidia/cuda_nvrtc/lib/) and nvidia-cublas-cu12
(nvidia/cublas/lib/).
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Dict, Optional, Tuple

# Each library: the variable that chooses it, then its files inside a site-packages directory,
# newest CUDA first (the runtime tries .so.13 before .so.12).
_LIBRARIES: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "nvrtc": ("OPTGEN_NVRTC_LIBRARY", ("nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12")),
    "cublasLt": ("OPTGEN_CUBLASLT", ("nvidia/cu13/lib/libcublasLt.so.13", "nvidia/cublas/lib/libcublasLt.so.12")),
}

_preloaded: Dict[str, ctypes.CDLL] = {}


def wheel_library(name: str) -> Optional[str]:
    """The path of library `name` ("nvrtc", "cublasLt") from a CUDA wheel on sys.path, or None."""
    for entry in sys.path:
        for file in _LIBRARIES[name][1]:
            path = os.path.join(entry or os.getcwd(), file)
            if os.path.isfile(path):
                return path
    return None


def chosen(name: str, environment=os.environ) -> bool:
    """Whether the environment chooses library `name` itself ($OPTGEN_NVRTC_LIBRARY, $OPTGEN_CUBLASLT)."""
    return bool(environment.get(_LIBRARIES[name][0]))


def preload() -> Dict[str, str]:
    """Loads the CUDA wheels' NVRTC and cuBLASLt into this process, each unless the environment
    chooses it; the paths loaded, by library. Never raises: without a wheel the runtime searches as
    it always does, and its error says what to install."""
    loaded = {}
    for name in _LIBRARIES:
        path = None if chosen(name) else wheel_library(name)
        if path is None:
            continue
        try:
            _preloaded[name] = ctypes.CDLL(path)
        except OSError:
            continue
        loaded[name] = path
    return loaded


def environment_for_command(environment: dict) -> dict:
    """`environment` with the CUDA wheels' NVRTC on LD_LIBRARY_PATH, for the optgen command (a
    process of its own, which searches the loader's path; it compiles, and multiplies no matrices)."""
    if chosen("nvrtc", environment):
        return environment
    path = wheel_library("nvrtc")
    if path is None:
        return environment
    directory = os.path.dirname(path)
    current = environment.get("LD_LIBRARY_PATH")
    return dict(environment, LD_LIBRARY_PATH=directory + (os.pathsep + current if current else ""))
