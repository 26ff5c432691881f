"""optgen.torch's argument checks: torch needed, no GPU (they fail before any tensor is bound)."""

import inspect

import pytest

torch = pytest.importorskip("torch")
import optgen.torch as ot  # noqa: E402

pytestmark = pytest.mark.torch

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
