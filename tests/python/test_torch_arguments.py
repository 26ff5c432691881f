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
        ot.AdamW([p], state_dtype=torch.float16)
    with pytest.raises(TypeError, match="unexpected keyword argument 'momentum'"):
        ot.AdamW([p], momentum=0.9)


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
    with pytest.raises(ValueError, match="step CUDA tensors"):
        ot.Optimizer.from_spec(spec, [torch.zeros(1)], betas=(0.8, 0.9), state_dtype=torch.bfloat16)


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
