"""A user's spec with a state of one value per tensor (`shape: tensor`), loaded at run time by
optgen.torch: NovoGrad (Ginsburg et al., 2019, Algorithm 1), whose second moment is one value per
layer, against the same rule written in torch; the state as torch sees it (a tensor of shape ()),
and a state_dict's round trip."""

import copy

import pytest

torch = pytest.importorskip("torch")

import optgen.torch as ot  # noqa: E402
import cuda_tensors  # noqa: E402

pytestmark = pytest.mark.gpu

SPEC = """
optimizer: NovoGrad
summary: NovoGrad, its second moment one value per tensor
hyperparameters:
  lr:    {type: float, default: 0.01}
  beta1: {type: float, default: 0.95}
  beta2: {type: float, default: 0.98}
  eps:   {type: float, default: 1.0e-8}
  wd:    {type: float, default: 0.0}
state:
  m: {init: zeros}
  v: {init: zeros, shape: tensor}
update:
  - n2 = sum(grad * grad)
  - "v = step == 1 ? n2 : beta2 * v + (1 - beta2) * n2"
  - m = beta1 * m + grad / (sqrt(v) + eps) + wd * param
  - param = param - lr * m
"""

SHAPES = [(64, 33), (7,), (3, 5, 5), (100000,), (0,)]


def make_params(seed):
    return cuda_tensors.make_params(SHAPES, seed)


def gradients(step):
    return cuda_tensors.gradients(SHAPES, step, seed=100)


def novograd_step(params, grads, ms, vs, step, lr, beta1=0.95, beta2=0.98, eps=1e-8, wd=0.0):
    """The rule in torch, one tensor at a time, its norms in float64 as optgen's reductions are."""
    for i, (p, g) in enumerate(zip(params, grads)):
        n2 = (g.double() * g.double()).sum()
        vs[i] = n2 if step == 1 else beta2 * vs[i] + (1 - beta2) * n2
        v = vs[i].float()
        ms[i] = beta1 * ms[i] + g / (v.sqrt() + eps) + wd * p.detach()
        p.data -= lr * ms[i]


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "novograd.yaml"
    path.write_text(SPEC)
    return path


def test_one_second_moment_per_tensor_as_the_rule_in_torch(spec_file):
    ours_p, theirs_p = make_params(1), make_params(1)
    ours = ot.Optimizer.from_spec(spec_file, [dict(params=ours_p[:2], lr=0.1), dict(params=ours_p[2:], lr=0.02, wd=0.01)])
    ms = [torch.zeros_like(p) for p in theirs_p]
    vs = [torch.zeros((), dtype=torch.float64, device="cuda") for _ in theirs_p]
    for step in range(1, 6):
        for p, q, g in zip(ours_p, theirs_p, gradients(step)):
            p.grad, q.grad = g.clone(), g.clone()
        ours.step()
        novograd_step(theirs_p[:2], [q.grad for q in theirs_p[:2]], ms, vs, step, 0.1)
        rest_m, rest_v = ms[2:], vs[2:]
        novograd_step(theirs_p[2:], [q.grad for q in theirs_p[2:]], rest_m, rest_v, step, 0.02, wd=0.01)
        ms[2:], vs[2:] = rest_m, rest_v
        for i, (p, q) in enumerate(zip(ours_p, theirs_p)):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m: f"step {step}, param {i}: {m}")
    for i, p in enumerate(ours_p):
        v = ours.state[p]["v"]
        assert v.shape == ()  # one value per tensor
        torch.testing.assert_close(v.double(), vs[i], rtol=1e-6, atol=0)


def test_a_state_dict_carries_the_value_per_tensor(spec_file):
    params, again = make_params(2), make_params(2)
    opt = ot.Optimizer.from_spec(spec_file, params)
    for step in range(1, 4):
        for p, q, g in zip(params, again, gradients(step)):
            p.grad, q.grad = g.clone(), g.clone()
        opt.step()
    saved = copy.deepcopy(opt.state_dict())  # as torch.save and torch.load would: no tensor shared
    assert saved["state"][0]["v"].shape == ()
    resumed = ot.Optimizer.from_spec(spec_file, again)
    for p, q in zip(params, again):
        q.data.copy_(p.data)
    resumed.load_state_dict(saved)
    for step in range(4, 6):
        for p, q, g in zip(params, again, gradients(step)):
            p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        resumed.step()
    for i, (p, q) in enumerate(zip(params, again)):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=lambda m: f"param {i}: {m}")
