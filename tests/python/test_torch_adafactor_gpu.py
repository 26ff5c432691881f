"""optgen.torch.Adafactor on a GPU against torch.optim.Adafactor (torch 2.11): trajectories on 1-D
to 4-D parameters (conv weights included) with both of torch's implementations, weight decay,
maximize, an lr schedule and two param groups; torch's state layout (row_var, col_var, variance)
and state_dict round trips both ways; eps=(None, ...) resolved per dtype; a captured step."""

import copy

import pytest

torch = pytest.importorskip("torch")
import optgen.torch as ot  # noqa: E402
import cuda_tensors  # noqa: E402
from cuda_tensors import gradients  # noqa: E402

pytestmark = pytest.mark.gpu

# Vectors (variance), matrices, and batches of matrices (row_var and col_var over the last two
# dimensions): conv weights (8, 4, 3, 3) and 1x1 convs (16, 8, 1, 1), a single row, a single column.
SHAPES = [(5,), (1000,), (33, 17), (4, 3, 5), (8, 4, 3, 3), (16, 8, 1, 1), (1, 9), (7, 1)]
STEPS = 8

# group 0's and group 1's hyperparameters (the rest: torch's defaults). lr 0.5 makes rho_t
# = min(lr, 1/sqrt(step)) change with the step; lr 1e-2 (the default) keeps it at lr.
CONFIGS = [
    (dict(), dict(lr=0.5)),
    (dict(lr=0.5, weight_decay=0.1), dict(weight_decay=0.5, d=2.0)),
    (dict(maximize=True, beta2_decay=-0.5), dict(lr=0.3, maximize=True, eps=(1e-30, 1e-2))),
    (dict(eps=(1e-3, 1e-3), weight_decay=0.01), dict(lr=0.2, beta2_decay=-0.99)),
]


def make_params(seed, dtype=torch.float32, shapes=SHAPES):
    return cuda_tensors.make_params(shapes, seed, dtype)


def groups(params, h0, h1):
    return [dict(params=params[::2], **h0), dict(params=params[1::2], **h1)]  # every shape kind in both


def run(optimizer, params, steps, first_step=0, schedule=True, scale=1.0):
    """`steps` steps with new gradients each (times `scale`); with `schedule`, a LambdaLR schedule
    and the last group's lr halved by hand once (both reach optgen's engine as group assignments)."""
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.9 ** s) if schedule else None
    for step in range(first_step, first_step + steps):
        for p, g in zip(params, gradients(params, step, scale=scale)):
            p.grad = g
        optimizer.step()
        if scheduler:
            scheduler.step()
        if schedule and step == first_step + 2:
            optimizer.param_groups[-1]["lr"] *= 0.5
    torch.cuda.synchronize()


def assert_close(ours, theirs, what, rtol=1e-5, atol=1e-6):
    for i, (a, b) in enumerate(zip(ours, theirs)):
        torch.testing.assert_close(a.float(), b.float(), rtol=rtol, atol=atol, msg=lambda m: f"{what} {i}: {m}")


def assert_torchs_state_layout(ours, theirs):
    """The same states, with torch's names, shapes and step counts (optgen's in float32)."""
    ours_state, theirs_state = ours.state_dict()["state"], theirs.state_dict()["state"]
    assert ours_state.keys() == theirs_state.keys()
    for index, state in theirs_state.items():
        assert ours_state[index].keys() == state.keys(), f"param {index}"
        for key, value in state.items():
            mine = ours_state[index][key]
            assert mine.shape == value.shape, f"param {index} {key}: {tuple(mine.shape)}, torch {tuple(value.shape)}"
            if key == "step":
                assert mine.dtype == value.dtype and mine.item() == value.item()
            else:
                torch.testing.assert_close(mine.to(value.device, value.dtype), value, rtol=1e-5, atol=1e-6,
                                           msg=lambda m: f"param {index} {key}: {m}")


@pytest.mark.parametrize("foreach", [False, True], ids=["forloop", "foreach"])
@pytest.mark.parametrize("h0,h1", CONFIGS, ids=[f"config{i}" for i in range(len(CONFIGS))])
def test_matches_torch_adafactor_with_groups_and_a_schedule(h0, h1, foreach):
    ours_p, theirs_p = make_params(1), make_params(1)
    ours = ot.Adafactor(groups(ours_p, h0, h1))
    theirs = torch.optim.Adafactor(groups(theirs_p, h0, h1), foreach=foreach)
    run(ours, ours_p, STEPS)
    run(theirs, theirs_p, STEPS)
    assert_close(ours_p, theirs_p, "param")
    assert_torchs_state_layout(ours, theirs)


def test_states_have_torchs_shapes_and_exist_only_where_torch_has_them():
    params = make_params(2)
    opt = ot.Adafactor(params)
    run(opt, params, 1, schedule=False)
    opt.state_dict()  # pulls the step counts, which the engine keeps, into opt.state
    for p in params:
        state = opt.state[p]
        if p.dim() >= 2:
            assert set(state) == {"step", "row_var", "col_var"}
            assert state["row_var"].shape == p.shape[:-1] + (1,)
            assert state["col_var"].shape == p.shape[:-2] + (1, p.shape[-1])
        else:
            assert set(state) == {"step", "variance"}
            assert state["variance"].shape == p.shape
        assert state["step"].item() == 1.0 and state["step"].dtype == torch.float32


def test_a_state_dict_of_torchs_adafactor_loads_into_optgen_and_back():
    h = dict(lr=0.5, weight_decay=0.1)
    reference_p = make_params(3)
    reference = torch.optim.Adafactor(reference_p, **h)
    run(reference, reference_p, 3, schedule=False)
    # torch -> optgen: go on where torch stopped
    ours_p = [torch.nn.Parameter(p.detach().clone()) for p in reference_p]
    ours = ot.Adafactor(ours_p, **h)
    ours.load_state_dict(copy.deepcopy(reference.state_dict()))
    run(ours, ours_p, 3, first_step=3, schedule=False)
    # optgen -> torch
    back_p = [torch.nn.Parameter(p.detach().clone()) for p in ours_p]
    back = torch.optim.Adafactor(back_p, **h)
    back.load_state_dict(copy.deepcopy(ours.state_dict()))
    run(back, back_p, 2, first_step=6, schedule=False)
    run(reference, reference_p, 5, first_step=3, schedule=False)
    assert_close(back_p, reference_p, "param")
    assert_torchs_state_layout(back, reference)
    assert [s["step"].item() for s in back.state_dict()["state"].values()] == [8.0] * len(SHAPES)


def test_an_optgen_adafactor_checkpoint_resumes_bit_identically():
    straight_p, resumed_p = make_params(4), make_params(4)
    straight = ot.Adafactor(straight_p, lr=0.5)
    run(straight, straight_p, 6, schedule=False)
    first = ot.Adafactor(resumed_p, lr=0.5)
    run(first, resumed_p, 3, schedule=False)
    resumed = ot.Adafactor(resumed_p, lr=0.5)
    resumed.load_state_dict(copy.deepcopy(first.state_dict()))
    run(resumed, resumed_p, 3, first_step=3, schedule=False)
    for a, b in zip(straight_p, resumed_p):
        assert torch.equal(a, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_eps_none_is_the_machine_epsilon_of_the_dtype_as_torch_resolves_it(dtype):
    params = make_params(5, dtype)
    opt = ot.Adafactor(params)
    run(opt, params, 1, schedule=False)
    # (the finfo epsilons are powers of two, exact in any precision the engine keeps them in)
    assert opt.engine.get("eps1", 0) == torch.finfo(dtype).eps
    assert opt.engine.get("eps2", 0) == pytest.approx(1e-3, rel=1e-6)
    opt.param_groups[0]["eps"] = (None, 1e-2)  # set later: still resolved
    assert opt.engine.get("eps1", 0) == torch.finfo(dtype).eps
    assert opt.engine.get("eps2", 0) == pytest.approx(1e-2, rel=1e-6)
    opt.param_groups[0]["eps"] = (1e-30, 1e-2)
    assert opt.engine.get("eps1", 0) == pytest.approx(1e-30, rel=1e-6)


def test_a_group_of_mixed_dtypes_takes_its_first_parameters_eps_as_torch_does():
    params = make_params(6)
    params[0] = torch.nn.Parameter(params[0].detach().to(torch.bfloat16))
    opt = ot.Adafactor(params)
    run(opt, params, 1, schedule=False)
    assert opt.engine.num_groups() == 2  # one engine group per dtype
    assert [opt.engine.get("eps1", g) for g in range(2)] == [torch.finfo(torch.bfloat16).eps] * 2


def test_bf16_parameters_follow_torch():
    """torch computes in bf16 with bf16 states, optgen in float32 with float32 states: the two
    round differently, so the tolerance is a few bf16 ulps. Gradients of 1e-3 keep the variance
    under eps1 ** 2 for bf16 (eps1 = 2 ** -7), so the update depends on eps1 being bf16's."""
    shapes = [(64,), (48, 40), (4, 8, 3, 3)]
    ours_p, theirs_p = make_params(7, torch.bfloat16, shapes), make_params(7, torch.bfloat16, shapes)
    ours = ot.Adafactor(ours_p, lr=0.5)
    theirs = torch.optim.Adafactor(theirs_p, lr=0.5)
    run(ours, ours_p, 4, schedule=False, scale=1e-3)
    run(theirs, theirs_p, 4, schedule=False, scale=1e-3)
    assert all(p.dtype == torch.bfloat16 for p in ours_p)
    assert_close(ours_p, theirs_p, "param", rtol=2e-2, atol=2e-2)


def test_a_parameter_without_a_gradient_is_skipped_and_keeps_its_own_step_count():
    ours_p, theirs_p = make_params(8), make_params(8)
    ours, theirs = ot.Adafactor(ours_p, lr=0.5), torch.optim.Adafactor(theirs_p, lr=0.5)
    for step in range(5):
        for params in (ours_p, theirs_p):
            for i, (p, g) in enumerate(zip(params, gradients(params, step))):
                p.grad = None if (i == 4 and step < 2) or (i == 0 and step == 3) else g
        ours.step()
        theirs.step()
    assert_close(ours_p, theirs_p, "param")
    assert_torchs_state_layout(ours, theirs)


def test_a_captured_step_replays_as_eager_steps_do():
    eager_p, graph_p = make_params(9), make_params(9)
    eager, captured = ot.Adafactor(eager_p, lr=0.5, weight_decay=0.1), ot.Adafactor(graph_p, lr=0.5, weight_decay=0.1)
    grads = [gradients(eager_p, s) for s in range(5)]
    for p, g in zip(graph_p, grads[0]):
        p.grad = g.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        captured.step()  # the warm-up step builds the engine
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured.step()
    for step in range(1, 5):
        for p, g in zip(graph_p, grads[step]):
            p.grad.copy_(g)
        graph.replay()
    for step in range(5):
        for p, g in zip(eager_p, grads[step]):
            p.grad = g
        eager.step()
    torch.cuda.synchronize()
    for a, b in zip(eager_p, graph_p):
        assert torch.equal(a, b)


def test_factored_parameters_must_be_contiguous():
    p = torch.nn.Parameter(torch.randn(8, 4, 3, 3, device="cuda").to(memory_format=torch.channels_last))
    opt = ot.Adafactor([p])
    p.grad = torch.randn_like(p)  # channels_last too, as autograd makes it
    with pytest.raises(ValueError, match="channels_last"):
        opt.step()


def test_a_state_of_the_wrong_shape_in_a_state_dict_is_refused():
    params = make_params(10, shapes=[(6, 5)])
    opt = ot.Adafactor(params)
    run(opt, params, 1, schedule=False)
    saved = copy.deepcopy(opt.state_dict())
    saved["state"][0]["row_var"] = torch.zeros(5, 1)  # 6 rows
    with pytest.raises(ValueError, match=r"state 'row_var' of a parameter of shape \(6, 5\) must have shape \(6, 1\)"):
        ot.Adafactor(params).load_state_dict(saved)
