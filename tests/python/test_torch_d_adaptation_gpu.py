"""optgen.torch.Prodigy and optgen.torch.DAdaptAdam on a GPU against their authors' code (PyPI's
prodigyopt and dadaptation, carried into .pylibs on the GPU machine: bench/README.md; each test
is skipped where its package is missing): the parameters, the states and D after every step, for
one param group and for two groups that share one D, as the published classes' do."""

import copy

import pytest

torch = pytest.importorskip("torch")

import optgen.torch as ot  # noqa: E402
import cuda_tensors  # noqa: E402

pytestmark = pytest.mark.gpu

SHAPES = [(33, 17), (5,), (1000,), (4, 3, 3, 3)]
STEPS = 12
# Both sides compute in float32 on the GPU and sum D's estimate in different orders (the published
# code a float32 dot per tensor, optgen float partials combined in double): D, and so every step,
# agrees to a few float32 roundings.
RTOL, ATOL = 1e-4, 1e-6

# (optgen.torch class, published module, published class, configurations, their states)
OPTIMIZERS = {
    "Prodigy": ("prodigyopt", "Prodigy", [
        dict(),
        dict(weight_decay=0.1),
        dict(weight_decay=0.1, decouple=False),
        dict(use_bias_correction=True, betas=(0.8, 0.95)),
        dict(safeguard_warmup=True, lr=0.5),
        dict(d0=1e-3, d_coef=0.5, growth_rate=1.02),
        dict(beta3=0.9, betas=(0.5, 0.9), eps=1e-4),
        dict(betas=(0.0, 0.99), weight_decay=0.1),
    ], ("exp_avg_sq", "s")),
    "DAdaptAdam": ("dadaptation", "DAdaptAdam", [
        dict(),
        dict(weight_decay=0.1),
        dict(weight_decay=0.1, decouple=True),
        dict(use_bias_correction=True, betas=(0.8, 0.95)),
        dict(d0=1e-3, growth_rate=1.02, lr=0.5),
        dict(betas=(0.5, 0.9), eps=1e-4),
    ], ("exp_avg", "exp_avg_sq", "s")),
}
CASES = [(name, config) for name, (_, _, configs, _) in OPTIMIZERS.items() for config in configs]


def published(name):
    module, cls, _, _ = OPTIMIZERS[name]
    return getattr(pytest.importorskip(module, reason=f"needs {module} (pip install {module})"), cls)


def make_params(seed):
    return cuda_tensors.make_params(SHAPES, seed)


def gradients(step):
    return cuda_tensors.gradients(SHAPES, step)


def close(a, b, what):
    torch.testing.assert_close(a.float(), b.float(), rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def d_of(opt, p):
    opt.state_dict()  # brings the step counts and scalar state from the device into opt.state
    return float(opt.state[p]["d"])


@pytest.mark.parametrize("name,config", CASES,
                         ids=[f"{n}-" + (",".join(f"{k}={v}" for k, v in c.items()) or "defaults") for n, c in CASES])
def test_matches_the_published_class_step_by_step(name, config):
    theirs_cls = published(name)
    ours_p, theirs_p = make_params(1), make_params(1)
    ours = getattr(ot, name)(ours_p, **config)
    theirs = theirs_cls(theirs_p, **config)
    for step in range(STEPS):
        for p, q, g in zip(ours_p, theirs_p, gradients(step)):
            p.grad, q.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
        for i, (p, q) in enumerate(zip(ours_p, theirs_p)):
            close(p, q, f"step {step + 1}, param {i}")
            for s in OPTIMIZERS[name][3]:
                close(ours.state[p][s].flatten(), theirs.state[q][s].flatten(), f"step {step + 1}, {s} of param {i}")
        d = d_of(ours, ours_p[0])
        assert d == pytest.approx(theirs.param_groups[0]["d"], rel=RTOL), f"D after step {step + 1}"


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_param_groups_share_one_d_as_the_published_class(name):
    """Two groups of their own weight decay and eps: one D from sums over both, step by step."""
    theirs_cls = published(name)
    ours_p, theirs_p = make_params(2), make_params(2)
    h0, h1 = dict(weight_decay=0.1), dict(eps=1e-4)
    ours = getattr(ot, name)([dict(params=ours_p[:2], **h0), dict(params=ours_p[2:], **h1)])
    theirs = theirs_cls([dict(params=theirs_p[:2], **h0), dict(params=theirs_p[2:], **h1)])
    for step in range(STEPS):
        for p, q, g in zip(ours_p, theirs_p, gradients(step)):
            p.grad, q.grad = g.clone(), g.clone()
        ours.step()
        theirs.step()
        for i, (p, q) in enumerate(zip(ours_p, theirs_p)):
            close(p, q, f"step {step + 1}, param {i}")
        for group, p in enumerate((ours_p[0], ours_p[2])):
            assert d_of(ours, p) == pytest.approx(theirs.param_groups[group]["d"], rel=RTOL), \
                f"D of group {group} after step {step + 1}"


def step_with_late_gradients(ours, theirs, ours_p, theirs_p):
    """Six steps of both, the parameters after the first two without gradients for the first two
    steps; the parameters and D compared after each."""
    for step in range(6):
        for i, (p, q, g) in enumerate(zip(ours_p, theirs_p, gradients(step))):
            p.grad, q.grad = (g.clone(), g.clone()) if i < 2 or step >= 2 else (None, None)
        ours.step()
        theirs.step()
        for i, (p, q) in enumerate(zip(ours_p, theirs_p)):
            close(p, q, f"step {step + 1}, param {i}")
        assert d_of(ours, ours_p[0]) == pytest.approx(theirs.param_groups[0]["d"], rel=RTOL), f"D after step {step + 1}"


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_a_group_whose_gradients_start_later_keeps_the_shared_d(name):
    """Group 1 has no gradients for two steps (frozen), then joins: D goes on from where the first
    group took it, as the published class's, rather than starting again from d0."""
    theirs_cls = published(name)
    ours_p, theirs_p = make_params(5), make_params(5)
    ours = getattr(ot, name)([dict(params=ours_p[:2]), dict(params=ours_p[2:])])
    theirs = theirs_cls([dict(params=theirs_p[:2]), dict(params=theirs_p[2:])])
    step_with_late_gradients(ours, theirs, ours_p, theirs_p)


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_parameters_of_one_group_whose_gradients_start_later_share_the_d(name):
    """In one param group, two parameters have no gradients for two steps, then join: optgen steps
    them as a group of their own step count (its sums over every group still cover them), as the
    published class steps them with the rest (its bias correction off, the default, the step count
    changes nothing). It used to refuse them, taking D's sums for a group's."""
    theirs_cls = published(name)
    ours_p, theirs_p = make_params(6), make_params(6)
    ours = getattr(ot, name)(ours_p, weight_decay=0.1)
    theirs = theirs_cls(theirs_p, weight_decay=0.1)
    step_with_late_gradients(ours, theirs, ours_p, theirs_p)
    assert d_of(ours, ours_p[3]) == d_of(ours, ours_p[0])


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_late_parameters_with_bias_correction_are_refused_in_the_groups_terms(name):
    """With use_bias_correction, late parameters would read a step count of their own where the
    published class reads the group's: refused, naming the torch group, rather than a silent
    difference; so are parameters of two dtypes, which D's sums cannot span."""
    params = make_params(7)
    opt = getattr(ot, name)(params, use_bias_correction=True)
    for step in range(3):
        for i, (p, g) in enumerate(zip(params, gradients(step))):
            p.grad = g if i < 2 or step >= 2 else None
        if step < 2:
            opt.step()
    with pytest.raises(ValueError, match=r"param group 0: its parameters reached their first gradient at different "
                                         r"steps \(step counts \[0, 2\]\)"):
        opt.step()
    mixed = make_params(8)
    mixed[1].data = mixed[1].data.to(torch.bfloat16)
    opt = getattr(ot, name)(mixed)
    for p, g in zip(mixed, gradients(0)):
        p.grad = g.to(p.dtype)
    with pytest.raises(ValueError, match=r"param group 0: its parameters are of 2 dtypes"):
        opt.step()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_groups_must_agree_on_what_d_reads(name):
    params = make_params(4)
    opt = getattr(ot, name)([dict(params=params[:2]), dict(params=params[2:], d0=1e-4)])
    for p, g in zip(params, gradients(0)):
        p.grad = g
    with pytest.raises(Exception, match="hyperparameter 'd0' is 0.0001 in param group 1"):
        opt.step()


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_state_dict_round_trip_resumes_the_same_steps(name):
    params, copies = make_params(3), make_params(3)
    opt = getattr(ot, name)(params, weight_decay=0.05)
    for step in range(4):
        for p, g in zip(params, gradients(step)):
            p.grad = g
        opt.step()
    saved = copy.deepcopy(opt.state_dict())  # the live states otherwise, which opt keeps stepping
    for p, q in zip(params, copies):
        q.data.copy_(p.data)
    resumed = getattr(ot, name)(copies, weight_decay=0.05)
    resumed.load_state_dict(saved)
    for step in range(4, 8):
        for p, q, g in zip(params, copies, gradients(step)):
            p.grad, q.grad = g.clone(), g.clone()
        opt.step()
        resumed.step()
    for i, (p, q) in enumerate(zip(params, copies)):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=lambda m: f"param {i}: {m}")
    assert d_of(opt, params[0]) == d_of(resumed, copies[0])


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("direction", ["published_to_optgen", "optgen_to_published"])
def test_checkpoints_move_between_optgen_and_the_published_class(name, direction):
    """A checkpoint of either side, taken after 4 steps, loads into the other, and both then take
    the same 4 steps: D, d's companions and the parameters as the published class steps them."""
    theirs_cls = published(name)
    config = dict(weight_decay=0.05, use_bias_correction=True)
    source_p, target_p = make_params(5), make_params(5)
    make = {"optgen": lambda ps: getattr(ot, name)(ps, **config), "published": lambda ps: theirs_cls(ps, **config)}
    source_kind, target_kind = direction.split("_to_")
    source = make[source_kind](source_p)
    for step in range(4):
        for p, g in zip(source_p, gradients(step)):
            p.grad = g
        source.step()
    saved = copy.deepcopy(source.state_dict())
    for p, q in zip(source_p, target_p):
        q.data.copy_(p.data)
    target = make[target_kind](target_p)
    target.load_state_dict(saved)
    for step in range(4, 8):
        for p, q, g in zip(source_p, target_p, gradients(step)):
            p.grad, q.grad = g.clone(), g.clone()
        source.step()
        target.step()
    for i, (p, q) in enumerate(zip(source_p, target_p)):
        close(q, p, f"param {i}")
    ours, ours_p, theirs = (target, target_p, source) if target_kind == "optgen" else (source, source_p, target)
    assert d_of(ours, ours_p[0]) == pytest.approx(theirs.param_groups[0]["d"], rel=RTOL)
    assert theirs.param_groups[0]["k"] == 8


def test_prodigy_takes_beta3_none_and_refuses_what_it_cannot_do():
    params = make_params(4)
    assert ot.Prodigy(params, beta3=None).param_groups[0]["beta3"] is None
    with pytest.raises(ValueError, match="beta3"):
        ot.Prodigy(params, beta3=1.5)
    with pytest.raises(ValueError, match="slice_p"):
        ot.Prodigy(params, slice_p=11)
    with pytest.raises(TypeError, match="fsdp_in_use"):
        ot.DAdaptAdam(params, fsdp_in_use="yes")
    # DTensor params are summed over the ranks whatever it says; it is kept for state_dict().
    assert ot.DAdaptAdam(params, fsdp_in_use=True).state_dict()["param_groups"][0]["fsdp_in_use"] is True
    with pytest.raises(ValueError, match="d0"):
        ot.Prodigy(params, d0=0.0)
