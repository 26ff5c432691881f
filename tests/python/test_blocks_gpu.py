"""A spec of blocks (`block_elements`), loaded at run time by optgen.torch: tests/specs/block_adam.yaml,
one second moment per block of 128 consecutive elements of a parameter whatever its shape, Adam's per
element for a parameter that is not a whole number of blocks, against the same rule written in
torch; its states as torch sees them, and a state_dict's round trip."""

import copy
import pathlib

import pytest

torch = pytest.importorskip("torch")

import optgen.torch as ot  # noqa: E402
import cuda_tensors  # noqa: E402

pytestmark = pytest.mark.gpu

SPEC = pathlib.Path(__file__).resolve().parents[1] / "specs" / "block_adam.yaml"
BLOCK = 128
# Whole blocks across rows (16 x 64: 8 blocks; 3 x 640: 15) and in three dimensions; one block;
# no whole number of blocks (7, 1000, 10 x 30, 70001), and no elements.
SHAPES = [(16, 64), (3, 640), (2, 4, 48), (128,), (7,), (1000,), (10, 30), (70001,), (0,)]


def block_adam_step(params, grads, ms, vs, step, lr, beta1=0.9, beta2=0.999, eps=1e-8):
    """The rule in torch: per block of a flat parameter where it is whole blocks, else per element."""
    bc1 = 1 - beta1 ** step
    bc2_sqrt = (1 - beta2 ** step) ** 0.5
    for i, (p, g) in enumerate(zip(params, grads)):
        ms[i].lerp_(g, 1 - beta1)
        n = g.numel()
        if n and n % BLOCK == 0:
            mean = (g.double().reshape(-1, BLOCK) ** 2).mean(dim=1)
            vs[i].mul_(beta2).add_((1 - beta2) * mean.float().reshape(vs[i].shape))
            second = vs[i].reshape(-1, 1).expand(-1, BLOCK).reshape(p.shape)
        else:
            vs[i].mul_(beta2).add_((1 - beta2) * g * g)
            second = vs[i]
        p.data -= lr / bc1 * ms[i] / (second.sqrt() / bc2_sqrt + eps)


def test_one_second_moment_per_block_as_the_rule_in_torch():
    ours_p, theirs_p = cuda_tensors.make_params(SHAPES, 3), cuda_tensors.make_params(SHAPES, 3)
    ours = ot.Optimizer.from_spec(SPEC, ours_p, lr=0.01)
    ms = [torch.zeros_like(p) for p in theirs_p]
    vs = [torch.zeros(p.numel() // BLOCK, 1, device="cuda") if p.numel() and p.numel() % BLOCK == 0
          else torch.zeros_like(p) for p in theirs_p]
    for step in range(1, 5):
        for p, q, g in zip(ours_p, theirs_p, cuda_tensors.gradients(SHAPES, step, seed=7)):
            p.grad, q.grad = g.clone(), g.clone()
        ours.step()
        block_adam_step(theirs_p, [q.grad for q in theirs_p], ms, vs, step, 0.01)
        for i, (p, q) in enumerate(zip(ours_p, theirs_p)):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m: f"step {step}, param {i}: {m}")
    for i, p in enumerate(ours_p):
        state = ours.state[p]
        if p.numel() and p.numel() % BLOCK == 0:
            assert "v" not in state
            assert state["vmean"].shape == (p.numel() // BLOCK, 1)  # one value per block (row of the view)
            torch.testing.assert_close(state["vmean"], vs[i], rtol=1e-5, atol=1e-12)
        else:
            assert "vmean" not in state
            assert state["v"].shape == p.shape
        assert state["m"].shape == p.shape


def test_a_state_dict_round_trip_steps_on_alike():
    params = cuda_tensors.make_params(SHAPES, 5)
    opt = ot.Optimizer.from_spec(SPEC, params)
    for step in range(1, 3):
        for p, g in zip(params, cuda_tensors.gradients(SHAPES, step, seed=9)):
            p.grad = g
        opt.step()
    saved = copy.deepcopy(opt.state_dict())
    twins = [p.detach().clone().requires_grad_() for p in params]
    other = ot.Optimizer.from_spec(SPEC, twins)
    other.load_state_dict(saved)
    for p, q, g in zip(params, twins, cuda_tensors.gradients(SHAPES, 3, seed=9)):
        p.grad, q.grad = g.clone(), g.clone()
    opt.step()
    other.step()
    for p, q in zip(params, twins):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
