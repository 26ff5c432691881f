"""optgen.torch's argument checks: torch needed, no GPU (they fail before any tensor is bound)."""

import inspect
import pathlib
import types

import pytest

torch = pytest.importorskip("torch")
import optgen  # noqa: E402
import optgen.torch as ot  # noqa: E402

pytestmark = pytest.mark.torch
REPO = pathlib.Path(__file__).resolve().parents[2]

# Each class and torch.optim's class of the same name, where torch has one.
PAIRS = [(name, getattr(torch.optim, name, None)) for name in ot.__all__ if name != "Optimizer"]


def test_the_namespace_holds_only_the_optimizers():
    public = {name for name, value in vars(ot).items()
              if not name.startswith("_") and not isinstance(value, types.ModuleType)}
    assert public == set(ot.__all__)
    assert all(issubclass(getattr(ot, name), torch.optim.Optimizer) for name in ot.__all__)


@pytest.mark.parametrize("name,torch_class", PAIRS)
def test_signatures_and_defaults_are_torchs(name, torch_class):
    ours = inspect.signature(getattr(ot, name).__init__).parameters
    if torch_class is None:
        return  # Lion: the paper's code
    theirs = inspect.signature(torch_class.__init__).parameters
    implementation = {"foreach", "fused", "capturable", "differentiable"}
    for arg, p in theirs.items():
        if arg in ("self", "params") or arg in implementation:
            continue
        assert arg in ours, f"{name} lacks torch's argument {arg}"
        assert ours[arg].default == p.default, f"{name}({arg}=...) defaults to {ours[arg].default}, torch to {p.default}"


def test_cpu_parameters_are_refused():
    with pytest.raises(ValueError, match="step CUDA tensors; a parameter is on cpu"):
        ot.AdamW([torch.nn.Parameter(torch.zeros(3))])


def test_torchs_argument_checks():
    p = torch.zeros(1)  # never reached: the checks come first
    with pytest.raises(ValueError, match="Invalid learning rate"):
        ot.AdamW([p], lr=-1)
    with pytest.raises(ValueError, match="Nesterov momentum requires"):
        ot.SGD([p], nesterov=True)
    with pytest.raises(ValueError, match="is AdamW"):
        ot.Adam([p], decoupled_weight_decay=True)
    with pytest.raises(ValueError, match="not differentiable"):
        ot.Adam([p], differentiable=True)
    with pytest.raises(ValueError, match="etas must be a pair"):
        ot.Rprop([p], etas=(0.5,))
    with pytest.raises(ValueError, match="state_dtype must be"):
        ot.AdamW([p], state_dtype=torch.float64)
    with pytest.raises(TypeError, match="unexpected keyword argument 'momentum'"):
        ot.AdamW([p], momentum=0.9)
    with pytest.raises(ValueError, match="Number of steps must be less than 100"):  # torch's, at its step
        ot.Muon([torch.zeros(2, 2)], ns_steps=100)
    with pytest.raises(ValueError, match="step CUDA tensors"):  # 99 passes every argument check
        ot.Muon([torch.zeros(2, 2)], ns_steps=99)


def test_from_spec_raises_the_spec_error(tmp_path):
    spec = tmp_path / "bad.yaml"
    spec.write_text("optimizer: Bad\nsummary: one mistake\nhyperparameters:\n  lr: {type: float, default: 0.1}\n"
                    "update:\n  - param = param - lr * grad * undefined_name\n")
    with pytest.raises(optgen.OptgenError, match=r"bad.yaml:6:\d+: error: unknown name 'undefined_name'"):
        ot.Optimizer.from_spec(spec, [torch.zeros(1)])


def test_from_spec_checks_hyperparameters_by_the_specs_names():
    spec = REPO / "examples" / "adabelief.yaml"
    with pytest.raises(TypeError, match="AdaBelief has no hyperparameter 'momentum'"):
        ot.Optimizer.from_spec(spec, [torch.zeros(1)], momentum=0.9)
    # The spec's beta1 and beta2 are torch's betas: the message says how to give them.
    with pytest.raises(TypeError, match=r"AdaBelief has no hyperparameter 'beta1' \(it has: .*betas.*\); give "
                                        r"betas=\(beta1, beta2\), as torch.optim takes them"):
        ot.Optimizer.from_spec(spec, [torch.zeros(1)], beta1=0.8)
    with pytest.raises(ValueError, match="step CUDA tensors"):
        ot.Optimizer.from_spec(spec, [torch.zeros(1)], betas=(0.8, 0.9), state_dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="state_dtype names state 'exp_avg_sq', which AdaBelief does not have"):
        ot.Optimizer.from_spec(spec, [torch.zeros(1)], state_dtype={"exp_avg_sq": torch.float32})
    with pytest.raises(TypeError, match="master_weights must be True or False"):
        ot.Optimizer.from_spec(spec, [torch.zeros(1)], master_weights="yes")


@pytest.mark.parametrize("arguments", [
    dict(lr=-1.0), dict(beta2_decay=0.5), dict(eps=(-1.0, 1e-3)), dict(eps=(None, -1.0)), dict(d=0.5),
    dict(weight_decay=-0.1), dict(lr=torch.tensor([0.1, 0.2])), dict(lr=-1)])
def test_adafactor_refuses_what_torch_refuses_with_its_message(arguments):
    p = torch.zeros(1, requires_grad=True)  # never reached: the checks come first
    with pytest.raises(ValueError) as theirs:
        torch.optim.Adafactor([p], **arguments)
    with pytest.raises(ValueError) as ours:
        ot.Adafactor([p], **arguments)
    assert str(ours.value) == str(theirs.value)


def test_adafactor_accepts_torchs_edges_before_any_tensor_is_bound():
    p = torch.zeros(1, requires_grad=True)
    torch.optim.Adafactor([p], lr=0.0, beta2_decay=0.0, eps=(0.0, 0.0), d=1.0)
    with pytest.raises(ValueError, match="step CUDA tensors"):  # past every argument check
        ot.Adafactor([p], lr=0.0, beta2_decay=0.0, eps=(0.0, 0.0), d=1.0, foreach=True)


ADAFACTOR_NAMES = ["lr", "beta2_decay", "eps1", "eps2", "d", "weight_decay", "maximize", "max_grad_norm"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_adafactor_resolves_eps_none_to_the_dtypes_machine_epsilon_as_torch_does(dtype):
    """torch: `if eps1 is None: eps1 = torch.finfo(param.dtype).eps`, from the first parameter it steps."""
    fake = types.SimpleNamespace(_spec_names=ADAFACTOR_NAMES)  # _group_values reads nothing else
    values = ot.Adafactor._group_values(fake, {"lr": 0.1, "eps": (None, 1e-2)}, dtype)
    assert values == {"lr": 0.1, "eps1": torch.finfo(dtype).eps, "eps2": 1e-2}
    assert ot.Adafactor._group_values(fake, {"eps": (1e-30, 1e-2)}, dtype) == {"eps1": 1e-30, "eps2": 1e-2}
    # before any gradient, the dtype is unknown: eps1 is left to the spec's default (float32's)
    assert ot.Adafactor._group_values(fake, {"eps": (None, 1e-2)}, None) == {"eps2": 1e-2}
    # one hyperparameter that changed (a scheduler's lr): eps1 is not touched
    assert ot.Adafactor._group_values(fake, {"lr": 0.5}, dtype) == {"lr": 0.5}


# ---- Storage: state_dtype (a dtype, or one per state), master_weights, stochastic_rounding, seed ----

def cpu_param(dtype=torch.bfloat16):
    return torch.nn.Parameter(torch.zeros(3, dtype=dtype))  # refused as a CPU tensor once the options pass


@pytest.mark.parametrize("state_dtype", [
    torch.float32, torch.bfloat16, torch.float16, None, {}, {"exp_avg": torch.bfloat16},
    {"*": torch.bfloat16, "exp_avg_sq": torch.float32},
    {"exp_avg": torch.bfloat16, "exp_avg_sq": torch.float16, "max_exp_avg_sq": torch.float32},
    "q8", {"*": "q8", "exp_avg_sq": "uq8"}])
def test_state_dtypes_that_are_accepted(state_dtype):
    with pytest.raises(ValueError, match="step CUDA tensors"):  # past every option check
        ot.AdamW([cpu_param()], state_dtype=state_dtype)


@pytest.mark.parametrize("state_dtype,message", [
    (torch.float64, "state_dtype must be torch.float32, torch.bfloat16, torch.float16, 'q8' or 'uq8', or a dict of "
                    "them by state name; got torch.float64"),
    (torch.int8, "state_dtype must be .* got torch.int8"),
    ("bfloat16", "state_dtype must be .* got 'bfloat16'"),
    ([torch.bfloat16], "state_dtype must be"),
    ({"exp_avg_sqq": torch.float32}, r"state_dtype names state 'exp_avg_sqq', which AdamW does not have \(its states: "
                                     "exp_avg, exp_avg_sq, max_exp_avg_sq; '\\*': every state not named\\)"),
    ({"momentum_buffer": torch.float32}, "state_dtype names state 'momentum_buffer', which AdamW does not have"),
    ({"exp_avg": torch.float64}, r"state_dtype\['exp_avg'\] must be torch.float32, torch.bfloat16, "
                                 "torch.float16, 'q8' or 'uq8'; got torch.float64"),
    ({"exp_avg": "q4"}, r"state_dtype\['exp_avg'\] must be .* got 'q4'"),
    ({"exp_avg": "bf16"}, r"state_dtype\['exp_avg'\] must be .* got 'bf16'"),
    ({"*": torch.float64}, r"state_dtype\['\*'\] must be"),
])
def test_bad_state_dtypes_are_value_errors_that_name_them(state_dtype, message):
    with pytest.raises(ValueError, match=message):
        ot.AdamW([cpu_param()], state_dtype=state_dtype)


def test_a_state_dtype_dict_names_the_states_of_the_spec():
    with pytest.raises(ValueError, match="which SGD does not have \\(its states: momentum_buffer;"):
        ot.SGD([cpu_param()], state_dtype={"exp_avg": torch.bfloat16})
    with pytest.raises(ValueError, match="step CUDA tensors"):
        ot.SGD([cpu_param()], state_dtype={"momentum_buffer": torch.bfloat16})
    with pytest.raises(ValueError, match="step CUDA tensors"):
        ot.Adafactor([cpu_param()], state_dtype={"row_var": torch.float32, "variance": torch.float32})


@pytest.mark.parametrize("option", ["master_weights", "stochastic_rounding"])
@pytest.mark.parametrize("value", [1, 0, "True", None, 1.0])
def test_master_weights_and_stochastic_rounding_are_bools(option, value):
    with pytest.raises(TypeError, match=f"{option} must be True or False; got {value!r}"):
        ot.AdamW([cpu_param()], **{option: value})


@pytest.mark.parametrize("seed,error,message", [
    (-1, ValueError, r"seed must be in \[0, 2\*\*64\); got -1"), (2 ** 64, ValueError, "seed must be in"),
    (1.0, TypeError, "seed must be an int; got 1.0"), ("7", TypeError, "seed must be an int"),
    (True, TypeError, "seed must be an int")])
def test_the_seed_is_an_unsigned_64_bit_int(seed, error, message):
    with pytest.raises(error, match=message):
        ot.AdamW([cpu_param()], stochastic_rounding=True, seed=seed, state_dtype=torch.bfloat16)


def test_master_weights_and_stochastic_rounding_exclude_each_other():
    with pytest.raises(ValueError, match="exclude each other"):
        ot.AdamW([cpu_param()], master_weights=True, stochastic_rounding=True)


def test_options_that_are_accepted_reach_the_parameter_checks():
    for options in (dict(master_weights=True), dict(master_weights=False, seed=5),
                    dict(stochastic_rounding=True, seed=2 ** 64 - 1, state_dtype=torch.bfloat16)):
        with pytest.raises(ValueError, match="step CUDA tensors"):
            ot.AdamW([cpu_param()], **options)
    with pytest.raises(ValueError, match="step CUDA tensors"):
        ot.AdamW([cpu_param(torch.float16)], master_weights=True)  # f16 params have master copies too


def test_master_weights_refuse_float32_parameters():
    with pytest.raises(ValueError, match="master_weights=True keeps an fp32 master copy of bfloat16 and float16 "
                                         "parameters, but a parameter of shape \\(3,\\) is float32"):
        ot.AdamW([cpu_param(torch.float32)], master_weights=True)
    with pytest.raises(ValueError, match="is float32"):  # in any group
        ot.AdamW([{"params": [cpu_param(torch.float32)], "lr": 0.1}], master_weights=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_stochastic_rounding_refuses_parameters_other_than_bfloat16(dtype):
    with pytest.raises(ValueError, match=f"stochastic_rounding=True rounds bfloat16 parameters, but a parameter of "
                                         f"shape \\(3,\\) is {dtype}"):
        ot.AdamW([cpu_param(dtype)], stochastic_rounding=True, state_dtype=torch.bfloat16)


def test_from_spec_takes_the_storage_options():
    spec = REPO / "specs" / "adamw.yaml"
    with pytest.raises(ValueError, match="step CUDA tensors"):
        ot.Optimizer.from_spec(spec, [cpu_param()], lr=1e-3, master_weights=True, seed=3,
                               state_dtype={"*": torch.bfloat16, "exp_avg_sq": torch.float32})
    with pytest.raises(ValueError, match="is float32"):
        ot.Optimizer.from_spec(spec, [cpu_param(torch.float32)], master_weights=True)


def test_the_engine_factory_gets_the_storage_of_the_options():
    made = []

    def factory(storage):
        made.append(storage)
        return optgen.Engine.builtin("adamw", storage=storage)

    with pytest.raises(ValueError, match="step CUDA tensors"):
        ot.Optimizer([cpu_param()], factory, state_dtype={"*": torch.bfloat16, "exp_avg_sq": torch.float32},
                     stochastic_rounding=True, seed=9)
    assert made == [optgen.Storage()]  # the engine that describes the spec; the others come with the first step
    from optgen.torch._optimizer import _storage_of
    storage = _storage_of({"*": torch.bfloat16, "exp_avg_sq": torch.float32}, False, True, 9,
                          optgen.Engine.builtin("adamw"))
    assert storage == optgen.Storage(optgen.BF16, {"exp_avg_sq": optgen.F32}, optgen.STOCHASTIC, 9)
    assert _storage_of(None, True, False, 0, optgen.Engine.builtin("adamw")) == optgen.Storage(
        param_write=optgen.MASTER)
