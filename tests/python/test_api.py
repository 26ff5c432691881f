"""The package's public surface: what `optgen` and `optgen.torch` export, enums that print by
name, and `import optgen.torch` without torch. No torch or GPU needed (CI runs these)."""

import subprocess
import sys
import types

import pytest

import optgen
from optgen import DType, Engine, ParamWrite, Presence, Shape, Storage, TensorBinding, ValueType


def _public_names(module) -> set:
    """What `from module import *` would take without __all__: names not underscored, and no
    submodule (optgen.torch appears in optgen's namespace once imported)."""
    return {name for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)}


def test_optgen_exports_exactly_its_all():
    assert sorted(optgen.__all__) == sorted(set(optgen.__all__))
    assert _public_names(optgen) == set(optgen.__all__)


def test_what_engine_methods_take_and_return_is_public():
    # add_param_group takes TensorBinding's; hyperparameters, states and their enums describe an engine.
    for name in ("TensorBinding", "Storage", "StateBuffer", "Hyperparameter", "State", "DType", "ParamWrite",
                 "ValueType", "Shape", "Presence"):
        assert name in optgen.__all__
    binding = TensorBinding(param=0, grad=0, numel=4, dtype=optgen.F32)
    with pytest.raises(optgen.OptgenError):
        Engine.builtin("sgd").add_param_group([binding], {})  # null pointers: refused before any GPU work


def test_enums_print_by_name_and_are_the_c_abis_ints():
    assert (str(optgen.BF16), repr(optgen.BF16), f"{optgen.MASTER}") == ("BF16", "optgen.DType.BF16", "MASTER")
    assert (optgen.F32, optgen.BF16, optgen.F16, optgen.Q8, optgen.UQ8) == (0, 1, 2, 3, 4)
    assert (optgen.NEAREST, optgen.MASTER, optgen.STOCHASTIC) == (0, 1, 2)
    assert optgen.BF16 is DType.BF16 and DType(1) is optgen.BF16 and optgen.STOCHASTIC is ParamWrite.STOCHASTIC
    assert repr(Storage(optgen.BF16, {"exp_avg_sq": 0}, param_write=1)) == (
        "Storage(state_dtype=optgen.DType.BF16, state_dtypes=(('exp_avg_sq', optgen.DType.F32),), "
        "param_write=optgen.ParamWrite.MASTER, seed=0)")


def test_an_engine_describes_itself_with_enums():
    e = Engine.builtin("adafactor", storage=Storage(optgen.BF16, {"row_var": optgen.F32}))
    assert e.state_dtypes == {"row_var": DType.F32, "col_var": DType.BF16, "variance": DType.BF16}
    assert repr(e.state_dtypes["col_var"]) == "optgen.DType.BF16"
    assert [s.shape for s in e.states] == [Shape.ROWS, Shape.COLS, Shape.ELEMENTS]
    assert all(type(s.shape) is Shape for s in e.states)
    assert e.state_presence({}) == [Presence.FACTORED, Presence.FACTORED, Presence.NOT_FACTORED]
    assert str(e.state_presence({})[2]) == "NOT_FACTORED"
    assert {h.name: h.type for h in e.hyperparameters}["maximize"] is ValueType.BOOL


def test_importing_optgen_torch_without_torch_says_what_to_install():
    # torch made unimportable in a fresh interpreter, whether or not this one has it.
    code = "import sys; sys.modules['torch'] = None\nimport optgen.torch"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == "ImportError: optgen.torch needs torch: pip install torch"
