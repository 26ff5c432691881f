"""optgen.torch on a GPU against torch.optim: every built-in torch has, param groups, lr schedulers,
GradScaler, CUDA-graph capture, state_dict round trips both ways, skipped parameters, bf16."""

import copy
import pathlib
import weakref

import pytest

torch = pytest.importorskip("torch")
import optgen  # noqa: E402
import optgen.torch as ot  # noqa: E402
import cuda_tensors  # noqa: E402
from cuda_tensors import gradients  # noqa: E402
from optgen._hyperparameters import spec_values  # noqa: E402

pytestmark = pytest.mark.gpu
REPO = pathlib.Path(__file__).resolve().parents[2]
SHAPES = [(33, 17), (5,), (1000,), (4, 3, 3, 3)]

# name, hyperparameters of group 0, of group 1 (the rest: defaults); branches every spec has.
CONFIGS = [
    ("Adam", dict(lr=1e-2, weight_decay=0.1), dict(lr=3e-3, amsgrad=True)),
    ("Adam", dict(lr=1e-2, amsgrad=True, maximize=True), dict(lr=3e-3, amsgrad=True)),
    ("AdamW", dict(lr=1e-2), dict(lr=3e-3, weight_decay=0.5, betas=(0.8, 0.9))),
    ("AdamW", dict(lr=1e-2, amsgrad=True), dict(lr=3e-3, amsgrad=True, maximize=True)),
    ("Adadelta", dict(lr=0.5, weight_decay=0.1), dict(rho=0.5)),
    # (torch's Adagrad starts every group's sum at the constructor's initial_accumulator_value,
    # whatever the group says; optgen at the group's: test_adagrad_initial_accumulator_value)
    ("Adagrad", dict(lr=0.1, lr_decay=0.01), dict(weight_decay=0.1)),
    ("Adamax", dict(lr=1e-2, weight_decay=0.1), dict(betas=(0.5, 0.9))),
    ("ASGD", dict(lr=1e-2, t0=3, weight_decay=0.1), dict(lambd=1e-3, alpha=0.5)),
    ("NAdam", dict(lr=1e-2, weight_decay=0.1), dict(decoupled_weight_decay=True, weight_decay=0.1)),
    ("RAdam", dict(lr=1e-2, weight_decay=0.1), dict(decoupled_weight_decay=True, weight_decay=0.1)),
    ("RMSprop", dict(lr=1e-2, momentum=0.9, centered=True), dict(weight_decay=0.1)),
    ("Rprop", dict(lr=1e-2), dict(etas=(0.3, 1.5), step_sizes=(1e-4, 1.0), maximize=True)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True), dict(lr=0.05, weight_decay=0.1, dampening=0.1,
                                                             momentum=0.5)),
    ("SGD", dict(lr=0.1), dict(lr=0.05, weight_decay=0.1)),
]
STEPS = 8  # past RAdam's switch to its rectified update and ASGD's t0


def make_params(seed, dtype=torch.float32):
    return cuda_tensors.make_params(SHAPES, seed, dtype)


def groups(params, h0, h1):
    return [dict(params=params[:2], **h0), dict(params=params[2:], **h1)]


def run(optimizer, params, steps, first_step=0, schedule=True):
    """`steps` steps with fresh gradients each, a LambdaLR schedule, lr changed by hand once."""
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.9 ** s) if schedule else None
    for step in range(first_step, first_step + steps):
        for p, g in zip(params, gradients(params, step)):
            p.grad = g  # a new tensor every step, as after zero_grad(set_to_none=True)
        optimizer.step()
        if scheduler:
            scheduler.step()
        if step == first_step + 2:
            optimizer.param_groups[-1]["lr"] *= 0.5
    torch.cuda.synchronize()


def assert_params_close(ours, theirs, rtol=1e-5, atol=1e-6):
    for i, (a, b) in enumerate(zip(ours, theirs)):
        torch.testing.assert_close(a.float(), b.float(), rtol=rtol, atol=atol, msg=lambda m: f"param {i}: {m}")


@pytest.mark.parametrize("name,h0,h1", CONFIGS, ids=[f"{c[0]}-{i}" for i, c in enumerate(CONFIGS)])
def test_matches_torch_optim_with_groups_and_a_schedule(name, h0, h1):
    ours_p, theirs_p = make_params(1), make_params(1)
    ours = getattr(ot, name)(groups(ours_p, h0, h1))
    theirs = getattr(torch.optim, name)(groups(theirs_p, h0, h1), foreach=False)
    run(ours, ours_p, STEPS)
    run(theirs, theirs_p, STEPS)
    assert_params_close(ours_p, theirs_p)
    ours_state, theirs_state = ours.state_dict()["state"], theirs.state_dict()["state"]
    assert theirs_state.keys() <= ours_state.keys()  # torch's SGD without momentum keeps no state
    for index, state in theirs_state.items():
        for key, value in state.items():
            torch.testing.assert_close(ours_state[index][key].to(value.device, value.dtype), value,
                                       rtol=1e-5, atol=1e-6, msg=lambda m: f"state {index} {key}: {m}")
    # every group and tensor in one launch per variant (groups that differ in amsgrad do)
    variants = {tuple(ours.engine.states_used(spec_values(g, [h.name for h in ours.engine.hyperparameters
                                                              if not h.derived])))
                for g in ours.param_groups}
    assert ours.engine.launches_last_step() == len(variants)


def test_adagrad_initial_accumulator_value():
    ours_p, theirs_p = make_params(9), make_params(9)
    ours = ot.Adagrad(ours_p, lr=0.1, initial_accumulator_value=0.1)
    theirs = torch.optim.Adagrad(theirs_p, lr=0.1, initial_accumulator_value=0.1, foreach=False)
    run(ours, ours_p, 4)
    run(theirs, theirs_p, 4)
    assert_params_close(ours_p, theirs_p)


def test_grad_scaler_fused_path_matches_torch_fused_adamw_and_skips_inf_steps():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
    twin = copy.deepcopy(model)
    data = [(torch.randn(32, 64, device="cuda"), torch.randint(0, 10, (32,), device="cuda")) for _ in range(6)]

    def train(m, optimizer):
        scaler = torch.amp.GradScaler("cuda", init_scale=2.0 ** 10)
        for step, (x, y) in enumerate(data):
            optimizer.zero_grad()
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            scaler.scale(loss).backward()
            if step == 2:
                m[0].weight.grad[0, 0] = float("inf")  # this step is skipped, the scale halves
            scaler.step(optimizer)
            scaler.update()
        torch.cuda.synchronize()
        return scaler.get_scale()

    ours = ot.AdamW(model.parameters(), lr=1e-2)
    theirs = torch.optim.AdamW(twin.parameters(), lr=1e-2, fused=True)
    assert train(model, ours) == train(twin, theirs)
    # The two updates differ in the last bit now and then (another order of operations); the fp16
    # forward passes of the next steps amplify that, so the end-to-end tolerance is wider than the
    # kernels' (tests/torch_amp_test.cpp: within 1e-7 of torch's fused trajectories).
    assert_params_close(list(model.parameters()), list(twin.parameters()), rtol=1e-3, atol=1e-4)
    assert ours.state_dict()["state"][0]["step"].item() == 5  # 6 steps, one skipped


def test_a_captured_step_replays_with_a_schedule_as_eager_steps_do():
    """torch's whole-network capture recipe: warm-up on a side stream, zero_grad(set_to_none=True),
    then capture forward, backward and step; lr changed by a scheduler between replays."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).cuda()
    eager_model = copy.deepcopy(model)
    xs = [torch.randn(16, 32, device="cuda") for _ in range(8)]

    def train_eager():
        opt = ot.AdamW(eager_model.parameters(), lr=1e-2)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
        for x in xs:
            opt.zero_grad(set_to_none=True)
            eager_model(x).square().mean().backward()
            opt.step()
            sched.step()

    opt = ot.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    static_x = xs[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # one warm-up step, which the eager run takes too
        opt.zero_grad(set_to_none=True)
        model(static_x).square().mean().backward()
        opt.step()
        sched.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        model(static_x).square().mean().backward()
        opt.step()
    for x in xs[1:]:
        static_x.copy_(x)
        graph.replay()
        sched.step()
    train_eager()
    torch.cuda.synchronize()
    for a, b in zip(model.parameters(), eager_model.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", ["AdamW", "NAdam", "ASGD", "SGD"])
def test_state_dict_from_torch_loads_into_optgen_and_back(name):
    h = dict(lr=1e-2, momentum=0.9) if name == "SGD" else dict(lr=1e-2)
    reference_p = make_params(2)
    reference = getattr(torch.optim, name)(reference_p, foreach=False, **h)
    run(reference, reference_p, 3, schedule=False)
    # torch -> optgen: continue where torch stopped
    ours_p = [torch.nn.Parameter(p.detach().clone()) for p in reference_p]
    ours = getattr(ot, name)(ours_p, **h)
    ours.load_state_dict(copy.deepcopy(reference.state_dict()))
    run(ours, ours_p, 3, first_step=3, schedule=False)
    # optgen -> torch
    back_p = [torch.nn.Parameter(p.detach().clone()) for p in ours_p]
    back = getattr(torch.optim, name)(back_p, foreach=False, **h)
    back.load_state_dict(copy.deepcopy(ours.state_dict()))
    run(back, back_p, 2, first_step=6, schedule=False)
    run(reference, reference_p, 5, first_step=3, schedule=False)
    assert_params_close(back_p, reference_p)


def test_an_optgen_checkpoint_resumes_bit_identically():
    straight_p, resumed_p = make_params(3), make_params(3)
    straight = ot.NAdam(straight_p, lr=1e-2)
    run(straight, straight_p, 6, schedule=False)
    first = ot.NAdam(resumed_p, lr=1e-2)
    run(first, resumed_p, 3, schedule=False)
    saved = copy.deepcopy(first.state_dict())
    resumed = ot.NAdam(resumed_p, lr=1e-2)
    resumed.load_state_dict(saved)
    run(resumed, resumed_p, 3, first_step=3, schedule=False)
    for a, b in zip(straight_p, resumed_p):
        assert torch.equal(a, b)


def test_a_checkpoint_loaded_into_an_optimizer_that_stepped_resumes_from_the_checkpoint():
    """Its step counts and Prodigy's d are the checkpoint's, not those of the steps taken before
    the load (which the next step's rebuild once pulled over them from the engine)."""
    straight_p, resumed_p = make_params(5), make_params(5)
    straight = ot.Prodigy(straight_p, weight_decay=0.01)
    run(straight, straight_p, 6, schedule=False)
    first = ot.Prodigy(resumed_p, weight_decay=0.01)
    run(first, resumed_p, 3, schedule=False)
    saved, saved_p = copy.deepcopy(first.state_dict()), [p.detach().clone() for p in resumed_p]
    run(first, resumed_p, 2, first_step=3, schedule=False)  # steps the checkpoint does not know
    first.load_state_dict(saved)
    with torch.no_grad():
        for p, q in zip(resumed_p, saved_p):
            p.copy_(q)
    run(first, resumed_p, 3, first_step=3, schedule=False)
    assert [int(v["step"]) for v in first.state_dict()["state"].values()] == [6] * len(resumed_p)
    for a, b in zip(straight_p, resumed_p):
        assert torch.equal(a, b)


def test_a_parameter_without_a_gradient_is_skipped_and_keeps_its_own_step_count():
    ours_p, theirs_p = make_params(4), make_params(4)
    ours = ot.Adam(ours_p, lr=1e-2, weight_decay=0.1)
    theirs = torch.optim.Adam(theirs_p, lr=1e-2, weight_decay=0.1, foreach=False)
    for step in range(6):
        for params in (ours_p, theirs_p):
            for i, (p, g) in enumerate(zip(params, gradients(params, step))):
                p.grad = None if (i == 1 and step < 3) or (i == 2 and step == 4) else g
        ours.step()
        theirs.step()
    assert_params_close(ours_p, theirs_p)
    state = ours.state_dict()["state"]
    assert [state[i]["step"].item() for i in range(4)] == [6, 3, 5, 6]


def test_bf16_params_with_bf16_states_match_torch():
    ours_p, theirs_p = make_params(5, torch.bfloat16), make_params(5, torch.bfloat16)
    ours = ot.AdamW(ours_p, lr=1e-2, state_dtype=torch.bfloat16)
    theirs = torch.optim.AdamW(theirs_p, lr=1e-2, fused=True)  # fp32 math on bf16 loads and stores, as ours
    run(ours, ours_p, 4, schedule=False)
    run(theirs, theirs_p, 4, schedule=False)
    assert all(p.dtype == torch.bfloat16 for p in ours_p)
    assert_params_close(ours_p, theirs_p, rtol=1.6e-2, atol=1e-2)


def test_mixed_dtypes_in_one_group_and_f32_states_for_bf16_params():
    ours_p = make_params(6)
    ours_p[1] = torch.nn.Parameter(ours_p[1].detach().to(torch.bfloat16))
    ours = ot.Adam(ours_p, lr=1e-2)
    run(ours, ours_p, 3, schedule=False)
    assert ours.state[ours_p[1]]["exp_avg"].dtype == torch.float32
    assert ours.engine.launches_last_step() == 2  # one kernel per dtype


def test_static_grads_zeroes_in_place_and_steps_as_the_default_does():
    results = []
    for static in (False, True):
        torch.manual_seed(0)
        model = torch.nn.Linear(16, 4).cuda()
        opt = ot.AdamW(model.parameters(), lr=1e-2, static_grads=static)
        grads = []
        for _ in range(4):
            opt.zero_grad()
            model(torch.ones(2, 16, device="cuda")).sum().backward()
            opt.step()
            grads.append(model.weight.grad)
        if static:
            assert all(g is grads[0] for g in grads)  # zeroed in place, never reallocated
        results.append([p.detach().clone() for p in model.parameters()])
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_bad_gradients_are_errors():
    p = torch.nn.Parameter(torch.zeros(4, 4, device="cuda"))
    opt = ot.SGD([p], lr=0.1)
    p.grad = torch.zeros(4, 4, device="cuda").t()  # another layout than the param's
    with pytest.raises(RuntimeError, match="a gradient does not match its parameter"):
        opt.step()
    p.grad = torch.ones(4, 4, device="cuda").to_sparse()  # at the first step too
    with pytest.raises(RuntimeError, match="do not support sparse gradients"):
        opt.step()
    with pytest.raises(ValueError, match="float32, bfloat16 and float16"):
        ot.SGD([torch.nn.Parameter(torch.zeros(2, device="cuda", dtype=torch.float64))])


def test_a_new_gradient_is_checked_also_where_the_old_one_was():
    p = torch.nn.Parameter(torch.zeros(4, 4, device="cuda"))
    opt = ot.SGD([p], lr=0.1)
    p.grad = torch.ones(4, 4, device="cuda")
    opt.step()
    p.grad = p.grad.t()  # the same memory, another layout
    with pytest.raises(RuntimeError, match="a gradient does not match its parameter"):
        opt.step()
    p.grad = torch.ones(4, 4, device="cuda").to_sparse()
    with pytest.raises(RuntimeError, match="do not support sparse gradients"):
        opt.step()


def test_new_gradients_in_new_memory_or_in_the_old_are_followed():
    ours_p, theirs_p = make_params(9), make_params(9)
    ours, theirs = ot.AdamW(ours_p, lr=1e-2), torch.optim.AdamW(theirs_p, lr=1e-2)
    kept = []
    for step in range(6):
        for params in (ours_p, theirs_p):
            if step % 2:
                kept.append([p.grad for p in params])  # the old gradients live on: the new ones move
            for p, g in zip(params, gradients(params, step)):
                p.grad = g
        ours.step()
        theirs.step()
    assert_params_close(ours_p, theirs_p)


def test_a_spec_loaded_at_run_time_steps_as_the_builtin():
    ours_p, builtin_p = make_params(7), make_params(7)
    ours = ot.Optimizer.from_spec(REPO / "specs" / "adamw.yaml", groups(ours_p, dict(lr=1e-2), dict(amsgrad=True)),
                                  betas=(0.8, 0.9))
    builtin = ot.AdamW(groups(builtin_p, dict(lr=1e-2), dict(amsgrad=True)), betas=(0.8, 0.9))
    run(ours, ours_p, STEPS)
    run(builtin, builtin_p, STEPS)
    for a, b in zip(ours_p, builtin_p):
        assert torch.equal(a, b)
    assert (ours.engine.name, ours.engine.spec) == ("AdamW", "adamw")


def adabelief_reference(params, grads, state, step, lr, beta1=0.9, beta2=0.999, eps=1e-16, weight_decay=0.0):
    """adabelief_pytorch.AdaBelief.step (0.2.0) with weight_decouple=True, fixed_decay=False,
    rectify=False, amsgrad=False: the configuration examples/adabelief.yaml expresses, in f64."""
    for p, g in zip(params, grads):
        m, v = state.setdefault(p, (torch.zeros_like(p), torch.zeros_like(p)))
        p.mul_(1 - lr * weight_decay)
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g - m, g - m, value=1 - beta2).add_(eps)
        denom = (v.sqrt() / (1 - beta2 ** step) ** 0.5).add_(eps)
        p.addcdiv_(m, denom, value=-lr / (1 - beta1 ** step))


def test_a_users_spec_at_run_time_matches_its_published_implementation():
    params = make_params(8)
    expected = [p.detach().double() for p in params]
    opt = ot.Optimizer.from_spec(REPO / "examples" / "adabelief.yaml", params, lr=1e-2, weight_decay=0.1,
                                 eps=1e-8)
    state = {}
    for step in range(STEPS):
        grads = gradients(params, step)
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
        adabelief_reference(expected, [g.double() for g in grads], state, step + 1, lr=1e-2, weight_decay=0.1,
                            eps=1e-8)
    assert opt.engine.name == "AdaBelief"
    assert_params_close(params, [e.float() for e in expected])
    assert_params_close([opt.state[p]["exp_avg_var"] for p in params], [state[e][1].float() for e in expected])


def test_gradients_are_freed_by_zero_grad_and_a_step_without_them_changes_nothing():
    model = torch.nn.Linear(16, 4).cuda()
    opt = ot.AdamW(model.parameters(), lr=1e-2)
    model(torch.ones(2, 16, device="cuda")).sum().backward()
    opt.step()
    freed = weakref.ref(model.weight.grad)
    opt.zero_grad()  # set_to_none=True: the optimizer must not keep the gradient alive
    assert freed() is None
    before = [p.detach().clone() for p in model.parameters()]
    opt.step()  # no gradients: every param is skipped, as torch skips them
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


@pytest.mark.parametrize("name", ["AdamW", "SGD", "LAMB"])
def test_max_grad_norm_clips_each_group_as_clip_grad_norm_then_the_step(name):
    """max_grad_norm, any optimizer: torch's clip_grad_norm_ over each param group, then the step;
    grad_norm() is the norm clip_grad_norm_ returned, and the gradients are left unchanged."""
    ours_p, theirs_p = make_params(5), make_params(5)
    h0, h1 = dict(lr=1e-2, max_grad_norm=1.0), dict(lr=3e-3, max_grad_norm=50.0)  # group 1 stays unclipped
    ours = getattr(ot, name)(groups(ours_p, h0, h1))
    if name == "LAMB":  # torch has no LAMB: optgen's unclipped LAMB on gradients torch clipped
        theirs = ot.LAMB(groups(theirs_p, dict(lr=1e-2), dict(lr=3e-3)))
    else:
        theirs = getattr(torch.optim, name)(groups(theirs_p, dict(lr=1e-2), dict(lr=3e-3)), foreach=False)
    for step in range(5):
        grads = gradients(ours_p, step)
        for p, q, g in zip(ours_p, theirs_p, grads):
            p.grad, q.grad = g.clone(), g.clone()
        ours.step()
        norms = [torch.nn.utils.clip_grad_norm_(g["params"], m) for g, m in zip(theirs.param_groups, (1.0, 50.0))]
        theirs.step()
        for p, g in zip(ours_p, grads):
            assert torch.equal(p.grad, g)  # never written
        for group, norm in enumerate(norms):
            torch.testing.assert_close(ours.grad_norm(group), norm, rtol=1e-6, atol=0)
        assert_params_close(ours_p, theirs_p)


def test_max_grad_norm_is_an_option_of_every_optimizer_and_checked():
    params = make_params(6)
    with pytest.raises(ValueError, match="max_grad_norm"):
        ot.Adam(params, max_grad_norm=-1.0)
    with pytest.raises(TypeError, match="twice"):
        ot.Optimizer(params, lambda storage: optgen.Engine.builtin("adam", storage=storage), dict(max_grad_norm=1.0),
                     max_grad_norm=2.0)
    unclipped = ot.Adam(params)
    for p, g in zip(params, gradients(params, 0)):
        p.grad = g
    unclipped.step()
    with pytest.raises(optgen.OptgenError, match="does not clip"):
        unclipped.grad_norm(0)
    with pytest.raises(IndexError):
        unclipped.grad_norm(1)


def test_a_clipping_group_of_mixed_dtypes_is_refused_with_the_reason():
    params = make_params(7)
    mixed = [params[0], torch.nn.Parameter(params[1].detach().to(torch.bfloat16))]
    opt = ot.AdamW(mixed, max_grad_norm=1.0)
    for p in mixed:
        p.grad = torch.ones_like(p)
    with pytest.raises(ValueError, match="2 groups of one dtype"):
        opt.step()
    ot.AdamW(mixed).step()  # without clipping, one group may mix them
