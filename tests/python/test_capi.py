"""optgen.Engine over the C ABI: no torch, no GPU needed (CI runs these)."""

import os
import pathlib
import re

import pytest

import optgen
from optgen import Engine, OptgenError
from optgen._capi import (ABI_VERSION, ABSENT, ALWAYS, BF16, BOOL, COLS, ELEMENTS, F16, FACTORED, FLOAT, F32,
                          NOT_FACTORED, ROWS, State, TensorBinding, present)

REPO = pathlib.Path(__file__).resolve().parents[2]


def test_version_matches_the_build():
    cmake = (REPO / "CMakeLists.txt").read_text()
    assert optgen.version() == re.search(r"project\(optgen VERSION ([0-9.]+)", cmake).group(1)
    header = (REPO / "runtime" / "include" / "optgen" / "c_api.h").read_text()
    abi = int(re.search(r"#define OPTGEN_ABI_VERSION ([0-9]+)", header).group(1))
    assert optgen.ABI_VERSION == ABI_VERSION == abi


def test_every_builtin_spec_is_in_the_library():
    assert optgen.builtin_specs() == sorted(p.stem for p in (REPO / "specs").glob("*.yaml"))


def test_an_engine_describes_its_spec():
    e = Engine.builtin("rmsprop", {"lr": 0.1}, state_dtype=BF16)
    assert (e.name, e.spec, e.state_dtype) == ("RMSprop", "rmsprop", BF16)
    names = [h.name for h in e.hyperparameters]
    assert names == ["lr", "alpha", "eps", "weight_decay", "momentum", "centered", "maximize", "use_momentum",
                     "max_grad_norm", "clip_grad_norm"]  # the clipping every spec has comes last
    use_momentum = e.hyperparameters[7]
    assert (use_momentum.type, use_momentum.derived, use_momentum.specialized) == (BOOL, True, True)
    assert e.hyperparameters[0].type == FLOAT and e.defaults()["lr"] == 0.01  # the spec's default
    assert [s.name for s in e.states] == ["square_avg", "momentum_buffer", "grad_avg"]
    assert e.states_used({}) == [True, False, False]
    assert e.states_used({"momentum": 0.9, "centered": True}) == [True, True, True]


def test_which_groups_reduce_over_all_their_tensors():
    adamw, lamb = Engine.builtin("adamw"), Engine.builtin("lamb")
    assert not adamw.reduces_over_group({})
    assert adamw.reduces_over_group({"max_grad_norm": 1.0})  # the global gradient norm
    assert not lamb.reduces_over_group({})  # its norms are per tensor
    assert lamb.reduces_over_group({"max_grad_norm": 1.0})
    with pytest.raises(OptgenError, match="no param group 0"):
        adamw.grad_norm(0)


def test_state_and_scalar_state_initial_values():
    z = Engine.from_spec(REPO / "tests" / "specs" / "init_param.yaml").states[0]
    assert (z.name, z.init_param) == ("z", True)  # starts as the parameter
    adagrad = Engine.builtin("adagrad")
    assert adagrad.states[0].init_hyperparameter == "initial_accumulator_value"
    assert adagrad.states[0].initial_value({"initial_accumulator_value": 0.5}) == 0.5
    asgd = Engine.builtin("asgd")
    assert [(s.name, s.init_hyperparameter, s.init_value) for s in asgd.scalar_states] == [
        ("eta", "lr", 0.0), ("mu", None, 1.0)]


def test_bad_input_is_an_error_that_names_it():
    with pytest.raises(OptgenError, match="Adam has no hyperparameter 'beta3'"):
        Engine.builtin("adam", {"beta3": 0.5})
    with pytest.raises(OptgenError, match="no built-in optimizer 'adam2'"):
        Engine.builtin("adam2")
    with pytest.raises(OptgenError, match="states cannot be stored in f16"):
        Engine.builtin("adam", state_dtype=F16)
    e = Engine.builtin("sgd")
    with pytest.raises(OptgenError, match="SGD has no hyperparameter 'betas'"):
        e.states_used({"betas": 1})
    with pytest.raises(OptgenError, match="no param group 0"):
        e.step_count(0)
    with pytest.raises(OptgenError, match="cannot be set directly|derived"):
        e.set("use_momentum", 1)


def test_binding_without_a_gpu_says_what_is_missing():
    if os.path.exists("/dev/nvidia0"):
        pytest.skip("a GPU is present")
    e = Engine.builtin("adamw")
    with pytest.raises(OptgenError, match="libcuda.so.1"):
        e.add_param_group([TensorBinding(0x10000, 0x20000, 8, F32)], {})


def test_a_shape_that_does_not_hold_numel_is_refused_before_any_gpu_work():
    e = Engine.builtin("adamw")
    with pytest.raises(OptgenError, match=r"tensor 0 of the group has shape \[4, 3\], 12 elements, but numel 8"):
        e.add_param_group([TensorBinding(0x10000, 0x20000, 8, F32, shape=(4, 3))], {})


def test_a_spec_loaded_at_run_time_describes_itself_as_the_builtin_does():
    at_run_time = Engine.from_spec(REPO / "specs" / "adamw.yaml", {"lr": 0.25})
    builtin = Engine.builtin("adamw")
    assert (at_run_time.name, at_run_time.spec) == (builtin.name, builtin.spec) == ("AdamW", "adamw")
    assert at_run_time.hyperparameters == builtin.hyperparameters
    assert at_run_time.states == builtin.states
    assert at_run_time.scalar_states == builtin.scalar_states
    assert at_run_time.states_used({"amsgrad": True}) == builtin.states_used({"amsgrad": True}) == [True, True, True]


def test_a_users_spec_loads_at_run_time():
    e = Engine.from_spec(str(REPO / "examples" / "adabelief.yaml"), state_dtype=BF16)
    assert (e.name, e.state_dtype) == ("AdaBelief", BF16)
    assert [s.name for s in e.states] == ["exp_avg", "exp_avg_var"]
    assert e.defaults()["eps"] == 1e-16


def test_a_spec_error_at_run_time_carries_its_location(tmp_path):
    spec = tmp_path / "broken.yaml"
    spec.write_text("optimizer: Broken\nsummary: one mistake\nhyperparameters:\n  lr: {type: float, default: 0.1}\n"
                    "update:\n  - param = param - lr * gard\n")
    with pytest.raises(OptgenError) as error:
        Engine.from_spec(spec)
    assert str(error.value) == (f"{spec}:6:26: error: unknown name 'gard'\n"
                                "  - param = param - lr * gard\n"
                                "                         ^\n")


def test_a_missing_spec_file_is_an_error_that_names_it():
    with pytest.raises(OptgenError, match="/nonexistent/spec.yaml"):
        Engine.from_spec("/nonexistent/spec.yaml")


def test_a_bad_override_of_a_spec_at_run_time_is_an_error():
    with pytest.raises(OptgenError, match="AdamW has no hyperparameter 'beta3'"):
        Engine.from_spec(REPO / "specs" / "adamw.yaml", {"beta3": 0.5})


def test_a_states_values_by_its_shape_and_presence_by_the_tensors_dimensions():
    # pure: a tensor of two or more dimensions is B matrices of R rows and C columns (its last two)
    row_var = State("row_var", 0.0, None, shape=ROWS)
    col_var = State("col_var", 0.0, None, shape=COLS)
    variance = State("variance", 0.0, None)
    assert [s.numel((8, 4, 3, 3)) for s in (row_var, col_var, variance)] == [8 * 4 * 3, 8 * 4 * 3, 288]
    assert [s.numel((16, 8, 1, 1)) for s in (row_var, col_var)] == [128, 128]
    assert [s.numel((50257, 768)) for s in (row_var, col_var)] == [50257, 768]
    assert [s.numel((2, 5, 7)) for s in (row_var, col_var)] == [10, 14]
    with pytest.raises(OptgenError, match="state row_var has one value per row, but a tensor of shape \\[5\\]"):
        row_var.numel((5,))
    assert [present(p, 1) for p in (ABSENT, ALWAYS, FACTORED, NOT_FACTORED)] == [False, True, False, True]
    assert [present(p, 0) for p in (ABSENT, ALWAYS, FACTORED, NOT_FACTORED)] == [False, True, False, True]
    assert [present(p, 2) for p in (ABSENT, ALWAYS, FACTORED, NOT_FACTORED)] == [False, True, True, False]
    assert [present(p, 4) for p in (ABSENT, ALWAYS, FACTORED, NOT_FACTORED)] == [False, True, True, False]


def test_state_presence_of_a_spec_that_does_not_factor_is_states_used():
    e = Engine.builtin("rmsprop")
    assert [s.shape for s in e.states] == [ELEMENTS] * 3
    assert e.state_presence({}) == [ALWAYS, ABSENT, ABSENT]
    assert e.state_presence({"momentum": 0.9, "centered": True}) == [ALWAYS, ALWAYS, ALWAYS]
    adamw = Engine.builtin("adamw")
    assert adamw.state_presence({"amsgrad": False}) == [ALWAYS, ALWAYS, ABSENT]
    with pytest.raises(OptgenError, match="RMSprop has no hyperparameter 'betas'"):
        e.state_presence({"betas": 1})


@pytest.mark.skipif(not (REPO / "specs" / "adafactor.yaml").exists(),
                    reason="Adafactor is not a built-in spec yet (tests/specs/adafactor.yaml until its kernels are)")
def test_adafactors_states_are_rows_and_columns_of_factored_tensors_and_elements_of_the_others():
    e = Engine.builtin("adafactor")
    assert (e.name, e.spec) == ("Adafactor", "adafactor")
    assert [h.name for h in e.hyperparameters if not h.derived][:7] == [
        "lr", "beta2_decay", "eps1", "eps2", "d", "weight_decay", "maximize"]
    assert e.defaults()["eps1"] == 2.0 ** -23  # float32's machine epsilon: torch's eps=(None, ...) for f32
    assert [(s.name, s.shape) for s in e.states] == [("row_var", ROWS), ("col_var", COLS), ("variance", ELEMENTS)]
    assert e.state_presence({}) == [FACTORED, FACTORED, NOT_FACTORED]
    assert e.state_presence({"maximize": True, "weight_decay": 0.1}) == [FACTORED, FACTORED, NOT_FACTORED]
    assert e.states_used({}) == [True, True, True]
