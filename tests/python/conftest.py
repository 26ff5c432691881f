"""pytest configuration for optgen's Python tests.

Markers: `torch` (needs torch) and `gpu` (needs torch and a CUDA GPU); each is skipped, with the
reason, when what it needs is missing, so the suite runs in CI on a machine with neither.
The library under test: the installed package's, or $OPTGEN_LIBRARY (test.sh points it at the
build's liboptgen.so).
"""

import importlib.util

import pytest

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def _gpu_reason():
    if not HAVE_TORCH:
        return "torch is not installed"
    import torch
    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    return None


def pytest_configure(config):
    config.addinivalue_line("markers", "torch: needs torch (skipped without it)")
    config.addinivalue_line("markers", "gpu: needs torch and a CUDA GPU (skipped without them)")


def pytest_collection_modifyitems(config, items):
    gpu_reason = _gpu_reason()
    for item in items:
        if "gpu" in item.keywords and gpu_reason:
            item.add_marker(pytest.mark.skip(reason=gpu_reason))
        elif "torch" in item.keywords and not HAVE_TORCH:
            item.add_marker(pytest.mark.skip(reason="torch is not installed"))
