"""NVRTC from NVIDIA's CUDA wheels, the ones torch installs, for a machine with no CUDA toolkit.

liboptgen.so compiles kernels with NVRTC (a spec loaded at run time, a launch shape or chunk size
set on an engine, a GPU no embedded image fits) and loads it with dlopen: $OPTGEN_NVRTC_LIBRARY,
else libnvrtc.so.13, .so.12 on the loader's path, else the toolkit's lib64/. The loader's path
does not reach site-packages, so this module finds the wheels' libnvrtc there:
nvidia-cuda-nvrtc (CUDA 13: nvidia/cu13/lib/libnvrtc.so.13) and nvidia-cuda-nvrtc-cu12
(nvidia/cuda_nvrtc/lib/libnvrtc.so.12). Loaded into the process before liboptgen.so asks,
libnvrtc.so.1x is found by its name there too.
"""

from __future__ import annotations

import ctypes
import os
import sys
from typing import Optional

# Inside a site-packages directory, newest CUDA first (the runtime tries .so.13 before .so.12).
_WHEEL_FILES = ("nvidia/cu13/lib/libnvrtc.so.13", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12")

_preloaded: Optional[ctypes.CDLL] = None


def wheel_nvrtc() -> Optional[str]:
    """The path of libnvrtc from a CUDA wheel on sys.path, or None."""
    for entry in sys.path:
        for file in _WHEEL_FILES:
            path = os.path.join(entry or os.getcwd(), file)
            if os.path.isfile(path):
                return path
    return None


def preload() -> Optional[str]:
    """Loads the CUDA wheels' libnvrtc into this process, unless $OPTGEN_NVRTC_LIBRARY chooses one;
    the path loaded, or None. Never raises: without it the runtime searches as it always does, and
    its error says what to install."""
    global _preloaded
    if os.environ.get("OPTGEN_NVRTC_LIBRARY"):
        return None
    path = wheel_nvrtc()
    if path is None:
        return None
    try:
        _preloaded = ctypes.CDLL(path)
    except OSError:
        return None
    return path


def environment_for_command(environment: dict) -> dict:
    """`environment` with the CUDA wheels' NVRTC on LD_LIBRARY_PATH, for the optgen command (a
    process of its own, which searches the loader's path)."""
    if environment.get("OPTGEN_NVRTC_LIBRARY"):
        return environment
    path = wheel_nvrtc()
    if path is None:
        return environment
    directory = os.path.dirname(path)
    current = environment.get("LD_LIBRARY_PATH")
    return dict(environment, LD_LIBRARY_PATH=directory + (os.pathsep + current if current else ""))
