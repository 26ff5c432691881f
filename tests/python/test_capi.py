"""optgen.Engine over the C ABI: no torch, no GPU needed (CI runs these)."""

import os
import pathlib
import re
import warnings

import pytest

import optgen
from optgen import Engine, OptgenError
from optgen._capi import (ABI_VERSION, ABSENT, ALWAYS, BF16, BOOL, COLS, ELEMENTS, F16, FACTORED, FLOAT, F32, MASTER,
                          NEAREST, NOT_FACTORED, Q8, ROWS, STOCHASTIC, UQ8, State, StateBuffer, Storage, TensorBinding,
                          present)

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
    e = Engine.builtin("rmsprop", {"lr": 0.1}, storage=Storage(BF16))
    assert (e.name, e.spec) == ("RMSprop", "rmsprop")
    assert e.state_dtypes == {"square_avg": BF16, "momentum_buffer": BF16, "grad_avg": BF16}
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
    prodigy = Engine.builtin("prodigy")
    assert not prodigy.reduces_over_group({})  # its sums are over every group: any grouping covers them
    assert prodigy.reduces_over_group({"max_grad_norm": 1.0})
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
    e = Engine.builtin("sgd")
    with pytest.raises(OptgenError, match="SGD has no hyperparameter 'betas'"):
        e.states_used({"betas": 1})
    with pytest.raises(OptgenError, match="no param group 0"):
        e.step_count(0)
    with pytest.raises(OptgenError, match="cannot be set directly|derived"):
        e.set("use_momentum", 1)


def test_launch_shape_and_chunk_size_out_of_range_are_errors_that_say_the_range():
    e = Engine.builtin("adamw")
    with pytest.raises(OptgenError, match="launch shape 48x8: the block size must be a power of two from 32 to 1024"):
        e.set_launch_shape(48, 8)
    with pytest.raises(OptgenError, match="launch shape 64x128"):
        e.set_launch_shape(64, 128)
    e.set_launch_shape(64, 4)
    e.set_launch_shape(0, 0)  # each kernel set's own again
    with pytest.raises(OptgenError, match="chunk size 100 must be a multiple of 64"):
        e.set_chunk_size(100)
    with pytest.raises(OptgenError, match="no param group 0"):
        e.launch_shape(0)
    with pytest.raises(OptgenError, match="no param group 0"):
        e.chunk_size(0)


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
    e = Engine.from_spec(str(REPO / "examples" / "adabelief.yaml"), storage=Storage(BF16))
    assert e.name == "AdaBelief"
    assert e.state_dtypes == {"exp_avg": BF16, "exp_avg_var": BF16}
    assert [s.name for s in e.states] == ["exp_avg", "exp_avg_var"]
    assert e.defaults()["eps"] == 1e-16


def test_a_spec_loaded_at_run_time_warns_as_optgen_check_does():
    spec = REPO / "tests" / "specs" / "literals_and_text.yaml"
    with pytest.warns(optgen.SpecWarning, match=r"literals_and_text.yaml:12:16: warning: '1e39' is beyond float range"):
        e = Engine.from_spec(spec)
    assert e.spec_warnings.count("warning:") == 2 and "'1e-50'" in e.spec_warnings
    assert Engine.builtin("adamw").spec_warnings == ""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a spec without any warns of nothing
        assert Engine.from_spec(REPO / "specs" / "adamw.yaml").spec_warnings == ""


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


def test_text_with_a_nul_character_and_integers_beyond_their_c_type_are_errors():
    # C read "a.yaml\0x" as a.yaml and "lr\0x" as lr; ctypes wrapped 2**64 - 1 to -1, every group.
    adamw = str(REPO / "specs" / "adamw.yaml")
    with pytest.raises(ValueError, match="holds a NUL character"):
        Engine.from_spec(adamw + "\0x")
    with pytest.raises(ValueError, match="name 'lr\\\\x00x' holds a NUL character"):
        Engine.from_spec(adamw, {"lr\0x": 0.5})
    with pytest.raises(ValueError, match="name 'lr\\\\x00x' holds a NUL character"):
        Engine.builtin("adamw", {"lr\0x": 0.5})
    e = Engine.builtin("adamw")
    with pytest.raises(ValueError, match="holds a NUL character"):
        e.set("lr\0x", 0.5)
    with pytest.raises(ValueError, match=r"optgen_set\(\): argument 4, 18446744073709551615, is out of range"):
        e.set("lr", 0.5, group=2 ** 64 - 1)
    with pytest.raises(ValueError, match="out of range"):
        e.step_count(2 ** 64)
    with pytest.raises(ValueError, match="out of range"):
        e.step_count(-1)
    e.set("lr", 0.5)  # every group: none yet
    with pytest.raises(OptgenError, match="no param group 0"):
        e.get("lr", 0)


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


# ---- Storage (C ABI 5): state dtypes, per state by name, master copies, stochastic rounding ----

def test_every_state_has_its_own_dtype():
    e = Engine.builtin("adamw", storage=Storage(BF16, {"exp_avg_sq": F32}))
    assert e.state_dtypes == {"exp_avg": BF16, "exp_avg_sq": F32, "max_exp_avg_sq": BF16}
    assert e.state_dtype("exp_avg_sq") == F32
    assert Engine.builtin("adamw").state_dtypes == dict.fromkeys(["exp_avg", "exp_avg_sq", "max_exp_avg_sq"], F32)
    f16 = Engine.builtin("adam", storage=Storage(state_dtypes={"exp_avg": F16}))  # f16 states are storage too
    assert f16.state_dtypes == {"exp_avg": F16, "exp_avg_sq": F32, "max_exp_avg_sq": F32}
    with pytest.raises(OptgenError, match="AdamW has no state 'nonexistent'"):
        e.state_dtype("nonexistent")


def test_a_spec_loaded_at_run_time_takes_storage_as_the_builtin_does():
    storage = Storage(BF16, {"exp_avg_sq": F32}, MASTER, seed=3)
    at_run_time = Engine.from_spec(REPO / "specs" / "adamw.yaml", storage=storage)
    assert at_run_time.state_dtypes == Engine.builtin("adamw", storage=storage).state_dtypes


def test_storage_that_names_a_state_the_spec_lacks_is_refused_at_creation():
    with pytest.raises(OptgenError, match="'exp_avg_sqq'"):
        Engine.builtin("adamw", storage=Storage(state_dtypes={"exp_avg_sqq": BF16}))
    with pytest.raises(OptgenError, match="'momentum'"):
        Engine.from_spec(REPO / "specs" / "adamw.yaml", storage=Storage(state_dtypes={"momentum": BF16}))


def test_8bit_states_are_storage_of_the_engine():
    e = Engine.builtin("adamw", storage=Storage(Q8, {"exp_avg_sq": UQ8}))  # bitsandbytes' AdamW8bit
    assert e.state_dtypes == {"exp_avg": Q8, "exp_avg_sq": UQ8, "max_exp_avg_sq": Q8}
    assert StateBuffer(0, 1000, Q8, 1024).absmax_offset == 1008


def test_a_matrix_value_is_named_by_the_engine_and_kept_in_f32_by_name():
    assert Engine.builtin("muon").matrix_values == ["o"]
    assert Engine.builtin("adamw").matrix_values == []
    Engine.builtin("muon", storage=Storage(state_dtypes={"o": F32}))  # the kernel set f32:o=f32
    with pytest.raises(OptgenError, match="keeps matrix value 'o' in q8, but a matrix value is bf16 or f32"):
        Engine.builtin("muon", storage=Storage(state_dtypes={"o": Q8}))
    with pytest.raises(OptgenError, match="(?s)names state 'x', which Muon does not have.*its matrix values: o"):
        Engine.builtin("muon", storage=Storage(state_dtypes={"x": F32}))
    with pytest.raises(ValueError, match="matrices are BF16 or F32"):
        Engine.builtin("muon").matrix_function_scratch_bytes(0, 0, 1, 4, 4, Q8)


def test_a_spec_of_blocks_says_their_size():
    assert Engine.from_spec(REPO / "tests" / "specs" / "block_adam.yaml").block_elements == 128
    assert Engine.builtin("adam_mini").block_elements == 0  # its blocks are each tensor's rows as bound


def test_the_8bit_layouts_come_from_the_library():
    signed, unsigned = optgen.Blockwise8Layout.of(Q8), optgen.Blockwise8Layout.of(UQ8)
    for layout in (signed, unsigned):
        assert len(layout.map) == 256 and list(layout.map) == sorted(set(layout.map)) and layout.map[-1] == 1.0
        assert (layout.block_size, layout.min_numel) == (256, 4096)
        assert not layout.in_8bit(4095) and layout.in_8bit(4096)
        assert layout.buffer_bytes(4097) == 4112 + 4 * 17 and layout.absmax_offset(4097) == 4112
    assert signed.map[127] == 0.0 and signed.map[0] == -signed.map[254] > -0.993  # the signed map has no -1
    assert unsigned.map[0] == 0.0
    with pytest.raises(OptgenError, match="not OPTGEN_Q8 or OPTGEN_UQ8"):
        optgen.Blockwise8Layout.of(F32)


@pytest.mark.parametrize("arguments,message", [
    (dict(state_dtype=5), "Storage.state_dtype must be F32, BF16, F16, Q8 or UQ8"),
    (dict(state_dtype=True), "Storage.state_dtype must be"),
    (dict(state_dtypes={"exp_avg": 7}), "the dtype of state 'exp_avg' must be"),
    (dict(state_dtypes={"": BF16}), "non-empty strings"),
    (dict(state_dtypes=(("exp_avg", BF16), ("exp_avg", F32))), "a dtype twice"),
    (dict(param_write=3), "Storage.param_write must be NEAREST, MASTER or STOCHASTIC"),
    (dict(seed=-1), r"Storage.seed must be an int in \[0, 2\*\*64\)"),
    (dict(seed=2 ** 64), "Storage.seed"),
    (dict(seed=1.5), "Storage.seed"),
])
def test_malformed_storage_is_a_value_error_before_any_c_call(arguments, message):
    with pytest.raises(ValueError, match=message):
        Storage(**arguments)


def test_storage_is_a_value():
    a = Storage(BF16, {"exp_avg_sq": F32}, STOCHASTIC, 7)
    assert a == Storage(BF16, (("exp_avg_sq", F32),), STOCHASTIC, 7)
    assert a.state_dtypes == (("exp_avg_sq", F32),)
    assert (a.dtype_of("exp_avg"), a.dtype_of("exp_avg_sq")) == (BF16, F32)
    assert Storage() == Storage(F32, {}, NEAREST, 0)
    with pytest.raises(TypeError, match="storage must be an optgen._capi.Storage"):
        Engine.builtin("adamw", storage=BF16)


def test_storage_that_was_not_generated_is_refused_when_a_group_is_added_naming_what_was():
    # The kernel set is found before any GPU work: these fail the same with or without a GPU.
    e = Engine.builtin("rmsprop", storage=Storage(BF16))
    with pytest.raises(OptgenError, match=r"no kernel for variant \S+ with storage bf16:bf16 was generated "
                                          r"\(its kernels: f32, bf16\)"):
        e.add_param_group([TensorBinding(0x10000, 0x20000, 8, BF16)], {})
    # Only the states of the group's variant must match: {"exp_avg": BF16} would find AdamW's
    # bf16:bf16:exp_avg_sq=f32 (whose max_exp_avg_sq, which only amsgrad has, is bf16); a bf16
    # exp_avg_sq with an f32 exp_avg was not generated.
    adamw = Engine.builtin("adamw", storage=Storage(F32, {"exp_avg_sq": BF16}))
    with pytest.raises(OptgenError, match=r"storage bf16:f32:exp_avg_sq=bf16 was generated \(its kernels: .*"
                                          r"bf16:bf16:exp_avg_sq=f32"):
        adamw.add_param_group([TensorBinding(0x10000, 0x20000, 8, BF16)], {})


def test_a_master_copy_or_stochastic_rounding_of_params_that_need_none_is_refused():
    master = Engine.builtin("adamw", storage=Storage(param_write=MASTER))
    with pytest.raises(OptgenError, match="an fp32 master copy of the params, but this group's params are f32"):
        master.add_param_group([TensorBinding(0x10000, 0x20000, 8, F32)], {})
    rounding = Engine.builtin("adamw", storage=Storage(BF16, param_write=STOCHASTIC, seed=1))
    with pytest.raises(OptgenError, match="stochastic rounding of the params, but this group's params are f32"):
        rounding.add_param_group([TensorBinding(0x10000, 0x20000, 8, F32)], {})
    with pytest.raises(OptgenError, match="stochastic rounding of the params, which is for bf16 params"):
        rounding.add_param_group([TensorBinding(0x10000, 0x20000, 8, F16)], {})


def test_master_weights_of_a_group_that_does_not_exist_is_an_error():
    with pytest.raises(OptgenError, match="no param group 0"):
        Engine.builtin("adamw", storage=Storage(param_write=MASTER)).master_weights(0, 0)


def test_hooks_are_set_and_removed_and_a_matrix_function_needs_a_prepared_group():
    e = Engine.builtin("muon")
    e.set_matrix_hook(lambda work: None)
    e.set_reduction_hook(lambda results: None)
    e.set_matrix_hook(None)
    e.set_reduction_hook(None)
    # A matrix function's scratch is its program's, of the variant a group runs.
    with pytest.raises(OptgenError, match="no param group 0"):
        e.matrix_function_scratch_bytes(0, 0, 1, 64, 32)
    with pytest.raises(OptgenError, match="no param group 0"):
        e.apply_matrix_function(0, 0, [5, 3.4445, -4.775, 2.0315, 1e-7], 1, 1, 1, 64, 32, 0)


def test_engines_of_two_specs_as_one_save_and_load_one_checkpoint(tmp_path):
    # No param group: nothing touches the device.
    muon, adamw = Engine.builtin("muon"), Engine.builtin("adamw")
    both = optgen.Optimizers([muon, adamw])
    assert both.launches_last_step() == 0
    path = str(tmp_path / "both.safetensors")
    both.save(path)
    both.load(path)
    with pytest.raises(OptgenError, match="member 0 is adamw but the checkpoint's is muon"):
        optgen.Optimizers([adamw, muon]).load(path)
    with pytest.raises(OptgenError, match="the checkpoint holds 2 optimizers, this set 1"):
        optgen.Optimizers([muon]).load(path)
    with pytest.raises(OptgenError, match="member 1 is given twice"):
        optgen.Optimizers([muon, muon])
    adamw.close()
    with pytest.raises(OptgenError, match="member 1 is null"):
        optgen.Optimizers([muon, adamw])
