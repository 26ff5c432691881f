"""The C ABI (runtime/include/optgen/c_api.h) through ctypes, and Engine, one optimizer behind it.

Nothing here needs torch: an Engine takes device addresses and numbers. optgen.torch binds torch
tensors to it. Every C call that fails raises OptgenError with optgen_last_error()'s message.
"""

from __future__ import annotations

import ctypes
import enum
import os
import warnings
from dataclasses import dataclass, field
from typing import Callable, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _cuda_wheels

# The ABI this module was written against (OPTGEN_ABI_VERSION in c_api.h).
ABI_VERSION = 17


class _Enum(enum.IntEnum):
    """An int of the C ABI that prints by name: str() "BF16", repr() "optgen.DType.BF16"."""

    def __repr__(self) -> str:
        return f"optgen.{type(self).__name__}.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __format__(self, spec: str) -> str:
        return format(self.name, spec)


class DType(_Enum):
    """A dtype of params, grads and states (optgen_dtype). Q8 and UQ8 (C ABI 6; state dtypes only)
    are bitsandbytes' 8-bit blockwise signed and unsigned dynamic maps: a tensor's buffer is its
    codes (numel bytes, padded to 16), then a float32 absmax per block of 256 elements
    (Engine.state_buffer); a tensor under 4096 elements keeps the state in F32."""
    F32 = 0  # OPTGEN_F32
    BF16 = 1  # OPTGEN_BF16
    F16 = 2  # OPTGEN_F16
    Q8 = 3  # OPTGEN_Q8
    UQ8 = 4  # OPTGEN_UQ8


class ParamWrite(_Enum):
    """How a bf16 or f16 param is written after its update (C ABI 5, optgen_storage's param_write):
    rounded to nearest; from an fp32 master copy the update runs on; rounded stochastically (bf16)."""
    NEAREST = 0  # OPTGEN_PARAM_NEAREST
    MASTER = 1  # OPTGEN_PARAM_MASTER
    STOCHASTIC = 2  # OPTGEN_PARAM_STOCHASTIC


class ValueType(_Enum):
    """A hyperparameter's type (Hyperparameter.type): OPTGEN_BOOL, OPTGEN_INT, OPTGEN_FLOAT."""
    BOOL = 0
    INT = 1
    FLOAT = 2


class Shape(_Enum):
    """A state's shape (C ABI 4): one value per element of its tensor, per row (B*R values for a
    tensor of B matrices of R rows and C columns, its last two dimensions), per column (B*C), or
    one for the tensor."""
    ELEMENTS = 0
    ROWS = 1
    COLS = 2
    TENSOR = 3


class Presence(_Enum):
    """Whether a state exists for a tensor, in the variant some hyperparameters select (C ABI 4):
    not at all, for every tensor, only for factored tensors (two dimensions or more), only for the
    others."""
    ABSENT = 0
    ALWAYS = 1
    FACTORED = 2
    NOT_FACTORED = 3


F32, BF16, F16, Q8, UQ8 = DType
NEAREST, MASTER, STOCHASTIC = ParamWrite
BOOL, INT, FLOAT = ValueType
ELEMENTS, ROWS, COLS, TENSOR = Shape
ABSENT, ALWAYS, FACTORED, NOT_FACTORED = Presence
DTYPE_NAMES = {F32: "f32", BF16: "bf16", F16: "f16", Q8: "q8", UQ8: "uq8"}
PARAM_WRITE_NAMES = {NEAREST: "nearest", MASTER: "master", STOCHASTIC: "stochastic"}
SHAPE_NAMES = {ELEMENTS: "elements", ROWS: "rows", COLS: "cols", TENSOR: "tensor"}
SHAPE_UNITS = {ELEMENTS: "element", ROWS: "row", COLS: "column", TENSOR: "tensor"}  # one value per ...
PRESENCE_NAMES = {ABSENT: "absent", ALWAYS: "always", FACTORED: "factored", NOT_FACTORED: "not factored"}

# C ABI 4: int optgen_state_presence(const optgen_optimizer*, const double* hyperparameters,
# size_t count, int32_t* presence): per declared state, ABSENT ... NOT_FACTORED; and
# optgen_state_info's int32 `shape` after init_param.
STATE_PRESENCE = "optgen_state_presence"


class OptgenError(RuntimeError):
    """A failure reported by the optgen library: which call failed, the error, what to do."""


class SpecWarning(UserWarning):
    """What a spec loaded at run time does that is allowed but likely not meant (a literal beyond
    float range): the text `optgen check` prints, `file:line:col: warning: ...`, the line, a caret."""


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("param", ctypes.c_void_p),
        ("grad", ctypes.c_void_p),
        ("numel", ctypes.c_int64),
        ("grad_numel", ctypes.c_int64),
        ("dtype", ctypes.c_int32),
        ("grad_dtype", ctypes.c_int32),
        ("states", ctypes.POINTER(ctypes.c_void_p)),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("whole_numel", ctypes.c_int64),  # ABI 8
        ("shard_dim", ctypes.c_int32),  # ABI 12
        ("column_splits", ctypes.c_int32),  # ABI 16
    ]


class _Reduction(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("is_max", ctypes.c_int32), ("stage", ctypes.c_int32),
                ("over_group", ctypes.c_int32)]


class _ReductionResults(ctypes.Structure):
    _fields_ = [
        ("stage", ctypes.c_int32),
        ("num_reductions", ctypes.c_int32),
        ("reductions", ctypes.POINTER(_Reduction)),
        ("tensor_results", ctypes.c_void_p),
        ("num_tensors", ctypes.c_int64),
        ("group_results", ctypes.c_void_p),
        ("num_groups", ctypes.c_int64),
        ("stream", ctypes.c_void_p),
        ("row_results", ctypes.c_void_p),  # ABI 12
        ("row_runs", ctypes.POINTER(ctypes.c_int64)),
        ("num_row_runs", ctypes.c_int64),
        ("col_results", ctypes.c_void_p),  # ABI 11
        ("col_runs", ctypes.POINTER(ctypes.c_int64)),
        ("num_col_runs", ctypes.c_int64),
        ("matrix_results", ctypes.c_void_p),
        ("matrix_runs", ctypes.POINTER(ctypes.c_int64)),
        ("num_matrix_runs", ctypes.c_int64),
    ]


def _runs(runs, count: int) -> List[Tuple[int, int]]:
    """optgen_result_run[count] as (first, count) pairs."""
    return [(runs[2 * i], runs[2 * i + 1]) for i in range(count)]


_REDUCTION_HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_ReductionResults), ctypes.c_void_p)


class _Matrices(ctypes.Structure):  # ABI 10
    _fields_ = [("value", ctypes.c_int32), ("num_arguments", ctypes.c_int32), ("group", ctypes.c_size_t),
                ("tensor", ctypes.c_size_t), ("x", ctypes.c_void_p), ("batch", ctypes.c_int64),
                ("rows", ctypes.c_int64), ("cols", ctypes.c_int64), ("arguments", ctypes.POINTER(ctypes.c_double)),
                ("dtype", ctypes.c_int32)]  # ABI 13


class _MatrixWork(ctypes.Structure):
    _fields_ = [("stage", ctypes.c_int32), ("num_matrices", ctypes.c_int32),
                ("matrices", ctypes.POINTER(_Matrices)), ("stream", ctypes.c_void_p)]


_MATRIX_HOOK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_MatrixWork), ctypes.c_void_p)


class _Storage(ctypes.Structure):
    """optgen_storage (C ABI 5): what an optimizer stores; read during the create call only."""
    _fields_ = [
        ("state_dtype", ctypes.c_int32),
        ("num_state_dtypes", ctypes.c_size_t),
        ("state_names", ctypes.POINTER(ctypes.c_char_p)),
        ("state_dtypes", ctypes.POINTER(ctypes.c_int32)),
        ("param_write", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
    ]


class _HyperparameterInfo(ctypes.Structure):
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("type", ctypes.c_int32),
        ("default_value", ctypes.c_double),
        ("specialized", ctypes.c_int32),
        ("derived", ctypes.c_int32),
    ]


class _StateInfo(ctypes.Structure):
    # `shape` (ABI 4): ELEMENTS, ROWS, COLS or TENSOR.
    _fields_ = [("name", ctypes.c_char_p), ("init_value", ctypes.c_double), ("init_hyperparameter", ctypes.c_int32),
                ("init_param", ctypes.c_int32), ("shape", ctypes.c_int32)]


_P = ctypes.c_void_p  # an optgen_optimizer*
_SIZE = ctypes.c_size_t
_DOUBLES = ctypes.POINTER(ctypes.c_double)
_NAMES = ctypes.POINTER(ctypes.c_char_p)

# name: (argument types); every one returns int (0, or -1 with optgen_last_error()).
_CHECKED = {
    "optgen_add_param_group": [_P, ctypes.POINTER(_Tensor), _SIZE, _NAMES, _DOUBLES, _SIZE, ctypes.POINTER(_SIZE)],
    "optgen_prepare": [_P, ctypes.c_void_p],
    "optgen_step": [_P, ctypes.c_void_p],
    "optgen_step_amp": [_P, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p],
    "optgen_num_programs": [_P, ctypes.POINTER(_SIZE)],
    "optgen_block_elements": [_P, ctypes.POINTER(_SIZE)],
    "optgen_program_name": [_P, _SIZE, ctypes.POINTER(ctypes.c_char_p)],
    "optgen_run": [_P, ctypes.c_char_p, ctypes.c_void_p],
    "optgen_set": [_P, ctypes.c_char_p, ctypes.c_double, ctypes.c_int64],
    "optgen_get": [_P, ctypes.c_char_p, _SIZE, _DOUBLES],
    "optgen_step_count": [_P, _SIZE, ctypes.POINTER(ctypes.c_int64)],
    "optgen_set_step_count": [_P, _SIZE, ctypes.c_int64],
    "optgen_scalar_state": [_P, ctypes.c_char_p, _SIZE, _DOUBLES],
    "optgen_set_scalar_state": [_P, ctypes.c_char_p, _SIZE, ctypes.c_double],
    "optgen_num_groups": [_P, ctypes.POINTER(_SIZE)],
    "optgen_save": [_P, ctypes.c_char_p],
    "optgen_load": [_P, ctypes.c_char_p],
    "optgen_launches_last_step": [_P, ctypes.POINTER(ctypes.c_int)],
    "optgen_grad_norm": [_P, _SIZE, ctypes.POINTER(ctypes.c_void_p)],
    "optgen_set_chunk_size": [_P, ctypes.c_int64],
    "optgen_chunk_size": [_P, _SIZE, ctypes.POINTER(ctypes.c_int64)],
    "optgen_set_launch_shape": [_P, ctypes.c_int, ctypes.c_int],
    "optgen_launch_shape": [_P, _SIZE, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int)],
    "optgen_rebind": [_P, _SIZE, ctypes.POINTER(_SIZE), ctypes.POINTER(ctypes.c_void_p),
                      ctypes.POINTER(ctypes.c_void_p), _SIZE],
    "optgen_num_hyperparameters": [_P, ctypes.POINTER(_SIZE)],
    "optgen_describe_hyperparameter": [_P, _SIZE, ctypes.POINTER(_HyperparameterInfo)],
    "optgen_num_states": [_P, ctypes.POINTER(_SIZE)],
    "optgen_describe_state": [_P, _SIZE, ctypes.POINTER(_StateInfo)],
    "optgen_num_scalar_states": [_P, ctypes.POINTER(_SIZE)],
    "optgen_describe_scalar_state": [_P, _SIZE, ctypes.POINTER(_StateInfo)],
    "optgen_states_used": [_P, _DOUBLES, _SIZE, ctypes.POINTER(ctypes.c_int32)],
    "optgen_reduces_over_group": [_P, _DOUBLES, _SIZE, ctypes.POINTER(ctypes.c_int32)],
    STATE_PRESENCE: [_P, _DOUBLES, _SIZE, ctypes.POINTER(ctypes.c_int32)],
    "optgen_state_dtype": [_P, ctypes.c_char_p, ctypes.POINTER(ctypes.c_int32)],
    "optgen_master_weights": [_P, _SIZE, _SIZE, ctypes.POINTER(ctypes.c_void_p)],
    "optgen_state_buffer": [_P, ctypes.c_char_p, _SIZE, _SIZE, ctypes.POINTER(ctypes.c_void_p),
                            ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(_SIZE)],
    "optgen_set_reduction_hook": [_P, _REDUCTION_HOOK, ctypes.c_void_p],
    "optgen_set_matrix_hook": [_P, _MATRIX_HOOK, ctypes.c_void_p],
    "optgen_apply_matrix_function": [_P, _SIZE, ctypes.c_int, _DOUBLES, ctypes.c_void_p, ctypes.c_void_p,
                                     ctypes.c_int64, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p],
    "optgen_create_from_spec": [ctypes.c_char_p, _NAMES, _DOUBLES, _SIZE, ctypes.POINTER(_Storage),
                                ctypes.POINTER(_P)],
    "optgen_blockwise8_layout": [ctypes.c_int32, ctypes.POINTER(ctypes.c_float), ctypes.POINTER(ctypes.c_int32),
                                 ctypes.POINTER(ctypes.c_int64)],  # ABI 13
    # ABI 12: several optimizers as one (the set's handle is an optgen_optimizers*).
    "optgen_optimizers_create": [ctypes.POINTER(_P), _SIZE, ctypes.POINTER(_P)],
    "optgen_optimizers_prepare": [_P, ctypes.c_void_p],
    "optgen_optimizers_step_amp": [_P, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p],
    "optgen_optimizers_launches_last_step": [_P, ctypes.POINTER(ctypes.c_int)],
    "optgen_optimizers_save": [_P, ctypes.c_char_p],
    "optgen_optimizers_load": [_P, ctypes.c_char_p],
}


def library_path() -> str:
    """Where the optgen library is: $OPTGEN_LIBRARY, else liboptgen.so beside this module."""
    return os.environ.get("OPTGEN_LIBRARY") or os.path.join(os.path.dirname(__file__), "liboptgen.so")


class _Library:
    """The loaded library, with every function's argument and result types declared."""

    def __init__(self, path: str):
        _cuda_wheels.preload()  # NVRTC and cuBLASLt from the CUDA wheels, for a machine without the toolkit
        try:
            self.dll = ctypes.CDLL(path)
        except OSError as e:
            raise OptgenError(
                f"cannot load the optgen library {path}: {e}; install the package (pip install .) or set "
                "OPTGEN_LIBRARY to the liboptgen.so a build made (build/python/liboptgen.so)") from None
        self.dll.optgen_abi_version.restype = ctypes.c_int32
        version = self.dll.optgen_abi_version()
        if version != ABI_VERSION:
            raise OptgenError(f"{path} speaks C ABI {version}, but this optgen package was written for "
                              f"ABI {ABI_VERSION}; install the package and the library from one build")
        self.dll.optgen_last_error.restype = ctypes.c_char_p
        self.dll.optgen_version.restype = ctypes.c_char_p
        self.dll.optgen_builtin_specs.restype = ctypes.c_char_p
        for name in ("optgen_name", "optgen_spec", "optgen_warnings", "optgen_matrix_values"):
            getattr(self.dll, name).restype = ctypes.c_char_p
            getattr(self.dll, name).argtypes = [_P]
        self.dll.optgen_matrix_function_scratch_bytes.restype = ctypes.c_size_t
        self.dll.optgen_matrix_function_scratch_bytes.argtypes = [_P, _SIZE, ctypes.c_int] + [ctypes.c_int64] * 3 + [
            ctypes.c_int32]
        for name in ("optgen_destroy", "optgen_optimizers_destroy"):
            getattr(self.dll, name).argtypes = [_P]
            getattr(self.dll, name).restype = None
        for name, argtypes in _CHECKED.items():
            function = getattr(self.dll, name, None)
            if function is not None:
                function.argtypes = argtypes
                function.restype = ctypes.c_int

    def has(self, name: str) -> bool:
        return getattr(self.dll, name, None) is not None

    def call(self, name: str, *args) -> None:
        function = getattr(self.dll, name, None)
        if function is None:
            raise OptgenError(f"the optgen library {library_path()} has no {name}(); it was built without it")
        for i, (arg, kind) in enumerate(zip(args, function.argtypes)):
            _check_argument(name, i, arg, kind)
        if function(*args) != 0:
            raise OptgenError(self.dll.optgen_last_error().decode())

    def create_builtin(self, spec: str, names, values, count: int, storage, out) -> None:
        """optgen_<spec>_create(names, values, count, storage, out); `storage` a pointer to a
        _Storage (ctypes.byref) or None."""
        try:
            create = getattr(self.dll, f"optgen_{spec}_create")
        except AttributeError:
            raise OptgenError(f"the optgen library has no built-in optimizer '{spec}' (it has: "
                              f"{', '.join(builtin_specs())})") from None
        create.argtypes = [_NAMES, _DOUBLES, _SIZE, ctypes.POINTER(_Storage), ctypes.POINTER(_P)]
        create.restype = ctypes.c_int
        if create(names, values, count, storage, out) != 0:
            raise OptgenError(self.dll.optgen_last_error().decode())


_library: Optional[_Library] = None


def library() -> _Library:
    global _library
    if _library is None:
        _library = _Library(library_path())
    return _library


def builtin_specs() -> list:
    """The built-in optimizers the library holds, by spec name."""
    names = library().dll.optgen_builtin_specs().decode()
    return names.split(",") if names else []


def version() -> str:
    """The optgen release the library was built from."""
    return library().dll.optgen_version().decode()


@dataclass(frozen=True)
class Hyperparameter:
    name: str
    type: int  # BOOL, INT or FLOAT
    default: float
    specialized: bool  # selects kernels and states: fixed once a group is added
    derived: bool  # computed from the others


@dataclass(frozen=True)
class State:
    name: str
    init_value: float
    init_hyperparameter: Optional[str]  # the hyperparameter it starts as, or None: init_value
    init_param: bool = False  # starts as the parameter (read in its place at the group's first step)
    shape: int = ELEMENTS  # ELEMENTS, ROWS, COLS or TENSOR (a scalar state: ELEMENTS)

    def initial_value(self, hyperparameters: Mapping[str, float]) -> float:
        return hyperparameters[self.init_hyperparameter] if self.init_hyperparameter else self.init_value

    def numel(self, shape: Sequence[int]) -> int:
        """How many values this state holds for a tensor of `shape`: its numel, for ROWS and COLS B*R
        and B*C, the tensor being B matrices of R rows and C columns (its last two dimensions), for
        TENSOR 1."""
        numel = 1
        for n in shape:
            numel *= n
        if self.shape == ELEMENTS:
            return numel
        if self.shape == TENSOR:
            return 1
        if len(shape) < 2:
            raise OptgenError(f"state {self.name} has one value per {SHAPE_UNITS[self.shape]}, but a tensor of "
                              f"shape {list(shape)} has no rows and columns (it needs two dimensions or more)")
        rows, cols = shape[-2], shape[-1]
        if rows == 0 or cols == 0:
            return 0
        matrices = numel // (rows * cols)
        return matrices * (rows if self.shape == ROWS else cols)


def present(presence: int, ndim: int) -> bool:
    """Whether a state of this presence (ABSENT ... NOT_FACTORED) exists for a tensor of `ndim`
    dimensions: a tensor of two or more is factored (B matrices of its last two dimensions)."""
    if presence == ALWAYS:
        return True
    if presence == FACTORED:
        return ndim >= 2
    if presence == NOT_FACTORED:
        return ndim < 2
    return False


@dataclass(frozen=True)
class Storage:
    """What an optimizer stores beyond the caller's params and grads (optgen_storage, C ABI 5;
    optgen::StorageOptions): the states' dtype, per-state dtypes by name, how bf16 and f16 params
    are written, and the seed of stochastic rounding. Each param group's dtype picks, with this,
    the kernel set it runs; add_param_group refuses a group whose kernel set was not generated (a
    spec's `storage:` list; the built-in adam and adamw have f32, bf16, f16, "bf16:bf16",
    "f32:bf16", "bf16+master", "f16+master", "bf16+sr:bf16" and "bf16:bf16:exp_avg_sq=f32", the
    other built-ins f32 and bf16 params with f32 states), or a master copy or stochastic rounding
    asked for params that have no use for it (f32 params; stochastic rounding of f16 params).

    Storage() is the default: f32 states, params rounded to nearest.
        Storage(BF16, {"exp_avg_sq": F32})   bf16 states but exp_avg_sq
        Storage(param_write=MASTER)          an fp32 master copy of each bf16 or f16 param
        Storage(BF16, param_write=STOCHASTIC, seed=1)   bf16 params rounded stochastically
        Storage(Q8, {"exp_avg_sq": UQ8})     bitsandbytes' AdamW8bit states (engine-allocated:
                                             TensorBinding.states None; Engine.state_buffer reads them)
    """
    state_dtype: int = F32  # every state not in state_dtypes: F32, BF16, F16, Q8 or UQ8
    # Per state, by name: a dtype of its own. Given as a mapping; kept as (name, dtype) pairs.
    state_dtypes: Union[Mapping[str, int], Tuple[Tuple[str, int], ...]] = field(default_factory=tuple)
    param_write: int = NEAREST  # NEAREST, MASTER or STOCHASTIC
    seed: int = 0  # of stochastic rounding's random stream, 0 <= seed < 2**64

    def __post_init__(self):
        def dtype(value, what):
            if isinstance(value, bool) or not isinstance(value, int) or value not in DTYPE_NAMES:
                raise ValueError(f"{what} must be F32, BF16, F16, Q8 or UQ8 ({', '.join(str(int(d)) for d in DType)}); "
                                 f"got {value!r}")
            return DType(value)

        object.__setattr__(self, "state_dtype", dtype(self.state_dtype, "Storage.state_dtype"))
        pairs = self.state_dtypes.items() if isinstance(self.state_dtypes, Mapping) else self.state_dtypes
        pairs = tuple((name, dtype(d, f"the dtype of state {name!r}")) for name, d in pairs)
        for name, _ in pairs:
            if not isinstance(name, str) or not name:
                raise ValueError(f"Storage.state_dtypes: state names are non-empty strings; got {name!r}")
        if len({name for name, _ in pairs}) != len(pairs):
            raise ValueError(f"Storage.state_dtypes gives a state a dtype twice: {pairs}")
        object.__setattr__(self, "state_dtypes", pairs)
        if isinstance(self.param_write, bool) or self.param_write not in PARAM_WRITE_NAMES:
            raise ValueError(f"Storage.param_write must be NEAREST, MASTER or STOCHASTIC "
                             f"({', '.join(str(int(w)) for w in ParamWrite)}); got {self.param_write!r}")
        object.__setattr__(self, "param_write", ParamWrite(self.param_write))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or not 0 <= self.seed < 2 ** 64:
            raise ValueError(f"Storage.seed must be an int in [0, 2**64); got {self.seed!r}")

    def dtype_of(self, name: str) -> int:
        """The dtype state `name` is stored in under this storage."""
        return dict(self.state_dtypes).get(name, self.state_dtype)

    def _struct(self) -> tuple:
        """The optgen_storage, and what it points into (alive as long as the tuple)."""
        names = _strings(name for name, _ in self.state_dtypes)
        dtypes = (ctypes.c_int32 * max(1, len(self.state_dtypes)))(*(d for _, d in self.state_dtypes))
        struct = _Storage(self.state_dtype, len(self.state_dtypes), ctypes.cast(names, _NAMES),
                          ctypes.cast(dtypes, ctypes.POINTER(ctypes.c_int32)), self.param_write, self.seed)
        return struct, names, dtypes


def _absmax_offset(numel: int) -> int:
    """blockwise8::absmax_offset: an 8-bit buffer's codes, padded to 16 bytes, then the absmax."""
    return (numel + 15) // 16 * 16


@dataclass(frozen=True)
class StateBuffer:
    """One tensor's state as the engine holds it (Engine.state_buffer): `numel` values stored as
    `dtype` in `bytes` bytes at device address `address`. Q8 and UQ8: the codes, padded to 16
    bytes, then a float32 absmax per block of 256 (optgen/blockwise8.h's absmax_offset)."""
    address: int
    numel: int
    dtype: int
    bytes: int

    @property
    def absmax_offset(self) -> int:
        """Where an 8-bit state's block absmax starts, in bytes from `address`."""
        return _absmax_offset(self.numel)


@dataclass(frozen=True)
class Blockwise8Layout:
    """How 8-bit state dtype Q8 or UQ8 stores a tensor's values (optgen_blockwise8_layout, C ABI 13;
    optgen/blockwise8.h): `map` the value of each code (256, ascending), `block_size` the elements
    each float32 absmax covers, `min_numel` the least elements kept in 8 bits (fewer: F32 values)."""
    dtype: int
    map: Tuple[float, ...]
    block_size: int
    min_numel: int

    @staticmethod
    def of(dtype: int) -> "Blockwise8Layout":
        values, block, least = (ctypes.c_float * 256)(), ctypes.c_int32(), ctypes.c_int64()
        library().call("optgen_blockwise8_layout", dtype, values, ctypes.byref(block), ctypes.byref(least))
        return Blockwise8Layout(DType(dtype), tuple(values), block.value, least.value)

    def in_8bit(self, numel: int) -> bool:
        """Whether a tensor of `numel` elements keeps the state as codes (else as F32 values)."""
        return numel >= self.min_numel

    def blocks(self, numel: int) -> int:
        return -(-numel // self.block_size)

    def absmax_offset(self, numel: int) -> int:
        """Where the block absmax starts in a tensor's buffer: after the codes, padded to 16 bytes."""
        return _absmax_offset(numel)

    def buffer_bytes(self, numel: int) -> int:
        """The bytes of a tensor's buffer: its codes, padded to 16, then a float32 absmax per block."""
        return self.absmax_offset(numel) + 4 * self.blocks(numel)


@dataclass(frozen=True)
class Reduction:
    """One reduction of an engine's variant, as a reduction hook sees it (optgen_reduction)."""
    name: str
    is_max: bool  # else a sum
    stage: int  # the Reduce stage that computes it, from 1
    over_group: bool  # over every tensor of a group (its results also in group_results), else per tensor


@dataclass
class ReductionResults:
    """Where a Reduce stage just launched left its results (optgen_reduction_results): reduction r's
    result for tensor t at tensor_results + 8 * (r * num_tensors + t), for group g at group_results +
    8 * (r * num_groups + g), raw sums and maxima as float64 in device memory, written by work
    enqueued on `stream`. The stage's own reductions are those whose stage is `stage`. A spec that
    sums over the rows or columns of matrices (Adafactor, Adam-mini) adds the row, column and
    matrix results that are each rank's part (sums over the rows, or the columns, of tensors of two
    dimensions bound as shards cut along them: TensorBinding.shard_dim), as runs (first, count) of
    float32 at row_results, col_results and matrix_results, the same on every rank."""
    stage: int
    reductions: List[Reduction]  # every reduction of the variant, by index r
    tensor_results: int
    num_tensors: int
    group_results: int
    num_groups: int
    stream: int
    row_results: int = 0
    row_runs: List[Tuple[int, int]] = field(default_factory=list)
    col_results: int = 0
    col_runs: List[Tuple[int, int]] = field(default_factory=list)
    matrix_results: int = 0
    matrix_runs: List[Tuple[int, int]] = field(default_factory=list)


@dataclass(frozen=True)
class Matrices:
    """One tensor's matrices of one matrix value, as a matrix hook sees them (optgen_matrices):
    `batch` row-major matrices of rows x cols at device address `x`, of `dtype` (BF16, or F32 where
    the storage keeps the value in f32: C ABI 13), and the value's function's arguments for the
    tensor's group."""
    value: int  # the variant's matrix value
    group: int  # the engine's group
    tensor: int  # the tensor's index in it
    x: int
    batch: int
    rows: int
    cols: int
    arguments: Tuple[float, ...]
    dtype: int = BF16


@dataclass
class MatrixWork:
    """What a matrix hook is handed after a Reduce stage that stores matrix values
    (optgen_matrix_work): the matrices of the plan's tensors, and the stream of the step."""
    stage: int
    matrices: List[Matrices]
    stream: int


@dataclass
class TensorBinding:
    """One tensor as an Engine binds it: device addresses, its element count and dtype, and its
    shape when known (a spec that factors tensors into rows and columns needs it)."""
    param: int
    grad: int
    numel: int
    dtype: int
    # One address per spec state, or None (the engine allocates them). 0: the state is absent for this
    # tensor (not in the group's variant, or its presence excludes the tensor), passed as NULL. A ROWS
    # or COLS state holds State.numel(shape) values.
    states: Optional[Sequence[int]] = None
    shape: Optional[Sequence[int]] = None  # dimensions, outermost first; None: not given
    # For a rank's shard of a larger tensor: the whole tensor's element count, which the spec's numel
    # and mean read (Engine.set_reduction_hook combines the ranks' reductions); 0: the tensor is whole.
    whole_numel: int = 0
    # The dimension such a shard bound with two dimensions is cut along: 0 (rows of the matrix) or 1
    # (columns: a part of every row, whose sums over columns the ranks then combine).
    shard_dim: int = 0
    # For a spec with matrix values (Muon): each matrix (the last two dimensions of shape) is this
    # many matrices of consecutive columns, each taken by the matrix function on its own.
    column_splits: int = 1


_INTEGERS = (ctypes.c_size_t, ctypes.c_int64, ctypes.c_int32, ctypes.c_int)


def _check_argument(function: str, index: int, arg, kind) -> None:
    """Refuses what ctypes would pass on changed: text with a NUL character (C reads it as the end:
    "a.yaml\\0x" loaded a.yaml), an integer beyond its C type (ctypes wraps it: a group of 2**64 - 1
    became -1, every group)."""
    if kind is ctypes.c_char_p and isinstance(arg, bytes) and b"\0" in arg:
        raise ValueError(f"{function}(): argument {index + 1}, {arg!r}, holds a NUL character, which would end it "
                         "there")
    if kind in _INTEGERS and isinstance(arg, int):
        bits = 8 * ctypes.sizeof(kind)
        low, high = (0, 2 ** bits - 1) if kind is ctypes.c_size_t else (-2 ** (bits - 1), 2 ** (bits - 1) - 1)
        if not low <= arg <= high:
            raise ValueError(f"{function}(): argument {index + 1}, {arg}, is out of range ({low} to {high})")


def _strings(values: Iterable[str]):
    encoded = [v.encode() for v in values]
    for v in encoded:
        if b"\0" in v:
            raise ValueError(f"name {v.decode()!r} holds a NUL character, which would end it there")
    return (ctypes.c_char_p * max(1, len(encoded)))(*encoded)


def _storage_struct(storage: Optional[Storage]) -> Optional[tuple]:
    """Storage._struct(), or None for None (a NULL optgen_storage*: the defaults)."""
    if storage is None:
        return None
    if not isinstance(storage, Storage):
        raise TypeError(f"storage must be an optgen._capi.Storage or None; got {type(storage).__name__}")
    return storage._struct()


def _doubles(values: Iterable[float]):
    values = [float(v) for v in values]
    return (ctypes.c_double * max(1, len(values)))(*values)


class _Owned:
    """An object of the library this one owns (`_handle`), destroyed by `_destroy` in close() or
    when this one is collected."""
    _destroy: str

    def close(self) -> None:
        if self._handle:
            getattr(self._lib.dll, self._destroy)(self._handle)
            self._handle = ctypes.c_void_p()

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            self.close()


class Engine(_Owned):
    """One optgen optimizer (an optgen::FusedOptimizer) through the C ABI."""
    _destroy = "optgen_destroy"

    def __init__(self, handle: int):
        self._lib = library()
        self._handle = ctypes.c_void_p(handle)
        self._hooks = {}  # library function -> the ctypes callback it holds (_set_hook)
        self.name = self._lib.dll.optgen_name(self._handle).decode()
        # What loading its spec warned of (a spec loaded at run time; "" for a built-in).
        self.spec_warnings = self._lib.dll.optgen_warnings(self._handle).decode()
        self.spec = self._lib.dll.optgen_spec(self._handle).decode()
        self.hyperparameters = [self._describe_hyperparameter(i)
                                for i in range(self._count("optgen_num_hyperparameters"))]
        self.states = self._describe_states("optgen_num_states", "optgen_describe_state", shaped=True)
        self.scalar_states = self._describe_states("optgen_num_scalar_states", "optgen_describe_scalar_state")
        # Per state, by name, the dtype the optimizer stores it in (its storage resolved).
        self.state_dtypes = {s.name: self.state_dtype(s.name) for s in self.states}
        # Its matrix values (Muon's "o"), which a Storage may keep in F32 by name (else BF16; C ABI 13).
        names = self._lib.dll.optgen_matrix_values(self._handle).decode()
        self.matrix_values = names.split(",") if names else []
        # The spec's programs beside the step (`programs:`, e.g. schedule-free's eval and train).
        self.programs = [self._program_name(i) for i in range(self._count("optgen_num_programs"))]
        # The elements of the spec's blocks (`block_elements`), 0 for none (C ABI 17): the engine
        # views a tensor of a positive multiple of them as numel / block_elements rows of them.
        self.block_elements = self._count("optgen_block_elements")

    @classmethod
    def builtin(cls, spec: str, overrides: Mapping[str, float] = {}, storage: Optional[Storage] = None) -> "Engine":
        """A built-in optimizer (specs/<spec>.yaml) with its spec's defaults except `overrides`, and
        `storage` (None: Storage(), f32 states and params rounded to nearest)."""
        lib = library()
        handle = ctypes.c_void_p()
        struct = _storage_struct(storage)
        lib.create_builtin(spec, _strings(overrides), _doubles(overrides.values()), len(overrides),
                           ctypes.byref(struct[0]) if struct else None, ctypes.byref(handle))
        return cls(handle.value)

    @classmethod
    def from_spec(cls, path: Union[str, os.PathLike], overrides: Mapping[str, float] = {},
                  storage: Optional[Storage] = None) -> "Engine":
        """An optimizer from a YAML spec loaded now: generated in this process and compiled by NVRTC
        at prepare() through the disk cache, with no C++ compiler; kernels for the spec's `storage:`
        list (else f32 and bf16 params with f32 states). A mistake in the spec raises OptgenError
        with optgen check's text: file:line:col: error: ..., the line and a caret; what it warns of
        is a SpecWarning (warnings.warn), its text also in Engine.spec_warnings."""
        lib = library()
        handle = ctypes.c_void_p()
        struct = _storage_struct(storage)
        lib.call("optgen_create_from_spec", os.fsencode(path), _strings(overrides), _doubles(overrides.values()),
                 len(overrides), ctypes.byref(struct[0]) if struct else None, ctypes.byref(handle))
        engine = cls(handle.value)
        if engine.spec_warnings:
            warnings.warn(SpecWarning(engine.spec_warnings.rstrip("\n")), stacklevel=2)
        return engine

    # ---- what the optimizer is ----

    def _count(self, function: str) -> int:
        n = _SIZE()
        self._lib.call(function, self._handle, ctypes.byref(n))
        return n.value

    def _describe_hyperparameter(self, i: int) -> Hyperparameter:
        d = _HyperparameterInfo()
        self._lib.call("optgen_describe_hyperparameter", self._handle, i, ctypes.byref(d))
        return Hyperparameter(d.name.decode(), ValueType(d.type), d.default_value, bool(d.specialized), bool(d.derived))

    def _describe_states(self, count: str, describe: str, shaped: bool = False) -> list:
        states = []
        for i in range(self._count(count)):
            d = _StateInfo()
            d.shape = -1
            self._lib.call(describe, self._handle, i, ctypes.byref(d))
            init = self.hyperparameters[d.init_hyperparameter].name if d.init_hyperparameter >= 0 else None
            shape = self._state_shape(i, d) if shaped else ELEMENTS
            states.append(State(d.name.decode(), d.init_value, init, bool(d.init_param), shape))
        return states

    def _state_shape(self, index: int, described: _StateInfo) -> int:
        """State `index`'s shape, from optgen_state_info (C ABI 4)."""
        if described.shape not in SHAPE_NAMES:
            raise OptgenError(f"the optgen library {library_path()} tells no valid shape for state {index} of "
                              f"{self.name} (got {described.shape}): python/optgen/_capi.py and c_api.h must "
                              "agree (C ABI 4)")
        return Shape(described.shape)

    def state_dtype(self, name: str) -> int:
        """The dtype state `name` is stored in: F32, BF16 or F16."""
        dtype = ctypes.c_int32()
        self._lib.call("optgen_state_dtype", self._handle, name.encode(), ctypes.byref(dtype))
        return DType(dtype.value)

    def defaults(self) -> dict:
        """Every settable hyperparameter's spec default, by name (bools as 0/1)."""
        return {h.name: h.default for h in self.hyperparameters if not h.derived}

    def full_values(self, values: Mapping[str, float]) -> list:
        """Every hyperparameter in declaration order: `values`, the defaults for the rest."""
        unknown = set(values) - {h.name for h in self.hyperparameters if not h.derived}
        if unknown:
            raise OptgenError(f"{self.name} has no hyperparameter {', '.join(map(repr, sorted(unknown)))} (it has: "
                              f"{', '.join(h.name for h in self.hyperparameters if not h.derived)})")
        return [float(values.get(h.name, h.default)) for h in self.hyperparameters]

    def states_used(self, values: Mapping[str, float]) -> list:
        """Whether a group of these hyperparameters has each state (derived flags computed)."""
        full = self.full_values(values)
        used = (ctypes.c_int32 * max(1, len(self.states)))()
        self._lib.call("optgen_states_used", self._handle, _doubles(full), len(full), used)
        return [bool(used[i]) for i in range(len(self.states))]

    def state_presence(self, values: Mapping[str, float]) -> list:
        """Per state, whether a group of these hyperparameters has it, and for which tensors:
        ABSENT, ALWAYS, FACTORED (tensors of two dimensions or more only) or NOT_FACTORED (the
        others only); states_used() is whether it is not ABSENT."""
        full = self.full_values(values)
        presence = (ctypes.c_int32 * max(1, len(self.states)))(*([-1] * max(1, len(self.states))))
        self._lib.call(STATE_PRESENCE, self._handle, _doubles(full), len(full), presence)
        result = [presence[i] for i in range(len(self.states))]
        for s, p in zip(self.states, result):
            if p not in PRESENCE_NAMES:
                raise OptgenError(f"{STATE_PRESENCE}() says state {s.name} of {self.name} has presence {p}, none of "
                                  f"{sorted(PRESENCE_NAMES)}; python/optgen/_capi.py and c_api.h must agree (C ABI 4)")
        return [Presence(p) for p in result]

    def reduces_over_group(self, values: Mapping[str, float]) -> bool:
        """Whether a group of these hyperparameters reduces over all its tensors (a global norm:
        max_grad_norm > 0, or a spec's group_norm), so that it must hold every tensor it covers."""
        full = self.full_values(values)
        reduces = ctypes.c_int32()
        self._lib.call("optgen_reduces_over_group", self._handle, _doubles(full), len(full), ctypes.byref(reduces))
        return bool(reduces.value)

    # ---- binding and stepping ----

    def add_param_group(self, tensors: Sequence[TensorBinding], values: Mapping[str, float]) -> int:
        """Adds a group of `tensors` with hyperparameters `values` (the rest: defaults); its index."""
        array = (_Tensor * max(1, len(tensors)))()
        keep = []  # the state pointer arrays, alive until the call returns
        for i, t in enumerate(tensors):
            states = None
            if t.states is not None:
                states = (ctypes.c_void_p * max(1, len(t.states)))(*t.states)
                keep.append(states)
            shape = None
            if t.shape is not None and len(t.shape) > 0:
                shape = (ctypes.c_int64 * len(t.shape))(*t.shape)
                keep.append(shape)
            array[i] = _Tensor(t.param, t.grad, t.numel, -1, t.dtype, t.dtype,
                               ctypes.cast(states, ctypes.POINTER(ctypes.c_void_p)) if states else None,
                               len(shape) if shape else 0,
                               ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)) if shape else None, t.whole_numel,
                               t.shard_dim, t.column_splits)
        overrides = {h.name: v for h, v in zip(self.hyperparameters, self.full_values(values)) if not h.derived}
        group = _SIZE()
        self._lib.call("optgen_add_param_group", self._handle, array, len(tensors), _strings(overrides),
                       _doubles(overrides.values()), len(overrides), ctypes.byref(group))
        return group.value

    def rebind(self, group: int, tensors: Sequence[int], params: Sequence[int], grads: Sequence[int]) -> None:
        n = len(tensors)
        self._lib.call("optgen_rebind", self._handle, group, (_SIZE * max(1, n))(*tensors),
                       (ctypes.c_void_p * max(1, n))(*params), (ctypes.c_void_p * max(1, n))(*grads), n)

    def prepare(self, stream: int = 0) -> None:
        self._lib.call("optgen_prepare", self._handle, stream)

    def step(self, stream: int = 0, grad_scale: int = 0, found_inf: int = 0) -> None:
        """One step of every group on `stream`; AMP's device pointers (0: not given). An exception
        the reduction hook raised is raised here, from the step's error."""
        try:
            self._lib.call("optgen_step_amp", self._handle, stream, grad_scale, found_inf)
        except OptgenError as e:
            failure, self._hook_failure = self._hook_failure, None
            if failure is not None:
                raise failure from e
            raise

    def run(self, program: str, stream: int = 0) -> None:
        """Runs the spec's program `program` (one of Engine.programs) over every tensor of every
        group on `stream`: no step counted; capturable in a CUDA graph once prepared."""
        self._lib.call("optgen_run", self._handle, program.encode(), stream)

    def _program_name(self, index: int) -> str:
        name = ctypes.c_char_p()
        self._lib.call("optgen_program_name", self._handle, index, ctypes.byref(name))
        return name.value.decode()

    _hook_failure: Optional[BaseException] = None

    def _set_hook(self, function: str, kind, hook: Optional[Callable], convert: Callable) -> None:
        """Hands the library `hook` through `function` as a ctypes callback of type `kind`, which
        calls it with `convert` of what the library passes; None removes it. An exception the hook
        raises fails the step, which raises it again (step)."""
        if hook is None:
            self._lib.call(function, self._handle, kind(), None)
            self._hooks.pop(function, None)
            return

        def call(pointer, _):
            try:
                hook(convert(pointer.contents))
                return 0
            except BaseException as e:  # noqa: BLE001 - raised again by step(), which the library returns to
                self._hook_failure = e
                return 1

        callback = kind(call)
        self._lib.call(function, self._handle, callback, None)
        self._hooks[function] = callback

    def set_reduction_hook(self, hook: Optional[Callable[[ReductionResults], None]]) -> None:
        """Calls `hook` after each Reduce stage's launch, eagerly and during a CUDA graph capture
        (optgen_set_reduction_hook): where ranks whose tensors are shards of one model combine the
        stage's results (an all-reduce of each of its reductions on the results' stream) before the
        stages that read them; bind each shard with TensorBinding.whole_numel. None removes it.
        A spec that sums over the rows or columns of matrices (Adafactor, Adam-mini) then runs its
        step on shards, and the hook sums the row, column and matrix runs it is handed too."""
        def convert(r):
            reductions = [Reduction(x.name.decode(), bool(x.is_max), x.stage, bool(x.over_group))
                          for x in r.reductions[:r.num_reductions]]
            return ReductionResults(r.stage, reductions, r.tensor_results or 0, r.num_tensors, r.group_results or 0,
                                    r.num_groups, r.stream or 0, r.row_results or 0,
                                    _runs(r.row_runs, r.num_row_runs), r.col_results or 0,
                                    _runs(r.col_runs, r.num_col_runs), r.matrix_results or 0,
                                    _runs(r.matrix_runs, r.num_matrix_runs))
        self._set_hook("optgen_set_reduction_hook", _REDUCTION_HOOK, hook, convert)

    def set_matrix_hook(self, hook: Optional[Callable[[MatrixWork], None]]) -> None:
        """Calls `hook` after each Reduce stage that stores matrix values, in place of the engine's
        own work on them, eagerly and during a CUDA graph capture (optgen_set_matrix_hook): where
        ranks holding rows of each matrix (TensorBinding.whole_numel) bring the whole matrices
        together, apply the function (apply_matrix_function) and hand each rank its rows back, on
        the work's stream. None removes it."""
        def convert(w):
            return MatrixWork(w.stage, [Matrices(m.value, m.group, m.tensor, m.x or 0, m.batch, m.rows, m.cols,
                                                 tuple(m.arguments[:m.num_arguments]), DType(m.dtype))
                                        for m in w.matrices[:w.num_matrices]], w.stream or 0)
        self._set_hook("optgen_set_matrix_hook", _MATRIX_HOOK, hook, convert)

    def matrix_function_scratch_bytes(self, group: int, value: int, count: int, rows: int, cols: int,
                                      dtype: int = BF16) -> int:
        """Bytes of device scratch apply_matrix_function needs for matrix value `value` of the variant
        `group` runs, on `count` matrices of rows x cols of `dtype` (Matrices.dtype: BF16, the default,
        or F32): what its function's program needs."""
        if dtype not in (BF16, F32):
            raise ValueError(f"matrices are BF16 or F32; got {dtype!r}")
        bytes_ = self._lib.dll.optgen_matrix_function_scratch_bytes(self._handle, group, value, count, rows, cols,
                                                                     dtype)
        if bytes_ == 0 and count > 0 and rows > 0 and cols > 0:
            raise OptgenError(self._lib.dll.optgen_last_error().decode())
        return bytes_

    def apply_matrix_function(self, group: int, value: int, arguments: Sequence[float], x: int, scratch: int,
                              count: int, rows: int, cols: int, stream: int) -> None:
        """Applies matrix value `value`'s function with `arguments` (Matrices.arguments) to `count`
        row-major matrices of rows x cols (Matrices.dtype) at device address `x`, in place, as a step of `group`
        does, with `scratch` (matrix_function_scratch_bytes) on `stream` (optgen_apply_matrix_function)."""
        args = (ctypes.c_double * max(1, len(arguments)))(*arguments)
        self._lib.call("optgen_apply_matrix_function", self._handle, group, value, args, x, scratch, count, rows,
                       cols, stream)

    def set(self, name: str, value: float, group: int = -1) -> None:
        self._lib.call("optgen_set", self._handle, name.encode(), float(value), group)

    def get(self, name: str, group: int) -> float:
        value = ctypes.c_double()
        self._lib.call("optgen_get", self._handle, name.encode(), group, ctypes.byref(value))
        return value.value

    def step_count(self, group: int) -> int:
        count = ctypes.c_int64()
        self._lib.call("optgen_step_count", self._handle, group, ctypes.byref(count))
        return count.value

    def set_step_count(self, group: int, count: int) -> None:
        self._lib.call("optgen_set_step_count", self._handle, group, int(count))

    def scalar_state(self, name: str, group: int) -> float:
        value = ctypes.c_double()
        self._lib.call("optgen_scalar_state", self._handle, name.encode(), group, ctypes.byref(value))
        return value.value

    def set_scalar_state(self, name: str, group: int, value: float) -> None:
        self._lib.call("optgen_set_scalar_state", self._handle, name.encode(), group, float(value))

    def num_groups(self) -> int:
        return self._count("optgen_num_groups")

    def launches_last_step(self) -> int:
        n = ctypes.c_int()
        self._lib.call("optgen_launches_last_step", self._handle, ctypes.byref(n))
        return n.value

    def set_chunk_size(self, elements: int) -> None:
        """Elements per block of every kernel set instead of each one's own: a multiple of 64 up to
        2^30, of 256 where a set has 8-bit states. The next step prepares again."""
        self._lib.call("optgen_set_chunk_size", self._handle, int(elements))

    def chunk_size(self, group: int) -> int:
        """Elements per block of the kernel set that steps `group`: set_chunk_size's, else the
        tuning table's (OPTGEN_TUNING), else the generator's (C ABI 7)."""
        elements = ctypes.c_int64()
        self._lib.call("optgen_chunk_size", self._handle, group, ctypes.byref(elements))
        return elements.value

    def set_launch_shape(self, block_size: int, elements_per_thread: int) -> None:
        """Threads per block and elements per thread of every kernel set (powers of two, 32 to 1024
        threads, up to 64 elements); 0, 0 gives each set back its own. A shape other than the
        generator's is compiled with NVRTC when the engine next prepares (C ABI 7)."""
        self._lib.call("optgen_set_launch_shape", self._handle, int(block_size), int(elements_per_thread))

    def launch_shape(self, group: int) -> tuple:
        """(threads per block, elements per thread) of the kernel set that steps `group`:
        set_launch_shape's, else the tuning table's, else the generator's (C ABI 7)."""
        block, per_thread = ctypes.c_int(), ctypes.c_int()
        self._lib.call("optgen_launch_shape", self._handle, group, ctypes.byref(block), ctypes.byref(per_thread))
        return block.value, per_thread.value

    def grad_norm(self, group: int) -> int:
        """The device address of `group`'s gradient norm at its last step (one float32), for a group
        that clips; valid until the engine is prepared again."""
        address = ctypes.c_void_p()
        self._lib.call("optgen_grad_norm", self._handle, group, ctypes.byref(address))
        return address.value

    def master_weights(self, group: int, tensor: int) -> int:
        """The device address of tensor `tensor` of `group`'s fp32 master copy (numel float32 values,
        in the param's memory order; Storage(param_write=MASTER)), or 0 without one. It lives as
        long as the engine; every step updates it, and the param is written from it."""
        address = ctypes.c_void_p()
        self._lib.call("optgen_master_weights", self._handle, group, tensor, ctypes.byref(address))
        return address.value or 0

    def state_buffer(self, name: str, group: int, tensor: int) -> "StateBuffer":
        """Tensor `tensor` of `group`'s state `name` as the engine holds it (optgen_state_buffer,
        C ABI 6): its device address (0 where the state is absent for the tensor), its values, the
        dtype it is stored in (an 8-bit state of a tensor under 4096 elements is F32) and its bytes."""
        address, numel, dtype, size = ctypes.c_void_p(), ctypes.c_int64(), ctypes.c_int32(), ctypes.c_size_t()
        self._lib.call("optgen_state_buffer", self._handle, name.encode(), group, tensor, ctypes.byref(address),
                       ctypes.byref(numel), ctypes.byref(dtype), ctypes.byref(size))
        return StateBuffer(address.value or 0, numel.value, DType(dtype.value), size.value)

    def save(self, path: str) -> None:
        self._lib.call("optgen_save", self._handle, os.fsencode(path))

    def load(self, path: str) -> None:
        self._lib.call("optgen_load", self._handle, os.fsencode(path))


class Optimizers(_Owned):
    """Engines of different specs as one optimizer (optgen::Optimizers, optgen_optimizers_create):
    Muon for the hidden matrices and AdamW for the rest, say. step() steps each engine in order on
    one stream; save() and load() write and read one checkpoint of them all (each engine's part
    under optimizer.<i>.; loading checks the count and the specs, and changes no engine when any
    part does not fit). It keeps its engines alive."""
    _destroy = "optgen_optimizers_destroy"

    def __init__(self, engines: Sequence[Engine]):
        self._lib = library()
        self.engines = list(engines)
        members = (_P * max(1, len(self.engines)))(*[e._handle.value for e in self.engines])
        handle = ctypes.c_void_p()
        self._lib.call("optgen_optimizers_create", members, len(self.engines), ctypes.byref(handle))
        self._handle = handle

    def prepare(self, stream: int = 0) -> None:
        self._lib.call("optgen_optimizers_prepare", self._handle, stream)

    def step(self, stream: int = 0, grad_scale: int = 0, found_inf: int = 0) -> None:
        """Every engine's step on `stream` (AMP's device pointers as Engine.step's); an exception an
        engine's hook raised is raised here."""
        try:
            self._lib.call("optgen_optimizers_step_amp", self._handle, stream, grad_scale, found_inf)
        except OptgenError as e:
            for engine in self.engines:
                failure, engine._hook_failure = engine._hook_failure, None
                if failure is not None:
                    raise failure from e
            raise

    def launches_last_step(self) -> int:
        n = ctypes.c_int()
        self._lib.call("optgen_optimizers_launches_last_step", self._handle, ctypes.byref(n))
        return n.value

    def save(self, path: str) -> None:
        self._lib.call("optgen_optimizers_save", self._handle, os.fsencode(path))

    def load(self, path: str) -> None:
        self._lib.call("optgen_optimizers_load", self._handle, os.fsencode(path))
