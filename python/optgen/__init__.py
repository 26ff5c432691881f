"""optgen: fused CUDA optimizer steps generated from YAML specs.

- optgen.torch: torch.optim drop-ins (optgen.torch.AdamW, ...) (needs torch).
- optgen.Engine: one optimizer through the C ABI, on device addresses (needs no torch).
"""

from ._capi import ABI_VERSION, Engine, OptgenError, builtin_specs, library_path, version

__all__ = ["ABI_VERSION", "Engine", "OptgenError", "builtin_specs", "library_path", "version"]
