"""optgen.torch's argument checks: torch needed, no GPU (they fail before any tensor is bound)."""

import inspect
import pathlib

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
