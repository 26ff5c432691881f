"""optgen: fused CUDA optimizer steps generated from YAML specs.

- optgen.torch: torch.optim drop-ins (optgen.torch.AdamW, ...) (needs torch).
- optgen.Engine: one optimizer through the C ABI, on device addresses (needs no torch), created
  with an optgen.Storage (dtypes F32, BF16, F16; param writes NEAREST, MASTER, STOCHASTIC).
"""

from ._capi import (ABI_VERSION, BF16, F16, F32, MASTER, NEAREST, STOCHASTIC, Engine, OptgenError, Storage,
                    builtin_specs, library_path, version)

__all__ = ["ABI_VERSION", "BF16", "Engine", "F16", "F32", "MASTER", "NEAREST", "OptgenError", "STOCHASTIC", "Storage",
           "builtin_specs", "library_path", "version"]
