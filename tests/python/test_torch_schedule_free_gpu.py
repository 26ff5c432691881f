"""optgen.torch.AdamWScheduleFree on a GPU against its authors' code (PyPI's schedulefree 1.4.1,
carried into .pylibs on the GPU machine: bench/README.md; skipped where it is missing): the
parameters and states after every step and after every eval() and train() between steps, and
state_dicts loaded both ways mid-run."""

import copy

import pytest

torch = pytest.importorskip("torch")

import optgen.torch as ot  # noqa: E402
import cuda_tensors  # noqa: E402

pytestmark = pytest.mark.gpu

SHAPES = [(33, 17), (5,), (1000,), (4, 3, 3, 3)]
STEPS = 12
# Both sides compute in float32 on the GPU, schedulefree op by op, optgen fused (other roundings).
RTOL, ATOL = 2e-5, 1e-6

CONFIGS = [
    dict(),
    dict(weight_decay=0.1),
    dict(warmup_steps=5, weight_decay=0.05),
    dict(r=1.0, weight_lr_power=1.0, warmup_steps=20),
    dict(betas=(0.5, 0.9), eps=1e-3, lr=0.05),
]


def published():
    return pytest.importorskip("schedulefree", reason="needs schedulefree (pip install schedulefree)").AdamWScheduleFree


def make_params(seed):
    return cuda_tensors.make_params(SHAPES, seed)


def gradients(step):
    return cuda_tensors.gradients(SHAPES, step)


def close(a, b, what):
    torch.testing.assert_close(a.float(), b.float(), rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def compare(ours, theirs, ours_p, theirs_p, when):
    for i, (p, q) in enumerate(zip(ours_p, theirs_p)):
        close(p, q, f"param {i} {when}")
        for name in ("z", "exp_avg_sq"):
            close(ours.state[p][name], theirs.state[q][name], f"{name} of param {i} {when}")


def step_both(ours, theirs, ours_p, theirs_p, step):
    for p, q, g in zip(ours_p, theirs_p, gradients(step)):
        p.grad, q.grad = g.clone(), g.clone()  # schedulefree divides its gradient in place
    ours.step()
    theirs.step()


@pytest.mark.parametrize("config", CONFIGS, ids=[",".join(f"{k}={v}" for k, v in c.items()) or "defaults"
                                                 for c in CONFIGS])
def test_matches_schedulefree_step_by_step_with_eval_and_train_between(config):
    theirs_cls = published()
    ours_p, theirs_p = make_params(1), make_params(1)
    ours = ot.AdamWScheduleFree(ours_p, **config)
    theirs = theirs_cls(theirs_p, **config)
    ours.train()
    theirs.train()
    for step in range(STEPS):
        step_both(ours, theirs, ours_p, theirs_p, step)
        compare(ours, theirs, ours_p, theirs_p, f"after step {step + 1}")
        if step % 4 == 3:
            ours.eval()
            theirs.eval()
            compare(ours, theirs, ours_p, theirs_p, f"after eval() at step {step + 1}")
            ours.train()
            theirs.train()
            compare(ours, theirs, ours_p, theirs_p, f"after train() at step {step + 1}")
    ours.eval()
    theirs.eval()
    compare(ours, theirs, ours_p, theirs_p, "after the last eval()")
    assert [g["train_mode"] for g in ours.param_groups] == [False]


def test_groups_in_different_modes_move_as_schedulefree_moves_them():
    """A group added after train() is in eval mode (schedulefree's default train_mode is False), and
    steps all the same (step() asks the first group's mode): eval() then moves only the groups in
    train mode, bound to the engine as they are, and train() every group."""
    theirs_cls = published()
    ours_p, theirs_p = make_params(4), make_params(4)
    later_ours, later_theirs = make_params(5)[:2], make_params(5)[:2]
    ours = ot.AdamWScheduleFree(ours_p, weight_decay=0.05)
    theirs = theirs_cls(theirs_p, weight_decay=0.05)
    ours.train()
    theirs.train()
    for step in range(3):
        step_both(ours, theirs, ours_p, theirs_p, step)
    ours.add_param_group(dict(params=later_ours, lr=0.01))
    theirs.add_param_group(dict(params=later_theirs, lr=0.01))
    assert [g["train_mode"] for g in ours.param_groups] == [g["train_mode"] for g in theirs.param_groups]
    assert [g["train_mode"] for g in ours.param_groups] == [True, False]
    everything_ours, everything_theirs = ours_p + later_ours, theirs_p + later_theirs

    def step_everything(step):
        grads = cuda_tensors.gradients(SHAPES + SHAPES[:2], step)
        for p, q, g in zip(everything_ours, everything_theirs, grads):
            p.grad, q.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()

    step_everything(3)  # binds both groups, in different modes
    compare(ours, theirs, everything_ours, everything_theirs, "after a step of both groups")
    ours.eval()
    theirs.eval()
    compare(ours, theirs, everything_ours, everything_theirs, "after eval() of the first group alone")
    ours.train()
    theirs.train()
    compare(ours, theirs, everything_ours, everything_theirs, "after train() of both groups")
    for step in range(4, 7):
        step_everything(step)
    compare(ours, theirs, everything_ours, everything_theirs, "after more steps of both groups")
    assert [g["train_mode"] for g in ours.param_groups] == [True, True]


def test_step_in_eval_mode_raises_and_modes_switch_once():
    ours_p = make_params(2)
    opt = ot.AdamWScheduleFree(ours_p)
    with pytest.raises(Exception, match="not in train mode"):
        opt.step()
    opt.train()
    opt.train()  # already in train mode: nothing moves
    for step in range(2):  # after one step y is z (its averaging weight is 1): eval would not move it
        for p, g in zip(ours_p, gradients(step)):
            p.grad = g
        opt.step()
    before = [p.detach().clone() for p in ours_p]
    opt.eval()
    moved = [p.detach().clone() for p in ours_p]
    opt.eval()  # already in eval mode: nothing moves
    for p, m, b in zip(ours_p, moved, before):
        assert torch.equal(p, m)
        assert not torch.equal(p, b)


@pytest.mark.parametrize("direction", ["schedulefree to optgen", "optgen to schedulefree"])
def test_state_dicts_load_both_ways_mid_run(direction):
    theirs_cls = published()
    config = dict(weight_decay=0.1, warmup_steps=3)
    ours_p, theirs_p = make_params(3), make_params(3)
    ours = ot.AdamWScheduleFree(ours_p, **config)
    theirs = theirs_cls(theirs_p, **config)
    ours.train()
    theirs.train()
    for step in range(5):
        step_both(ours, theirs, ours_p, theirs_p, step)
    # The authors save in eval mode (the parameters at x); load into a fresh optimizer of the other
    # kind over copies of the parameters, and go on from there.
    ours.eval()
    theirs.eval()
    if direction == "schedulefree to optgen":
        saved = copy.deepcopy(theirs.state_dict())
        new_p = [torch.nn.Parameter(q.detach().clone()) for q in theirs_p]
        ours_p = new_p
        ours = ot.AdamWScheduleFree(ours_p, **config)
        ours.load_state_dict(saved)
    else:
        saved = copy.deepcopy(ours.state_dict())
        assert saved["param_groups"][0]["k"] == 5
        new_p = [torch.nn.Parameter(p.detach().clone()) for p in ours_p]
        theirs_p = new_p
        theirs = theirs_cls(theirs_p, **config)
        theirs.load_state_dict(saved)
    ours.train()
    theirs.train()
    compare(ours, theirs, ours_p, theirs_p, "after loading and train()")
    for step in range(5, 10):
        step_both(ours, theirs, ours_p, theirs_p, step)
        compare(ours, theirs, ours_p, theirs_p, f"after step {step + 1}")
