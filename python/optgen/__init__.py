"""optgen: fused CUDA optimizer steps generated from YAML specs.

- optgen.torch: torch.optim drop-ins (optgen.torch.AdamW, ...) (needs torch).
- optgen.Engine: one optimizer through the C ABI, on device addresses (needs no torch), created
  with an optgen.Storage (DType F32, BF16, F16, and for states the 8-bit Q8, UQ8; ParamWrite
  NEAREST, MASTER, STOCHASTIC; Blockwise8Layout: how Q8 and UQ8 lay out a tensor's state);
  Engine.add_param_group takes optgen.TensorBinding's. Engine
  describes itself with Hyperparameter's (their ValueType) and State's (their Shape, and per
  group their Presence). Engine.set_reduction_hook hands a hook ReductionResults (its Reduction's)
  where ranks holding shards of one model combine them; Engine.set_matrix_hook hands one a
  MatrixWork (its Matrices) where they bring sharded matrices together. optgen.Optimizers steps
  engines of different specs as one, with one checkpoint. The enums are ints of the C ABI that
  print by name.
"""

from ._capi import (ABI_VERSION, BF16, F16, F32, MASTER, NEAREST, Q8, STOCHASTIC, UQ8, Blockwise8Layout, DType, Engine,
                    Hyperparameter, Matrices, MatrixWork, OptgenError, Optimizers, ParamWrite, Presence, Reduction,
                    ReductionResults, Shape, SpecWarning, State, StateBuffer, Storage, TensorBinding, ValueType,
                    builtin_specs, library_path, version)

__all__ = ["ABI_VERSION", "BF16", "Blockwise8Layout", "DType", "Engine", "F16", "F32", "Hyperparameter", "MASTER",
           "Matrices", "MatrixWork", "NEAREST", "OptgenError", "Optimizers", "ParamWrite", "Presence", "Q8",
           "Reduction", "ReductionResults", "STOCHASTIC", "Shape", "SpecWarning", "State", "StateBuffer", "Storage",
           "TensorBinding", "UQ8", "ValueType", "builtin_specs", "library_path", "version"]
