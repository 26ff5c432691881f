"""optgen: fused CUDA optimizer steps generated from YAML specs.

- optgen.torch: torch.optim drop-ins (optgen.torch.AdamW, ...) (needs torch).
- optgen.Engine: one optimizer through the C ABI, on device addresses (needs no torch), created
  with an optgen.Storage (dtypes F32, BF16, F16, and for states the 8-bit Q8, UQ8; param writes
  NEAREST, MASTER, STOCHASTIC).
"""

from ._capi import (ABI_VERSION, BF16, F16, F32, MASTER, NEAREST, Q8, STOCHASTIC, UQ8, Engine, OptgenError, StateBuffer,
                    Storage, builtin_specs, library_path, version)

__all__ = ["ABI_VERSION", "BF16", "Engine", "F16", "F32", "MASTER", "NEAREST", "OptgenError", "Q8", "STOCHASTIC",
           "StateBuffer", "Storage", "UQ8", "builtin_specs", "library_path", "version"]
