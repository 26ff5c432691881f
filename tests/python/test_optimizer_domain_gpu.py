"""A user's spec that reduces over every param group, loaded at run time by optgen.torch: SGD with
momentum whose gradients are clipped by their norm over every group, as
torch.nn.utils.clip_grad_norm_(model.parameters()) before torch.optim.SGD clips them, with a
step counter the groups share (`scope: optimizer`)."""

import pytest

torch = pytest.importorskip("torch")

import optgen.torch as ot  # noqa: E402
import cuda_tensors  # noqa: E402

pytestmark = pytest.mark.gpu

SPEC = """
optimizer: GlobalClipSGD
summary: SGD with momentum, its gradients clipped by their norm over every param group
hyperparameters:
  lr:       {type: float, default: 0.01}
  momentum: {type: float, default: 0.9}
  max_norm: {type: float, default: 1.0}
state:
  buf: {init: zeros}
scalar_state:
  clipped: {init: 0, scope: optimizer}
update:
  - total = optimizer_norm(grad)
  - "clipped = total > max_norm ? clipped + 1 : clipped"
  - buf = momentum * buf + grad * min(1, max_norm / (total + 1e-6))
  - param = param - lr * buf
"""

SHAPES = [(64, 33), (7,), (3, 5, 5), (1000,)]


def make_params(seed):
    return cuda_tensors.make_params(SHAPES, seed)


def gradients(step, scale):
    return cuda_tensors.gradients(SHAPES, step, seed=100, scale=scale)


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "global_clip_sgd.yaml"
    path.write_text(SPEC)
    return path


def test_clips_by_the_norm_over_every_group_as_torch_then_steps_each_group(spec_file):
    ours_p, theirs_p = make_params(1), make_params(1)
    ours = ot.Optimizer.from_spec(spec_file, [dict(params=ours_p[:2], lr=0.1), dict(params=ours_p[2:], lr=0.02)],
                                  momentum=0.9, max_norm=5.0)
    theirs = torch.optim.SGD([dict(params=theirs_p[:2], lr=0.1), dict(params=theirs_p[2:], lr=0.02)], momentum=0.9,
                             foreach=False)
    clipped = 0
    for step in range(6):
        scale = 0.01 if step % 2 else 1.0  # every other step under max_norm: not clipped
        for p, q, g in zip(ours_p, theirs_p, gradients(step, scale)):
            p.grad, q.grad = g.clone(), g.clone()
        ours.step()
        total = torch.nn.utils.clip_grad_norm_(theirs_p, 5.0)
        clipped += int(total > 5.0)
        theirs.step()
        for i, (p, q) in enumerate(zip(ours_p, theirs_p)):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m: f"step {step + 1}, param {i}: {m}")
    assert clipped == 3
    for group in range(2):
        assert ours.engine.scalar_state("clipped", group) == clipped


def test_a_hyperparameter_the_shared_state_reads_must_match_in_every_group(spec_file):
    params = make_params(2)
    opt = ot.Optimizer.from_spec(spec_file, [dict(params=params[:2]), dict(params=params[2:], max_norm=2.0)])
    for p, g in zip(params, gradients(0, 1.0)):
        p.grad = g
    with pytest.raises(Exception, match="hyperparameter 'max_norm' is 2 in param group 1 and 1 in group 0"):
        opt.step()
