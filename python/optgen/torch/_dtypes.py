"""How optgen's dtype codes (optgen.F32, ...) and torch's dtypes name each other, for the modules
of optgen.torch that make tensors of the engine's dtypes."""

from __future__ import annotations

import torch

from .. import _capi

# The dtypes of params (and of states other than 8-bit ones), each way round.
TORCH_DTYPES = {_capi.F32: torch.float32, _capi.BF16: torch.bfloat16, _capi.F16: torch.float16}
OPTGEN_DTYPES = {t: d for d, t in TORCH_DTYPES.items()}


def torch_dtype(dtype: int) -> torch.dtype:
    """The torch dtype of optgen's `dtype`; float32 for one torch has none of (an 8-bit state, whose
    values optgen.torch gives as float32)."""
    return TORCH_DTYPES.get(dtype, torch.float32)
