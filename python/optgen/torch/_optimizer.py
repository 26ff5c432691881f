"""optgen.torch.Optimizer: a torch.optim.Optimizer whose step is optgen's fused launch.

How torch's objects map onto optgen's engine (optgen.Engine, the C++ FusedOptimizer):
- States are torch tensors in `self.state[p]`, under the spec's names (torch's, for the built-in
  specs), each in its own dtype (state_dtype), handed to the engine as caller-owned buffers: the
  engine updates them in place. A state may exist only for some tensors (Adafactor's row_var and
  col_var for tensors of two dimensions or more, variance for the others: engine.state_presence)
  and hold one value per row or column (torch's shapes p.shape[:-1] + (1,) and p.shape[:-2] + (1,
  p.shape[-1])); an absent one is passed as a null pointer.
- The fp32 master copy of a bf16 or f16 param (master_weights=True) is the engine's buffer:
  `self.state[p]["master_param"]` is a float32 tensor of p's shape and strides that views it (and
  keeps its engine alive). A new engine starts each master from the param, and the optimizer then
  copies the one in `self.state` over it: a master survives rebuilds and load_state_dict.
- torch counts steps per parameter; the engine counts them per group. A torch param group becomes
  one engine group per (dtype, step count, scalar state) among its params that have gradients, so
  a parameter torch would skip (no gradient) is skipped and keeps its own count.
- Hyperparameters are read from the param groups when the optimizer binds, and every later
  assignment (`group["lr"] = ...`, as torch's lr schedulers do) goes to the device at once, in stream
  order: no per-step host work, and replays of a captured CUDA graph see it.
- Each step checks that every parameter's `.grad` is the tensor it bound (torch allocates new ones
  after zero_grad(set_to_none=True)) and rebinds those that moved; with static_grads=True, it
  checks the first of each group only and zero_grad() zeroes in place.
- Anything structural (the first step, a new group, load_state_dict, a gradient appearing or
  disappearing) builds a new engine: that synchronizes, and cannot happen inside a graph capture.
"""

from __future__ import annotations

import math
import operator
import os
import weakref
from collections import defaultdict
from itertools import chain
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import torch
import torch.optim.optimizer as _torch_optimizer

from .. import _capi
from .._capi import (COLS, ELEMENTS, FACTORED, NOT_FACTORED, ROWS, TENSOR, Engine, OptgenError, State, Storage,
                     TensorBinding)
from .._hyperparameters import TUPLES, check_ranges, number, spec_values, torch_defaults, tuple_of
from ._blockwise8 import Codec
from ._device_array import DeviceArray
from ._dtypes import OPTGEN_DTYPES, torch_dtype
from ._ranks import RankMatrices, RankReductions, shard_groups

# A state's dtype as state_dtype names it: a param's torch dtype, or "q8" and "uq8", 8-bit blockwise
# (_blockwise8: codes and a float32 absmax per block of 256, values float32 in state_dicts).
_STATE_DTYPES = {**OPTGEN_DTYPES, "q8": _capi.Q8, "uq8": _capi.UQ8}
_TYPE_NAMES = {_capi.BOOL: "bool", _capi.INT: "int", _capi.FLOAT: "float"}
_grad_of = operator.attrgetter("grad")
# Optimizer's keyword-only options, which from_spec tells apart from hyperparameters.
_OPTIONS = ("state_dtype", "master_weights", "stochastic_rounding", "seed", "static_grads", "foreach", "fused",
            "capturable", "differentiable")
# The key of a parameter's fp32 master copy in its state (master_weights=True).
MASTER_PARAM = "master_param"
# In a state_dtype dict: the dtype of every state it does not name.
OTHER_STATES = "*"


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor whose memory optgen updates: a DTensor's local shard, or `t` itself."""
    return getattr(t, "_local_tensor", t)


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what torch's own kernels launch on


def _stream_of(device: torch.device) -> int:
    return _raw_stream(device.index) if _raw_stream else torch.cuda.current_stream(device).cuda_stream


def _observed(optimizer: "Optimizer") -> bool:
    """Whether a step must run through torch's wrapper: step hooks registered, or a profiler on."""
    return bool(optimizer._optimizer_step_pre_hooks or optimizer._optimizer_step_post_hooks or
                _torch_optimizer._global_optimizer_pre_hooks or _torch_optimizer._global_optimizer_post_hooks or
                torch.autograd._profiler_enabled())


def _dtype_name(dtype: Any) -> str:
    return str(dtype) if isinstance(dtype, torch.dtype) else repr(dtype)


def _storage_of(state_dtype: Any, master_weights: Any, stochastic_rounding: Any, seed: Any, spec: Engine) -> Storage:
    """The engine storage of Optimizer's options, checked (state names against `spec`'s states)."""
    for name, value in (("master_weights", master_weights), ("stochastic_rounding", stochastic_rounding)):
        if not isinstance(value, bool):
            raise TypeError(f"{name} must be True or False; got {value!r}")
    if master_weights and stochastic_rounding:
        raise ValueError("master_weights=True and stochastic_rounding=True exclude each other: a parameter is "
                         "written from its fp32 master copy, or rounded stochastically from the update")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int; got {seed!r}")
    if not 0 <= seed < 2 ** 64:
        raise ValueError(f"seed must be in [0, 2**64); got {seed}")
    allowed = "torch.float32, torch.bfloat16, torch.float16, 'q8' or 'uq8'"
    states = [s.name for s in spec.states]
    values = spec.matrix_values  # a matrix value (Muon's "o") may be named too: bf16 or float32
    default, named = torch.float32, {}
    if state_dtype is None:
        pass
    elif isinstance(state_dtype, (torch.dtype, str)):
        if state_dtype not in _STATE_DTYPES:
            raise ValueError(f"state_dtype must be {allowed}, or a dict of them by state name; got "
                             f"{_dtype_name(state_dtype)}")
        default = state_dtype
    elif isinstance(state_dtype, Mapping):
        for name, dtype in state_dtype.items():
            if name in values:
                if dtype not in (torch.float32, torch.bfloat16):
                    raise ValueError(f"state_dtype[{name!r}] keeps {spec.name}'s matrix value {name!r} in "
                                     f"{_dtype_name(dtype)}: it is torch.bfloat16 (the default: bf16 products "
                                     "accumulating in fp32, as torch's) or torch.float32 (fp32 throughout)")
                continue
            if name != OTHER_STATES and name not in states:
                raise ValueError(f"state_dtype names state {name!r}, which {spec.name} does not have (its states: "
                                 f"{', '.join(states) or 'none'}; '{OTHER_STATES}': every state not named" +
                                 (f"; its matrix values: {', '.join(values)}" if values else "") + ")")
            if not isinstance(dtype, (torch.dtype, str)) or dtype not in _STATE_DTYPES:
                raise ValueError(f"state_dtype[{name!r}] must be {allowed}; got {_dtype_name(dtype)}")
        default = state_dtype.get(OTHER_STATES, torch.float32)
        named = {name: dtype for name, dtype in state_dtype.items() if name != OTHER_STATES}
    else:
        raise ValueError(f"state_dtype must be {allowed}, or a dict of them by state name (e.g. "
                         f"{{'{OTHER_STATES}': torch.bfloat16, 'exp_avg_sq': torch.float32}}); got "
                         f"{_dtype_name(state_dtype)}")
    write = _capi.MASTER if master_weights else _capi.STOCHASTIC if stochastic_rounding else _capi.NEAREST
    return Storage(_STATE_DTYPES[default], {name: _STATE_DTYPES[dtype] for name, dtype in named.items()}, write,
                   seed)


class _GroupDict(dict):
    """A param group that passes each hyperparameter assignment on to the optimizer."""

    def __init__(self, values: dict, on_set: Callable[["_GroupDict", str], None]):
        super().__init__(values)
        self._on_set = on_set

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._on_set(self, key)

    def __reduce__(self):  # copies and pickles are plain dicts, as torch's groups are
        return (dict, (dict(self),))


class _Gone:
    pass


_NO_GRAD = weakref.ref(_Gone())  # dead at once: calling it gives None, as a param without .grad has


class _Binding:
    """One torch param group as the current engine binds it."""

    def __init__(self, params: List[torch.Tensor]):
        self.params = params
        self.distributed = any(_local(p) is not p for p in params)  # DTensors: step their local shards
        self.engine_groups: List[int] = []
        self.where: Dict[int, tuple] = {}  # param index -> (engine group, tensor index)
        # The dtype of the group's first parameter with a gradient (None: none has one), which a
        # hyperparameter's default may depend on (Optimizer._group_values: Adafactor's eps1).
        self.dtype: Optional[torch.dtype] = None

    def bind(self, grads: List[Optional[torch.Tensor]], addresses: Optional[List[int]] = None,
             strides: Optional[list] = None) -> None:
        """Remembers the gradients bound (checked already), one per param or None:
        - per param, its gradient's address and strides, those a gradient must have (0 and None
          where there is none): a new .grad at the same address with these strides needs no rebind;
        - the gradients themselves, weakly: holding them would keep last step's gradients alive
          past zero_grad(set_to_none=True), a second set in memory through the next backward.
          Once one is freed, `freed` says so (a dead reference alone reads as a missing gradient)."""
        if addresses is None:
            addresses, strides = _addresses_and_strides(self._locals(grads))
        self.grad_addresses, self.grad_strides = addresses, strides
        self.freed = freed = [False]

        def on_free(_, freed=freed):
            freed[0] = True

        self.grad_refs = [_NO_GRAD if g is None else weakref.ref(g, on_free) for g in grads]

    def _locals(self, tensors: List[Optional[torch.Tensor]]) -> List[Optional[torch.Tensor]]:
        return [None if t is None else _local(t) for t in tensors] if self.distributed else tensors

    def grads_unchanged(self, first_only: bool) -> bool:
        """Whether every .grad (or the first, with static_grads) is the object bound."""
        if self.freed[0]:
            return False
        if first_only:
            return not self.params or self.params[0].grad is self.grad_refs[0]()
        return not any(map(operator.is_not, map(_grad_of, self.params), map(operator.call, self.grad_refs)))


def _addresses_and_strides(tensors: List[Optional[torch.Tensor]]):
    """Each tensor's data_ptr() and stride() (0 and None for None). Raises RuntimeError for a tensor
    with no strides or no storage (sparse)."""
    return ([0 if t is None else t.data_ptr() for t in tensors],
            [None if t is None else t.stride() for t in tensors])


class Optimizer(torch.optim.Optimizer):
    """A torch.optim.Optimizer that steps every parameter with one fused optgen launch.

    Use a subclass for a built-in spec (optgen.torch.AdamW, ...) or Optimizer.from_spec for any
    spec. CUDA params only (f32, bf16 or f16; each group may mix them), all on one device.
    engine_factory(storage) makes the optgen.Engine, with an optgen.Storage built from the options
    below (e.g. lambda storage: optgen.Engine.builtin("adamw", storage=storage)).

    state_dtype: the dtype optgen keeps states in (torch keeps them in the param's dtype):
        torch.float32 (the default), torch.bfloat16 or torch.float16; or a dict of them by state
        name, a dtype per state, where "*" stands for every state the dict does not name (float32
        without it): {"*": torch.bfloat16, "exp_avg_sq": torch.float32}. A state the spec lacks
        or another dtype is a ValueError. A param group runs the kernels generated for its params'
        dtype and this storage, every state the spec declares counted (AdamW's max_exp_avg_sq
        also without amsgrad); storage that was not generated fails at the first step, naming
        what was. The built-in Adam and AdamW have float32 states for float32, bfloat16 and
        float16 params, bfloat16 states for bfloat16 and float32 params, and {"*":
        torch.bfloat16, "exp_avg_sq": torch.float32} for bfloat16 params; the others float32
        states. "q8" and "uq8" keep a state in 8 bits, bitsandbytes' blockwise signed and unsigned
        maps: {"*": "q8", "exp_avg_sq": "uq8"} is bitsandbytes' AdamW8bit (Adam, AdamW and LAMB,
        float32 and, but for LAMB, bfloat16 params); AdamMini's {"*": "q8", "vmean": torch.float32,
        "v": "uq8"} keeps its moments of one value per element in 8 bits (float32 and bfloat16
        params; its second moment per block stays float32). state[p] then holds optgen's buffer for the
        tensor (uint8: its codes, then a float32 absmax per block of 256 elements;
        optgen.Blockwise8Layout), or float32 values for a tensor under 4096 elements, as
        bitsandbytes keeps them; state_dict() gives the state's values (float32, p's shape: a
        DTensor as p is), which load_state_dict() quantises, so that a checkpoint loads into
        another sharding, or into torch.optim's optimizer, and theirs here. The values of codes
        quantise back to the same codes: a round trip in one layout changes no bit. The dict may
        also name a matrix value of the spec (Muon's "o", Engine.matrix_values): torch.float32
        runs its matrix function in fp32 products, where the default is bf16's.
    master_weights: keep an fp32 master copy of each bfloat16 or float16 parameter: the step
        updates the master in float32 and writes the parameter as the master rounded to nearest
        (the built-in Adam and AdamW, with float32 states). The master is
        state[p]["master_param"], a float32 tensor of p's shape that views optgen's buffer, saved
        and restored by state_dict()/load_state_dict() (a state_dict without one starts the master
        from the parameter; an optimizer without master_weights ignores one). A float32 parameter
        needs none and is refused (ValueError). Change such parameters through the optimizer's
        state, not in place: the next step writes the parameter from the master.
    stochastic_rounding: round bfloat16 parameters stochastically (unbiased: small updates are
        not lost to rounding, on average), reproducibly for a `seed` (and the same groups and
        steps; a state_dict resumes the stream). The built-in Adam and AdamW, with
        state_dtype=torch.bfloat16. Other parameter dtypes are refused (ValueError); excludes
        master_weights.
    seed: the seed of stochastic rounding's random stream, an int in [0, 2**64).
    static_grads: the gradients stay where they are between steps (the training loop zeroes them
        with this optimizer's zero_grad(), which then zeroes in place): each step checks one
        gradient per group instead of every one, for the lowest host time.
    max_grad_norm: clip each param group's gradients by their global norm before the step, as
        torch.nn.utils.clip_grad_norm_(group's params, max_grad_norm) followed by the step would
        (computed on the device, gradients left unchanged; grad_norm() returns the norm); 0: off.
        A hyperparameter of every spec, settable per group; a group that clips must hold params of
        one dtype that all have gradients from its first step on.
    DTensor params (FSDP2's fully_shard): each rank steps its own shards, and every reduction the
        spec makes (a per-tensor norm, max_grad_norm's global norm, Prodigy's sums; a mean counts
        the whole tensor's elements) is all-reduced over the mesh dimensions the params are sharded
        along, through torch.distributed on the step's stream, so every rank steps as one GPU
        holding whole tensors would. Such an optimizer needs every param a DTensor of one mesh and
        placement. Rows and columns (Adafactor's) need params of two or more dimensions sharded
        along their first (whole rows on each rank); the ranks' parts of each column's and matrix's
        sums are all-reduced too. A matrix function (Muon's Newton-Schulz) gathers each matrix's
        rows to one owner rank, the matrices spread over the ranks, and hands the results' rows back
        (two all-to-alls a step); it needs the params sharded along their first dimension
        (Shard(0), as fully_shard shards them) over one mesh dimension.
    foreach, fused, capturable: accepted for torch's signature and ignored: optgen's step is always
        one fused launch and can always be captured in a CUDA graph.
    differentiable: must be False.
    """

    _step_supports_amp_scaling = True  # torch.amp.GradScaler passes grad_scale and found_inf
    # torch's tuple arguments and the spec names they unpack into (_hyperparameters.TUPLES); a
    # subclass whose published class pairs them otherwise (Prodigy: betas and beta3) has its own.
    _tuples = TUPLES

    def __init__(self, params, engine_factory: Callable[[Storage], Engine], defaults: Optional[Dict[str, Any]] = None,
                 *, state_dtype: Union[torch.dtype, Mapping[str, torch.dtype], None] = None,
                 master_weights: bool = False, stochastic_rounding: bool = False, seed: int = 0,
                 static_grads: bool = False, max_grad_norm: Optional[float] = None,
                 foreach: Optional[bool] = None, fused: Optional[bool] = None, capturable: bool = False,
                 differentiable: bool = False):
        if differentiable:
            raise ValueError("optgen.torch optimizers are not differentiable: their step is a fused CUDA kernel")
        self._engine_factory = engine_factory
        self._static_grads = bool(static_grads)
        self._describe = engine_factory(Storage())  # names, types, defaults and states of the spec
        self._storage = _storage_of(state_dtype, master_weights, stochastic_rounding, seed, self._describe)
        # Each state's torch dtype, by name (float32 for one in 8 bits: its values'), and the 8-bit ones'.
        self._state_dtypes = {s.name: torch_dtype(self._storage.dtype_of(s.name)) for s in self._describe.states}
        self._quantized = {s.name: self._storage.dtype_of(s.name) for s in self._describe.states
                           if self._storage.dtype_of(s.name) in (_capi.Q8, _capi.UQ8)}
        self._codecs: Dict[tuple, Codec] = {}
        self._master = self._storage.param_write == _capi.MASTER
        types = {h.name: _TYPE_NAMES[h.type] for h in self._describe.hyperparameters}
        self._spec_names = [h.name for h in self._describe.hyperparameters if not h.derived]
        spec_defaults = torch_defaults(self._describe.defaults(), types, self._tuples)
        given = dict(defaults or {})
        if max_grad_norm is not None:
            if "max_grad_norm" in given:
                raise TypeError("max_grad_norm given twice")
            given["max_grad_norm"] = max_grad_norm
        unknown = set(given) - set(spec_defaults)
        if unknown:
            # A spec's beta1 and beta2 are torch's betas (self._tuples): say so where one was given.
            hints = sorted(f"{key}=({', '.join(members)})" for key in spec_defaults
                           for members in [tuple_of(key, self._spec_names, self._tuples)]
                           if key not in self._spec_names and unknown & set(members))
            raise TypeError(f"{self._describe.name} has no hyperparameter {', '.join(map(repr, sorted(unknown)))} "
                            f"(it has: {', '.join(spec_defaults)})" +
                            (f"; give {' and '.join(hints)}, as torch.optim takes them" if hints else ""))
        full = {**spec_defaults, **given}
        self._check_ranges(self._group_values(full, None))
        full.update(foreach=foreach, fused=fused, capturable=capturable, differentiable=differentiable)
        self._engine: Optional[Engine] = None
        self._bindings: List[_Binding] = []
        self._device: Optional[torch.device] = None
        self._structure_changed = True
        super().__init__(params, full)

    @staticmethod
    def from_spec(path: Union[str, os.PathLike], params, **hyperparameters_and_options) -> "Optimizer":
        """An optimizer for any spec, loaded now (optgen.Engine.from_spec: generated in this
        process and compiled by NVRTC through the disk cache, no C++ compiler).

        Hyperparameters take the spec's names, except beta1 and beta2, which are torch's
        betas=(beta1, beta2) when the spec has both; the options are Optimizer's (state_dtype,
        master_weights, stochastic_rounding, seed, static_grads, ...); kernels are generated for
        the spec's `storage:` list, else for float32 and bfloat16 params with float32 states. A
        mistake in the spec raises optgen.OptgenError with its file:line:col, the line and a
        caret.

            opt = optgen.torch.Optimizer.from_spec("my_lion.yaml", model.parameters(), lr=1e-4)
        """
        options = {k: hyperparameters_and_options.pop(k) for k in _OPTIONS if k in hyperparameters_and_options}
        spec = os.fspath(path)
        return Optimizer(params, lambda storage: Engine.from_spec(spec, storage=storage),
                         hyperparameters_and_options, **options)

    # ---- groups ----

    def add_param_group(self, param_group: Dict[str, Any]) -> None:
        super().add_param_group(param_group)
        group = self.param_groups[-1]
        for p in group["params"]:
            self._check_param(p)
        if group.get("differentiable"):
            raise ValueError("optgen.torch optimizers are not differentiable")
        self._group_values(group, None)  # every hyperparameter a number
        self.param_groups[-1] = _GroupDict(group, self._hyperparameter_set)
        self._structure_changed = True

    def _check_param(self, p: torch.Tensor) -> None:
        local = _local(p)
        if self._master and local.dtype == torch.float32:
            raise ValueError("master_weights=True keeps an fp32 master copy of bfloat16 and float16 parameters, but "
                             f"a parameter of shape {tuple(local.shape)} is float32, its own master copy: step float32 "
                             "parameters with an optimizer made without master_weights")
        if self._storage.param_write == _capi.STOCHASTIC and local.dtype != torch.bfloat16:
            raise ValueError(f"stochastic_rounding=True rounds bfloat16 parameters, but a parameter of shape "
                             f"{tuple(local.shape)} is {local.dtype}: step it with an optimizer made without "
                             "stochastic_rounding (master_weights=True for float16 parameters)")
        if not local.is_cuda:
            raise ValueError(f"optgen.torch optimizers step CUDA tensors; a parameter is on {local.device}")
        if local.dtype not in OPTGEN_DTYPES:
            raise ValueError(f"optgen.torch optimizers step float32, bfloat16 and float16 parameters; a "
                             f"parameter is {local.dtype}")
        if local.is_sparse or not (local.is_contiguous() or local.is_contiguous(memory_format=torch.channels_last)):
            raise ValueError("optgen.torch optimizers step dense parameters (contiguous or channels_last); a "
                             f"parameter of shape {tuple(local.shape)} has strides {local.stride()}")
        if self._device is None:
            self._device = local.device
        elif local.device != self._device:
            raise ValueError(f"optgen.torch optimizers step parameters of one device; found {self._device} and "
                             f"{local.device}: use one optimizer per device")

    def _hyperparameter_set(self, group: _GroupDict, key: str) -> None:
        """A group's hyperparameter changed: to the device now, once bound."""
        if self._engine is None or self._structure_changed or key == "params":
            return
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError(f"param_groups[...]['{key}'] changed during a CUDA graph capture; change "
                               "hyperparameters between replays (they reach the device in stream order)")
        binding = self._bindings[self._index_of(group)]
        self._engine.prepare(_stream_of(self._device))  # ordered with what runs next on the current stream
        try:
            for name, value in self._group_values({key: group[key]}, binding.dtype).items():
                for g in binding.engine_groups:
                    self._engine.set(name, value, g)
        except OptgenError:
            # A flag that selects kernels and states (amsgrad, or momentum turning SGD's buffer on):
            # the next step builds a new engine with the variant it selects.
            self._structure_changed = True

    def _group_values(self, group: Dict[str, Any], dtype: Optional[torch.dtype]) -> Dict[str, float]:
        """A param group's hyperparameters (all of them, or those of a partial dict: one that
        changed) under the spec's names, every value a float. `dtype`: that of the group's first
        parameter with a gradient, None where unknown, for a subclass whose defaults depend on it."""
        return spec_values(group, self._spec_names, tuples=self._tuples)

    def _check_ranges(self, values: Dict[str, float]) -> None:
        """torch.optim's argument checks (check_ranges) on the spec's values; a subclass whose
        published class checks otherwise (Prodigy's beta3, whose None the spec says as -1) has its own."""
        check_ranges(values)

    def _index_of(self, group: dict) -> int:
        return next(i for i, g in enumerate(self.param_groups) if g is group)

    # ---- stepping ----

    @property
    def engine(self) -> Optional[Engine]:
        """The optgen engine of the current binding (None before the first step)."""
        return self._engine

    def step(self, closure: Optional[Callable[[], float]] = None):
        """One fused step of every parameter that has a gradient (a closure is called first, with
        grad enabled, as torch does). Under torch.amp.GradScaler the step reads its grad_scale and
        found_inf on the device: no host synchronization. Step hooks and the profiler are served
        as torch serves them; without either, the step skips torch's wrapper (a few microseconds)."""
        if _observed(self):
            return _observed_step(self, closure)
        return self._unobserved_step(closure)

    step.hooked = True  # torch.optim.Optimizer must not wrap it: it does so itself when observed

    def _unobserved_step(self, closure: Optional[Callable[[], float]]):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._device is None:  # no parameters
            return loss
        if torch.cuda.current_device() != self._device.index:
            with torch.cuda.device(self._device):
                self._step()
        else:
            self._step()
        return loss

    def _step(self) -> None:
        if self._structure_changed:
            self._rebuild()
        elif not self._grads_unchanged():
            self._follow_grads()
        scale = getattr(self, "grad_scale", None)
        found = getattr(self, "found_inf", None)
        self._engine.step(_stream_of(self._device), self._amp_pointer(scale, "grad_scale"),
                          self._amp_pointer(found, "found_inf"))

    def _amp_pointer(self, t: Optional[torch.Tensor], what: str) -> int:
        if t is None:
            return 0
        if t.dtype != torch.float32 or t.device != self._device or t.numel() != 1:
            raise ValueError(f"{what} must be one float32 on {self._device}; got {t.dtype} {tuple(t.shape)} "
                             f"on {t.device}")
        return t.data_ptr()

    def _grads_unchanged(self) -> bool:
        return all(b.grads_unchanged(self._static_grads) for b in self._bindings)

    def _follow_grads(self) -> None:
        """Some .grad is a new tensor (torch makes new ones after zero_grad(set_to_none=True)):
        rebind those whose memory moved, or rebuild when one appeared or disappeared.

        This runs on every step of the usual training loop, so it reads what it must and no more:
        each gradient's address and strides. torch's .grad setter already holds a gradient to its
        parameter's dtype, device and size, so strides equal to the parameter's (those of the
        gradient bound first) make it fit; anything else goes through _check_grad."""
        for b in self._bindings:
            grads = list(map(_grad_of, b.params))
            try:
                addresses, strides = _addresses_and_strides(b._locals(grads))
            except RuntimeError:  # a sparse gradient, say: _check_grad says what is wrong
                for p, g in zip(b.params, grads):
                    if g is not None:
                        self._check_grad(p, g)
                raise
            if strides != b.grad_strides or b.distributed:
                for i, (p, g) in enumerate(zip(b.params, grads)):
                    if (g is None) != (b.grad_strides[i] is None):
                        self._rebuild()  # a gradient appeared or disappeared
                        return
                    if g is not None and (strides[i] != b.grad_strides[i] or b.distributed):
                        self._check_grad(p, g)
            moved = defaultdict(list)
            for i, (address, old) in enumerate(zip(addresses, b.grad_addresses)):
                if address != old:
                    moved[b.where[i][0]].append(i)
            for group, indices in moved.items():
                self._engine.rebind(group, [b.where[i][1] for i in indices],
                                    [_local(b.params[i]).data_ptr() for i in indices], [addresses[i] for i in indices])
            b.bind(grads, addresses, strides)

    def _check_grad(self, p: torch.Tensor, g: torch.Tensor) -> None:
        local_p, local_g = _local(p), _local(g)
        if local_g.is_sparse:
            raise RuntimeError("optgen.torch optimizers do not support sparse gradients")
        if local_g.dtype != local_p.dtype or local_g.device != local_p.device or \
                local_g.shape != local_p.shape or local_g.stride() != local_p.stride():
            raise RuntimeError(
                f"a gradient does not match its parameter: param {local_p.dtype} {tuple(local_p.shape)} strides "
                f"{local_p.stride()} on {local_p.device}, grad {local_g.dtype} {tuple(local_g.shape)} strides "
                f"{local_g.stride()} on {local_g.device}")

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch's zero_grad; with static_grads, gradients are zeroed in place and keep their memory."""
        super().zero_grad(set_to_none=set_to_none and not self._static_grads)

    # ---- binding ----

    @torch.no_grad()
    def _rebuild(self) -> None:
        """A new engine for the params that have gradients now, from self.state and the groups."""
        if self._device is not None and torch.cuda.is_current_stream_capturing():
            raise RuntimeError(
                "the optimizer's structure changed during a CUDA graph capture (its first step, a new param group, "
                "load_state_dict, or a parameter whose .grad appeared or disappeared), which needs a rebuild that "
                "synchronizes; take one step before capturing (torch's recipe warms up on a side stream)")
        self._pull_progress()
        engine = self._engine_factory(self._storage)
        bindings = []
        masters = []  # (engine group, tensor, param) of each param with a master copy
        for group in self.param_groups:
            binding = _Binding(list(group["params"]))
            binding.dtype = next((_local(p).dtype for p in binding.params if p.grad is not None), None)
            values = self._group_values(group, binding.dtype)
            presence = engine.state_presence(values)
            factors = any(x in (FACTORED, NOT_FACTORED) or (x and s.shape in (ROWS, COLS))
                          for s, x in zip(engine.states, presence))
            buckets = defaultdict(list)  # (dtype, step, scalar state) -> param indices
            for i, p in enumerate(binding.params):
                if p.grad is None:
                    continue
                self._check_grad(p, p.grad)
                if factors:
                    self._check_factorable(p)
                state = self._state_of(p, presence, values)
                scalars = tuple(float(state[s.name]) for s in engine.scalar_states)
                buckets[(_local(p).dtype, int(state["step"]), scalars)].append(i)
            if len(buckets) > 1 and engine.reduces_over_group(values):
                kinds = ", ".join(f"{len(v)} of {k[0]} at step {k[1]}" for k, v in buckets.items())
                raise ValueError(
                    f"param group {len(bindings)} reduces over all its parameters (a global gradient norm: "
                    f"max_grad_norm > 0), but optgen would step them as {len(buckets)} groups of one dtype and "
                    f"step count each ({kinds}), each with a norm of its own; put parameters of different dtypes "
                    "in param groups of their own, and give every parameter of the group a gradient from the first "
                    "step on")
            if len(buckets) > 1 and (why := self._split_problem(group, [(k[0], k[1]) for k in buckets])):
                raise ValueError(f"param group {len(bindings)}: {why}")
            for (dtype, step, scalars), indices in buckets.items():
                tensors = [self._tensor_binding(binding.params[i], presence) for i in indices]
                g = engine.add_param_group(tensors, values)
                engine.set_step_count(g, step)
                # Parameters that never stepped hold the scalar state's initial values, which the
                # new group has already: setting them would reset a state of the optimizer (Prodigy's
                # D, one value every group shares) to its start.
                if step > 0:
                    for s, value in zip(engine.scalar_states, scalars):
                        engine.set_scalar_state(s.name, g, value)
                binding.engine_groups.append(g)
                binding.where.update({i: (g, t) for t, i in enumerate(indices)})
                if self._master:
                    masters.extend((g, t, binding.params[i]) for t, i in enumerate(indices))
            binding.bind(list(map(_grad_of, binding.params)))
            bindings.append(binding)
        if any(b.distributed for b in bindings):
            self._reduce_across_ranks(engine, [b.params[i] for b in bindings for i in b.where])
            engine.set_matrix_hook(RankMatrices(engine, {where: b.params[i] for b in bindings
                                                         for i, where in b.where.items()}, self._device))
        if self._device is not None:
            with torch.cuda.device(self._device):
                copied = self._bind_masters(engine, masters)
                engine.prepare(_stream_of(self._device))
                if copied:  # from the old engine's memory, which may go with it below
                    torch.cuda.current_stream(self._device).synchronize()
        self._engine, self._bindings = engine, bindings
        self._structure_changed = False

    def _reduce_across_ranks(self, engine: Engine, params: List[torch.Tensor]) -> None:
        """DTensor params: each rank steps its shards, and every reduction (a norm, a global gradient
        norm, a sum over the group) is all-reduced over the ranks between the engine's stages."""
        groups, error = shard_groups(params)
        try:
            engine.set_reduction_hook(RankReductions(groups, error, self._device))
        except OptgenError as e:
            raise ValueError(f"optgen.torch.{self.__class__.__name__} cannot step DTensor params: {e}") from None

    def _bind_masters(self, engine: Engine, masters: List[tuple]) -> bool:
        """state[p]["master_param"] becomes a view of the new engine's master copy of p (for each
        (engine group, tensor, p) of `masters`), which the engine started from p; the master p had
        (the old engine's, or load_state_dict's) is copied over it, on the current stream. Whether
        any was copied."""
        if not any(self.state[p].get(MASTER_PARAM) is not None for _, _, p in masters):
            for g, t, p in masters:
                self._bind_master(engine, g, t, p)
            return False
        # The engine set its masters by copies on the legacy default stream that may still be in
        # flight; the current stream may be another (a side stream's warm-up before a capture).
        torch.cuda.synchronize(self._device)
        for g, t, p in masters:
            self._bind_master(engine, g, t, p)
        return True

    def _bind_master(self, engine: Engine, group: int, tensor: int, p: torch.Tensor) -> None:
        local = _local(p)
        address = engine.master_weights(group, tensor)
        if address:
            view = torch.as_tensor(DeviceArray(address, local.shape, "<f4", local.stride(), engine),
                                   device=local.device)
        elif local.numel() == 0:
            view = torch.empty_like(local, dtype=torch.float32)
        else:
            raise OptgenError(f"the engine keeps no master copy of a parameter of shape {tuple(local.shape)} "
                              f"({local.dtype}), though it was made with one")
        state = self.state[p]
        old = state.get(MASTER_PARAM)
        if old is not None:
            self._check_master(p, old)
            old_local = _local(old)
            view.copy_(old_local if old_local.shape == view.shape else old_local.reshape(view.shape))
        if local is not p:  # a DTensor's master is a DTensor as its other states are
            from torch.distributed.tensor import DTensor
            view = DTensor.from_local(view, p.device_mesh, p.placements, run_check=False, shape=p.shape,
                                      stride=p.stride())
        state[MASTER_PARAM] = view

    @staticmethod
    def _check_master(p: torch.Tensor, value: Any) -> None:
        if not isinstance(value, torch.Tensor) or value.numel() != p.numel():
            shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise ValueError(f"state {MASTER_PARAM!r} of a parameter of shape {tuple(p.shape)} must be a tensor of "
                             f"that shape; got {shape}")

    def _check_factorable(self, p: torch.Tensor) -> None:
        """A parameter of a group whose variant factors tensors (states per row or column, or
        states only for some tensors): the engine reads a tensor of two or more dimensions as B
        matrices of its last two, in row-major order, so such a parameter must be a whole,
        contiguous tensor; a DTensor, one sharded along its first dimension only (each rank then holds
        whole rows, and the ranks sum their parts of each column's and matrix's sums)."""
        if len(self._bound_shape(p)) < 2:
            return
        if _local(p) is not p:
            split = [x.dim for x in p.placements if x.is_shard() and x.dim != 0]
            if split:
                raise ValueError(f"a parameter of shape {tuple(p.shape)} is a DTensor sharded along dimension "
                                 f"{split[0]} (Shard({split[0]})), but this optimizer factors tensors of two or more "
                                 "dimensions into rows and columns of their last two and steps shards of whole rows "
                                 "only: shard such parameters along their first dimension (Shard(0), as fully_shard "
                                 "does)")
            p = _local(p)
        if not p.is_contiguous():
            raise ValueError(f"a parameter of shape {tuple(p.shape)} has strides {p.stride()} (channels_last?), but "
                             "this optimizer factors tensors of two or more dimensions into rows and columns of their "
                             "last two dimensions, which needs them contiguous: call .contiguous() on the module's "
                             "parameters (e.g. model.to(memory_format=torch.contiguous_format)) before making it")

    def _state_of(self, p: torch.Tensor, presence: List[int], values: Dict[str, float]) -> dict:
        """p's state, made where missing: the states its group has for a tensor of p's dimensions
        (`presence`: engine.state_presence), 'step', the scalar states."""
        state = self.state[p]
        state.setdefault("step", torch.tensor(0.0))
        ndim = len(self._bound_shape(p))
        for s, x in zip(self._describe.states, presence):
            if _capi.present(x, ndim):
                state[s.name] = self._as_state(p, s, state.get(s.name), s.initial_value(values))
                if s.init_param and s.shape == ELEMENTS and int(state["step"]) == 0:  # what the first step reads
                    if s.name in self._quantized:
                        state[s.name] = self._quantized_state(p, s, p.detach(), 0.0)
                    else:
                        state[s.name].copy_(p.detach())
        for s in self._describe.scalar_states:
            state.setdefault(s.name, torch.tensor(s.initial_value(values), dtype=torch.float64))
        return state

    def _as_state(self, p: torch.Tensor, s: State, value: Optional[torch.Tensor], initial: float) -> torch.Tensor:
        """State `s`'s buffer for p: `value` if it already fits (the state's dtype, its shape and
        layout, p's device), else a copy of it that does, or a new one filled with `initial`. Its
        shape is p's, or for a state per row p.shape[:-1] + (1,), per column p.shape[:-2] + (1,
        p.shape[-1]): torch.optim.Adafactor's row_var and col_var. A value of another number of
        elements is a ValueError."""
        if s.name in self._quantized:
            return self._quantized_state(p, s, value, initial)
        dtype = self._state_dtypes[s.name]
        if s.shape == ELEMENTS:
            if value is None:
                return torch.full_like(p, initial, dtype=dtype)
            if value.dtype == dtype and value.shape == p.shape and \
                    _local(value).stride() == _local(p).stride() and _local(value).device == _local(p).device:
                return value
            self._check_state_size(p, s, value, tuple(p.shape))
            fitted = torch.empty_like(p, dtype=dtype)
            if value.shape != p.shape and _local(value) is not value and _local(p) is not p and \
                    list(value.placements) == list(p.placements) and _local(value).numel() == _local(p).numel():
                _local(fitted).copy_(_local(value).reshape(_local(p).shape))  # AdamMini's m per head, say
            else:
                fitted.copy_(value if value.shape == p.shape else value.reshape(p.shape))
            return fitted
        shape = _state_shape(self._bound_shape(p), s)
        if _local(p) is not p:
            return self._shard_of_state(p, s, value, initial, dtype, shape)
        if value is None:
            return torch.full(shape, initial, dtype=dtype, device=p.device)
        if value.dtype == dtype and tuple(value.shape) == shape and value.is_contiguous() and value.device == p.device:
            return value
        self._check_state_size(p, s, value, shape)
        fitted = torch.empty(shape, dtype=dtype, device=p.device)
        fitted.copy_(value.reshape(shape))
        return fitted

    def _quantized_state(self, p: torch.Tensor, s: State, value: Optional[torch.Tensor],
                         initial: float) -> torch.Tensor:
        """State `s`, kept in 8 bits, for p (its local shard for a DTensor): the engine's buffer
        for the tensor (uint8, Blockwise8Layout.buffer_bytes), or for one too small for 8 bits its
        float32 values in p's layout. `value` as it is where it is such a tensor already, else its
        values (a float tensor of p's shape, a DTensor, or a whole tensor for a DTensor p) stored;
        none: `initial`."""
        if s.shape != ELEMENTS:
            raise ValueError(f"state {s.name!r} has one value per {_capi.SHAPE_UNITS[s.shape]}, which 8-bit "
                             "blockwise storage does not keep: give it a torch dtype in state_dtype")
        local = _local(p)
        codec = self._codec(s.name, local.device)
        if codec.layout.in_8bit(local.numel()):
            size = (codec.layout.buffer_bytes(local.numel()),)
            if isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and tuple(value.shape) == size and \
                    value.device == local.device:
                return value
            return codec.buffer(_in_memory_order(self._local_values(p, s, value, initial), local))
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32 and _local(value) is value and \
                value.shape == local.shape and value.stride() == local.stride() and value.device == local.device:
            return value
        fitted = torch.empty_like(local, dtype=torch.float32)
        fitted.copy_(self._local_values(p, s, value, initial))
        return fitted

    def _codec(self, name: str, device: torch.device) -> Codec:
        """The codec of state `name`'s 8-bit dtype on `device` (one per dtype and device)."""
        key = (self._quantized[name], device)
        if key not in self._codecs:
            self._codecs[key] = Codec(*key)
        return self._codecs[key]

    def _local_values(self, p: torch.Tensor, s: State, value: Optional[torch.Tensor], initial: float) -> torch.Tensor:
        """The float32 values of state `s` of p's local tensor, in its shape: `initial` without a
        value; a DTensor's placed as p is; a plain tensor of the whole p cut to p's shard."""
        local = _local(p)
        if value is None:
            return torch.full(local.shape, initial, dtype=torch.float32, device=local.device)
        self._check_state_size(p, s, value, tuple(p.shape))
        value = value.reshape(p.shape).to(torch.float32)
        if local is not p:
            from torch.distributed.tensor import DTensor, distribute_tensor
            if isinstance(value, DTensor):
                value = value.redistribute(p.device_mesh, p.placements)
            else:  # every rank holds the whole state: each takes its part, no collective
                value = distribute_tensor(value.to(local.device), p.device_mesh, p.placements, src_data_rank=None)
        return _local(value).to(local.device)

    def _values_of(self, p: torch.Tensor, name: str, kept: torch.Tensor) -> torch.Tensor:
        """The float32 values of state `name`, kept in 8 bits as `kept` (_quantized_state), in p's
        shape and layout: a DTensor as p is."""
        local = _local(p)
        values = kept
        if kept.dtype == torch.uint8:
            values = torch.empty_like(local, dtype=torch.float32)
            _in_memory_order(values, local).copy_(self._codec(name, local.device).values(kept, local.numel()))
        if local is p:
            return values
        from torch.distributed.tensor import DTensor
        return DTensor.from_local(values, p.device_mesh, p.placements, run_check=False, shape=p.shape,
                                  stride=p.stride())

    def _shard_of_state(self, p: torch.Tensor, s: State, value: Optional[torch.Tensor], initial: float,
                        dtype: torch.dtype, shape: tuple) -> torch.Tensor:
        """A row or column state of DTensor p (sharded along its first dimension, _check_factorable) as
        a DTensor in torch's shape for the whole p as it is bound (_whole_bound_shape), of local
        shape `shape`: its rows placed as p's, the columns of a matrix (two dimensions) replicated,
        since every rank holding rows of it steps all its columns alike; the rows of a matrix whose
        shards are cut along its columns (_shard_dim 1) replicated likewise. `value` (a DTensor, or a
        plain tensor of the whole p's state) is taken as it is where it fits, else redistributed;
        none: filled with `initial`."""
        from torch.distributed.tensor import DTensor, Replicate, distribute_tensor
        bound = self._whole_bound_shape(p)
        whole = _state_shape(bound, s)
        across = self._shard_dim(p) == 1
        if across and s.shape == COLS:
            raise ValueError(f"state {s.name!r} has one value per column, which a parameter of shape {tuple(p.shape)} "
                             f"bound as {bound} cut along its columns does not keep on its ranks")
        replicated = s.shape == TENSOR or (len(bound) == 2 and (s.shape == ROWS if across else s.shape == COLS))
        placements = [Replicate() if replicated else x for x in p.placements]
        if isinstance(value, DTensor) and value.dtype == dtype and tuple(value.shape) == whole and \
                value.device_mesh == p.device_mesh and list(value.placements) == placements and \
                tuple(_local(value).shape) == shape and _local(value).is_contiguous():
            return value
        if value is None:
            local = torch.full(shape, initial, dtype=dtype, device=_local(p).device)
        else:
            self._check_state_size(p, s, value, whole)
            value = value.reshape(whole).to(dtype)
            if isinstance(value, DTensor):
                value = value.redistribute(p.device_mesh, placements)
            else:  # every rank holds the whole state: each takes its part, no collective
                value = distribute_tensor(value.to(_local(p).device), p.device_mesh, placements, src_data_rank=None)
            local = _local(value).contiguous()
        strides = torch.empty(whole, device="meta").stride()
        return DTensor.from_local(local, p.device_mesh, placements, run_check=False, shape=whole, stride=strides)

    @staticmethod
    def _check_state_size(p: torch.Tensor, s: State, value: torch.Tensor, shape: tuple) -> None:
        if value.numel() != math.prod(shape):
            per = {ELEMENTS: "", ROWS: " (one value per row of its last two dimensions)",
                   COLS: " (one value per column of its last two dimensions)", TENSOR: " (one value for the tensor)"}[s.shape]
            raise ValueError(f"state {s.name!r} of a parameter of shape {tuple(p.shape)} must have shape {shape}{per}; "
                             f"got one of shape {tuple(value.shape)}")

    def _split_problem(self, group: dict, parts: List[Tuple[torch.dtype, int]]) -> Optional[str]:
        """Why a param group cannot step as groups of one (dtype, step count) each, `parts`, or None:
        a subclass whose published optimizer would step them otherwise says so."""
        return None

    def _column_splits(self, p: torch.Tensor) -> int:
        """How many matrices of consecutive columns each of p's bound matrices is to a spec's matrix
        function (TensorBinding.column_splits): 1, unless a subclass splits them."""
        return 1

    def _bound_shape(self, p: torch.Tensor) -> tuple:
        """The shape p is bound with: its own (its local shard's), which a spec's rows and columns
        follow; a subclass whose blocks are declared per parameter (AdamMini) binds another of as
        many elements. A spec of blocks (`block_elements`: B) views p as the engine does: numel / B
        rows of B where numel is a positive multiple of B, else one dimension."""
        local = _local(p)
        block = self._describe.block_elements
        if block:
            return (local.numel() // block, block) if local.numel() and local.numel() % block == 0 else \
                (local.numel(),)
        return tuple(local.shape)

    def _whole_bound_shape(self, p: torch.Tensor) -> tuple:
        """For a DTensor p, the shape its whole tensor is bound with as one (its row and column
        states take torch's shape for it): p's own, or a subclass's as _bound_shape."""
        return tuple(p.shape)

    def _shard_dim(self, p: torch.Tensor) -> int:
        """The dimension of its bound shape that DTensor p's shards cut (TensorBinding.shard_dim):
        0, its rows, as fully_shard cuts p; a subclass that binds a block of p as one row, 1."""
        return 0

    def _tensor_binding(self, p: torch.Tensor, presence: List[int]) -> TensorBinding:
        local = _local(p)
        state = self.state[p]
        shape = self._bound_shape(p)
        return TensorBinding(local.data_ptr(), _local(p.grad).data_ptr(), local.numel(), OPTGEN_DTYPES[local.dtype],
                             [_local(state[s.name]).data_ptr() if _capi.present(x, len(shape)) else 0
                              for s, x in zip(self._describe.states, presence)],
                             shape=shape, whole_numel=p.numel() if local is not p else 0,
                             shard_dim=self._shard_dim(p) if local is not p else 0,
                             column_splits=self._column_splits(p))

    def _pull_progress(self) -> None:
        """Step counts and scalar state from the engine into self.state (synchronizes)."""
        if self._engine is None:
            return
        for binding in self._bindings:
            for i, (g, _) in binding.where.items():
                state = self.state[binding.params[i]]
                state["step"] = torch.tensor(float(self._engine.step_count(g)))
                for s in self._describe.scalar_states:
                    state[s.name] = torch.tensor(self._engine.scalar_state(s.name, g), dtype=torch.float64)

    def grad_norm(self, group: int = 0) -> torch.Tensor:
        """The global norm of param group `group`'s gradients at the last step, before clipping (what
        torch.nn.utils.clip_grad_norm_ returns; of the unscaled gradients under AMP, inf or NaN for a
        step GradScaler skips): a float32 scalar on the device, copied on the current stream (no
        host synchronization; inside a CUDA graph capture, each replay refreshes the copy). Only for
        a group with max_grad_norm > 0, after a step."""
        if not 0 <= group < len(self.param_groups):
            raise IndexError(f"param group {group} out of range: the optimizer has {len(self.param_groups)}")
        if self._engine is None or self._structure_changed:
            raise RuntimeError("grad_norm(): no step has been taken since the optimizer was built or changed")
        engine_groups = self._bindings[group].engine_groups
        if not engine_groups:
            raise RuntimeError(f"grad_norm(): param group {group} had no gradients at the last step")
        address = self._engine.grad_norm(engine_groups[0])  # one engine group when it clips (_rebuild)
        return torch.as_tensor(DeviceArray(address, (1,), "<f4"), device=self._device).clone().reshape(())

    # ---- checkpoints ----

    def state_dict(self) -> Dict[str, Any]:
        """torch's layout: per parameter 'step' and each state under its name (in its own dtype),
        and with master_weights 'master_param' (float32; a view of optgen's buffer, as the states
        are the live tensors: copy the dict to keep a snapshot; a state kept in 8 bits is a new
        float32 tensor of its values); a checkpoint of torch.optim's optimizer of the same name
        loads here and the other way round."""
        with torch.no_grad():
            self._pull_progress()
            packed = super().state_dict()
            if self._quantized:  # the values of 8-bit states, in new dicts: packed's are self.state's
                # torch numbers the params of every group in order (Optimizer.state_dict's param_mappings).
                for index, p in enumerate(chain.from_iterable(g["params"] for g in self.param_groups)):
                    state = packed["state"].get(index)
                    if state is not None and self._quantized.keys() & state.keys():
                        packed["state"][index] = {name: self._values_of(p, name, v) if name in self._quantized else v
                                                  for name, v in state.items()}
        return packed

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Loads a state_dict of this optimizer or of torch.optim's of the same name (checked as
        torch checks it); states are copied into their dtypes and the parameter's layout, a master
        copy ('master_param') into float32 (with master_weights; dropped without)."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        if any(len(a["params"]) != len(b["params"]) for a, b in zip(self.param_groups, saved_groups)):
            raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                             "optimizer's group")
        params = dict(zip(chain.from_iterable(g["params"] for g in saved_groups),
                          chain.from_iterable(g["params"] for g in self.param_groups)))
        state = defaultdict(dict)
        states = {s.name: s for s in self._describe.states}
        with torch.no_grad():
            for key, values in state_dict["state"].items():
                if key not in params:
                    continue
                p = params[key]
                state[p] = {name: self._loaded(p, name, v, states) for name, v in values.items()
                            if name != MASTER_PARAM or self._master}
        groups = []
        for group, saved in zip(self.param_groups, saved_groups):
            for p in group["params"]:
                if "step" in state[p] or not states.keys() & state[p].keys():
                    continue
                # A checkpoint that counts steps per group (k: schedulefree's, prodigyopt's,
                # dadaptation's) gives each parameter the count; torch's SGD counts none: a momentum
                # buffer means it has taken one at least.
                state[p]["step"] = torch.tensor(float(number(saved["k"], "k")) if "k" in saved else 1.0)
            # A checkpoint that keeps scalar state per param group (prodigyopt's and dadaptation's d)
            # gives it to each parameter of the group that has none of its own.
            for s in self._describe.scalar_states:
                if s.name in saved:
                    value = torch.tensor(number(saved[s.name], s.name), dtype=torch.float64)
                    for p in group["params"]:
                        state[p].setdefault(s.name, value.clone())
            # A hyperparameter the saved group lacks (dadaptation's groups keep no d0) keeps this one's.
            new = {k: v for k, v in group.items() if k != "params"}
            new.update({k: v for k, v in saved.items() if k != "params"})
            new["params"] = group["params"]
            self._group_values(new, None)
            groups.append(_GroupDict(new, self._hyperparameter_set))
        self.state, self.param_groups = state, groups
        # The loaded step counts and scalar state are the optimizer's progress now: the rebuild at
        # the next step must not pull the current engine's over them.
        self._engine = None
        self._structure_changed = True

    def _loaded(self, p: torch.Tensor, name: str, value: Any, states: Dict[str, State]) -> Any:
        if name == MASTER_PARAM:  # float32 in p's layout, copied into the engine's master at the next step
            self._check_master(p, value)
            fitted = torch.empty_like(p, dtype=torch.float32)
            fitted.copy_(value if value.shape == p.shape else value.reshape(p.shape))
            return fitted
        if not isinstance(value, torch.Tensor):
            return value
        if name == "step":
            return torch.tensor(float(value))
        if name in states:
            if states[name].shape in (ROWS, COLS) and len(self._bound_shape(p)) < 2:
                raise ValueError(f"state {name!r} has one value per {_capi.SHAPE_UNITS[states[name].shape]} of a "
                                 f"tensor's last two dimensions, but the state_dict gives it for a parameter of shape "
                                 f"{tuple(p.shape)}")
            return self._as_state(p, states[name], value, 0.0)
        if any(name == s.name for s in self._describe.scalar_states):
            return torch.tensor(number(value, name), dtype=torch.float64)
        return value


def _in_memory_order(values: torch.Tensor, layout: torch.Tensor) -> torch.Tensor:
    """`values` (of `layout`'s shape and, where it is a view to write through, strides) as one
    dimension in `layout`'s memory order, the order in which the engine reads a state: its
    dimensions by descending stride (a dense layout, such as channels_last)."""
    order = sorted(range(layout.dim()), key=lambda d: -layout.stride(d))
    return values.permute(order).reshape(-1)


def _state_shape(shape: tuple, s: State) -> tuple:
    """The torch shape of state `s` for a parameter bound with `shape` (of two or more dimensions,
    for ROWS and COLS): torch.optim.Adafactor's, the last dimension (rows: one value per row) or
    second to last (columns) made 1; for TENSOR, () (one value, as torch keeps a parameter's step)."""
    if s.shape == ELEMENTS:
        return shape
    if s.shape == TENSOR:
        return ()
    if len(shape) < 2:
        raise ValueError(f"state {s.name!r} has one value per {_capi.SHAPE_UNITS[s.shape]}, but a parameter of "
                         f"shape {shape} has fewer than two dimensions")
    return shape[:-1] + (1,) if s.shape == ROWS else shape[:-2] + (1, shape[-1])


# torch's own wrapper (profiler range, step hooks), for steps that are observed.
_observed_step = torch.optim.Optimizer.profile_hook_step(Optimizer._unobserved_step)
