"""optgen.torch's storage options on a GPU: a dtype per state, fp32 master copies of bf16 and f16
params, stochastic rounding of bf16 params, 8-bit blockwise states, and their state_dict round trips
(C ABI 5, 13)."""

import copy
import io

import pytest

torch = pytest.importorskip("torch")
import optgen  # noqa: E402
import optgen.torch as ot  # noqa: E402
import cuda_tensors  # noqa: E402
from cuda_tensors import gradients  # noqa: E402

pytestmark = pytest.mark.gpu
SHAPES = [(33, 17), (5,), (1000,), (4, 3, 3, 3)]
STEPS = 8
BF16_STATES = {"*": torch.bfloat16, "exp_avg_sq": torch.float32}  # adamw's "bf16:bf16:exp_avg_sq=f32"


def make_params(seed, dtype=torch.float32):
    return cuda_tensors.make_params(SHAPES, seed, dtype)


def copies(params, dtype):
    """New parameters holding the same values in `dtype`."""
    return [torch.nn.Parameter(p.detach().to(dtype)) for p in params]


def groups(params, h0, h1):
    return [dict(params=params[:2], **h0), dict(params=params[2:], **h1)]


def run(optimizer, params, steps, first_step=0):
    for step in range(first_step, first_step + steps):
        for p, g in zip(params, gradients(params, step)):
            p.grad = g  # a new tensor every step, as after zero_grad(set_to_none=True)
        optimizer.step()
    torch.cuda.synchronize()


def run_twins(runs, steps, skip=lambda step, i: False):
    """Steps each (optimizer, params) of `runs` on the same gradients (those of the first run's
    dtype, converted), with a LambdaLR schedule; skip(step, i): param i has no gradient then."""
    schedulers = [torch.optim.lr_scheduler.LambdaLR(o, lambda s: 0.9 ** s) for o, _ in runs]
    for step in range(steps):
        grads = gradients(runs[0][1], step)
        for _, params in runs:
            for i, (p, g) in enumerate(zip(params, grads)):
                p.grad = None if skip(step, i) else g.to(p.dtype)
        for (optimizer, _), scheduler in zip(runs, schedulers):
            optimizer.step()
            scheduler.step()
    torch.cuda.synchronize()


def assert_close(ours, theirs, rtol=1e-5, atol=1e-6, what="param"):
    for i, (a, b) in enumerate(zip(ours, theirs)):
        torch.testing.assert_close(a.float(), b.float(), rtol=rtol, atol=atol, msg=lambda m: f"{what} {i}: {m}")


def assert_equal(ours, theirs, what="param"):
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert a.dtype == b.dtype and torch.equal(a, b), f"{what} {i} differs"


# ---- a dtype per state ----

def test_bf16_moments_with_an_f32_second_moment_match_torch_adamw():
    ours_p, theirs_p = make_params(5, torch.bfloat16), make_params(5, torch.bfloat16)
    h0, h1 = dict(lr=1e-2), dict(lr=3e-3, amsgrad=True, weight_decay=0.1)
    ours = ot.AdamW(groups(ours_p, h0, h1), state_dtype=BF16_STATES)
    theirs = torch.optim.AdamW(groups(theirs_p, h0, h1), fused=True)  # fp32 math on bf16 loads and stores
    run(ours, ours_p, 4)
    run(theirs, theirs_p, 4)
    assert ours.engine.state_dtypes == {"exp_avg": optgen.BF16, "exp_avg_sq": optgen.F32,
                                        "max_exp_avg_sq": optgen.BF16}
    for i, p in enumerate(ours_p):
        state = ours.state[p]
        assert (state["exp_avg"].dtype, state["exp_avg_sq"].dtype) == (torch.bfloat16, torch.float32)
        assert ("max_exp_avg_sq" in state) == (i >= 2)  # group 1's amsgrad
        if i >= 2:
            assert state["max_exp_avg_sq"].dtype == torch.bfloat16
    assert all(p.dtype == torch.bfloat16 for p in ours_p)
    assert_close(ours_p, theirs_p, rtol=1.6e-2, atol=1e-2)  # bf16 tolerance, as test_torch_gpu's bf16 test
    assert_close([ours.state[p]["exp_avg"] for p in ours_p], [theirs.state[p]["exp_avg"] for p in theirs_p],
                 rtol=1.6e-2, atol=1e-3, what="exp_avg")
    assert_close([ours.state[p]["exp_avg_sq"] for p in ours_p], [theirs.state[p]["exp_avg_sq"] for p in theirs_p],
                 rtol=1.6e-2, atol=1e-4, what="exp_avg_sq")


def test_a_state_dtype_dict_that_names_every_state_is_the_same_storage():
    star_p, named_p = make_params(6, torch.bfloat16), make_params(6, torch.bfloat16)
    star = ot.AdamW(star_p, lr=1e-2, state_dtype=BF16_STATES)
    named = ot.AdamW(named_p, lr=1e-2, state_dtype={"exp_avg": torch.bfloat16, "exp_avg_sq": torch.float32,
                                                    "max_exp_avg_sq": torch.bfloat16})
    run(star, star_p, 3)
    run(named, named_p, 3)
    assert_equal(star_p, named_p)


def test_storage_that_was_not_generated_fails_at_the_first_step_naming_what_was():
    params = make_params(12, torch.bfloat16)
    for p, g in zip(params, gradients(params, 0)):
        p.grad = g
    # A kernel set matches on the states the group's variant has: a bf16 exp_avg with the rest f32
    # runs AdamW's bf16:bf16:exp_avg_sq=f32 (its max_exp_avg_sq, amsgrad's only, is bf16)...
    only_exp_avg = ot.AdamW(params, state_dtype={"exp_avg": torch.bfloat16})
    only_exp_avg.step()
    assert only_exp_avg.state[params[0]]["exp_avg"].dtype == torch.bfloat16
    assert only_exp_avg.state[params[0]]["exp_avg_sq"].dtype == torch.float32
    # ... but with amsgrad it needs an f32 max_exp_avg_sq, which no kernel set has.
    amsgrad = ot.AdamW(params, amsgrad=True, state_dtype={"exp_avg": torch.bfloat16})
    with pytest.raises(optgen.OptgenError, match=r"storage bf16:f32:exp_avg=bf16 was generated \(its kernels: .*"
                                                 r"bf16:bf16:exp_avg_sq=f32[,)]"):
        amsgrad.step()
    adafactor = ot.Adafactor(params, master_weights=True)  # Adafactor generates f32, bf16 and f16 only
    with pytest.raises(optgen.OptgenError, match=r"storage bf16\+master was generated"):
        adafactor.step()


# ---- fp32 master copies ----

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_master_weights_track_torch_adamw_on_fp32_copies_and_the_params_are_the_master_rounded(dtype):
    ours_p = copies(make_params(10), dtype)
    f32_p, theirs_p = copies(ours_p, torch.float32), copies(ours_p, torch.float32)  # the same values in fp32
    h0, h1 = dict(lr=1e-2, weight_decay=0.1), dict(lr=3e-3, amsgrad=True, betas=(0.8, 0.9))
    ours = ot.AdamW(groups(ours_p, h0, h1), master_weights=True)
    f32 = ot.AdamW(groups(f32_p, h0, h1))
    theirs = torch.optim.AdamW(groups(theirs_p, h0, h1), foreach=False)
    run_twins([(ours, ours_p), (f32, f32_p), (theirs, theirs_p)], STEPS)
    masters = [ours.state[p]["master_param"] for p in ours_p]
    for p, m in zip(ours_p, masters):
        assert (m.dtype, m.shape, m.stride(), m.device) == (torch.float32, p.shape, p.stride(), p.device)
        assert torch.equal(p, m.to(dtype)), "the param is its master rounded to nearest"
    assert_equal(masters, [p.detach() for p in f32_p], what="master")  # optgen's f32 run, bit for bit
    assert_close(masters, theirs_p, what="master")  # torch's fp32 AdamW, as test_torch_gpu's fp32 tests
    assert not all(torch.equal(m, p.float()) for p, m in zip(ours_p, masters)), "the master holds more bits"
    state = ours.state_dict()["state"]
    assert all(state[i]["master_param"] is masters[i] for i in range(len(masters)))


def test_a_master_copy_survives_rebuilds_when_gradients_come_and_go():
    """Each gradient that appears or disappears builds a new engine, which starts its masters from
    the params; the optimizer must carry the old masters over."""
    ours_p = copies(make_params(13), torch.bfloat16)
    f32_p, theirs_p = copies(ours_p, torch.float32), copies(ours_p, torch.float32)
    ours, f32 = ot.Adam(ours_p, lr=1e-2, master_weights=True), ot.Adam(f32_p, lr=1e-2)
    theirs = torch.optim.Adam(theirs_p, lr=1e-2, foreach=False)
    run_twins([(ours, ours_p), (f32, f32_p), (theirs, theirs_p)], 7,
              skip=lambda step, i: (i == 1 and step < 3) or (i == 2 and step in (4, 5)))
    masters = [ours.state[p]["master_param"] for p in ours_p]
    assert_equal(masters, [p.detach() for p in f32_p], what="master")
    assert_close(masters, theirs_p, what="master")
    assert [ours.state_dict()["state"][i]["step"].item() for i in range(4)] == [7, 4, 5, 7]


def test_a_state_dict_without_master_copies_starts_them_from_the_params_and_one_without_master_weights_drops_them():
    params = make_params(14, torch.bfloat16)
    plain = ot.AdamW(params, lr=1e-2)
    run(plain, params, 2)
    master = ot.AdamW(params, lr=1e-2, master_weights=True)
    master.load_state_dict(copy.deepcopy(plain.state_dict()))
    before = [p.detach().float() for p in params]
    for p, g in zip(params, gradients(params, 2)):
        p.grad = g
    master.step()
    torch.cuda.synchronize()
    for p, b in zip(params, before):
        m = master.state[p]["master_param"]
        assert torch.equal(p, m.to(torch.bfloat16))
        assert not torch.equal(m, b)  # it started from the param and took the step
    saved = copy.deepcopy(master.state_dict())
    assert all("master_param" in s for s in saved["state"].values())
    again = ot.AdamW(params, lr=1e-2)
    again.load_state_dict(saved)
    assert all("master_param" not in again.state[p] for p in params)
    run(again, params, 1, first_step=3)


# ---- stochastic rounding ----

def sr_train(seed, numel=1 << 20, steps=STEPS, rounding=True):
    """bf16 params at 1.0, gradients 1.0: each AdamW step (lr 1e-3, no decay) moves a param by the
    same ~1e-3, under half of bf16's spacing at 1.0 (2^-8), so rounding to nearest never moves it."""
    p = torch.nn.Parameter(torch.ones(numel, device="cuda", dtype=torch.bfloat16))
    options = dict(stochastic_rounding=True, seed=seed) if rounding else {}
    opt = ot.AdamW([p], lr=1e-3, weight_decay=0.0, state_dtype=torch.bfloat16, **options)
    for _ in range(steps):
        p.grad = torch.ones_like(p)
        opt.step()
    torch.cuda.synchronize()
    return p.detach().clone()


def test_stochastic_rounding_is_reproducible_with_a_seed_and_differs_with_another():
    a, b, c = sr_train(1), sr_train(1), sr_train(2)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert len(torch.unique(a)) > 1  # the same update everywhere, rounded to different neighbours


def test_stochastic_rounding_is_unbiased_where_rounding_to_nearest_loses_every_update():
    nearest = sr_train(0, rounding=False)
    assert torch.all(nearest == 1.0)
    # The exact trajectory: an f32 param with the same bf16 states (adamw's "f32:bf16"): every
    # element's update is the same and does not depend on the param, so the mean of the rounded
    # params is, in expectation, the f32 param.
    exact = torch.nn.Parameter(torch.ones(1, device="cuda"))
    opt = ot.AdamW([exact], lr=1e-3, weight_decay=0.0, state_dtype=torch.bfloat16)
    for _ in range(STEPS):
        exact.grad = torch.ones_like(exact)
        opt.step()
    torch.cuda.synchronize()
    assert abs(exact.item() - (1 - STEPS * 1e-3)) < 5e-4  # every update about lr
    rounded = sr_train(3)
    # each step's rounding: variance at most (spacing / 2)^2 per element, spacing at most 2^-8 here
    sigma = (STEPS ** 0.5) * 2.0 ** -9 / rounded.numel() ** 0.5
    mean = rounded.double().mean().item()
    assert abs(mean - exact.item()) < 6 * sigma, (mean, exact.item(), sigma)


# ---- state_dict round trips ----

@pytest.mark.parametrize("options", [
    dict(master_weights=True),
    dict(master_weights=True, state_dtype=torch.float32, amsgrad=True, betas=(0.8, 0.9)),
    dict(stochastic_rounding=True, seed=5, state_dtype=torch.bfloat16),
    dict(state_dtype=BF16_STATES),
], ids=["master", "master-amsgrad", "stochastic-bf16-states", "bf16-states-f32-exp_avg_sq"])
def test_a_state_dict_resumes_bit_identically_through_torch_save(options):
    straight_p, resumed_p = make_params(3, torch.bfloat16), make_params(3, torch.bfloat16)
    straight = ot.AdamW(straight_p, lr=1e-2, **options)
    run(straight, straight_p, 6)
    first = ot.AdamW(resumed_p, lr=1e-2, **options)
    run(first, resumed_p, 3)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    expected = {name: first.engine.state_dtypes[name] for name in ("exp_avg", "exp_avg_sq")}
    torch_dtypes = {optgen.F32: torch.float32, optgen.BF16: torch.bfloat16, optgen.F16: torch.float16}
    for state in saved["state"].values():
        for name, dtype in expected.items():
            assert state[name].dtype == torch_dtypes[dtype], f"{name} saved as {state[name].dtype}"
        assert ("master_param" in state) == bool(options.get("master_weights"))
        if "master_param" in state:
            assert state["master_param"].dtype == torch.float32
    del first
    resumed = ot.AdamW(resumed_p, lr=1e-2, **options)
    resumed.load_state_dict(saved)
    run(resumed, resumed_p, 3, first_step=3)
    assert_equal([p.detach() for p in resumed_p], [p.detach() for p in straight_p])
    ours, theirs = resumed.state_dict()["state"], straight.state_dict()["state"]  # steps refreshed
    for i in theirs:
        assert ours[i].keys() == theirs[i].keys()
        assert ours[i]["step"].item() == 6
        for key in theirs[i]:
            assert torch.equal(ours[i][key], theirs[i][key]), f"param {i}: state {key} differs"


# ---- 8-bit blockwise states ----

Q8_STATES = {"*": "q8", "exp_avg_sq": "uq8"}  # bitsandbytes' AdamW8bit
# Codes from 4096 elements: a matrix, a channels_last conv weight (codes in its memory order), a
# vector whose last block has one element; 4095 elements keep float32 values.
Q8_SHAPES = [(300, 257), (64, 3, 7, 7), (4097,), (4095,)]
# The widest gap between two codes' values, the signed map's next to +-1 (1/64 of 0.9), halved: a
# value quantised from a float moves by at most this times its block's absmax, which is at most the
# block's largest magnitude over 1 - 0.9 / 128 (0.9929687, the signed map's most negative code).
Q8_HALF_STEP = 0.9 / 64 / 2 / (1 - 0.9 / 128)


def q8_params(seed, dtype=torch.float32):
    g = torch.Generator(device="cuda").manual_seed(seed)
    params = [torch.randn(s, generator=g, device="cuda").to(dtype) for s in Q8_SHAPES]
    params[1] = params[1].contiguous(memory_format=torch.channels_last)
    return [torch.nn.Parameter(p) for p in params]


def q8_grads(params, step):
    g = torch.Generator(device="cuda").manual_seed(1000 + step)
    return [torch.empty_like(p).normal_(generator=g) * 1e-2 for p in params]  # each in its param's layout


def q8_run(optimizer, params, steps, first_step=0):
    for step in range(first_step, first_step + steps):
        for p, g in zip(params, q8_grads(params, step)):
            p.grad = g
        optimizer.step()
    torch.cuda.synchronize()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_8bit_states_step_as_the_engine_does_on_its_own_buffers(dtype):
    ours_p, engine_p = q8_params(7, dtype), q8_params(7, dtype)
    ours = ot.AdamW(ours_p, lr=1e-2, weight_decay=0.1, state_dtype=Q8_STATES)
    hyper = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1}
    engine = optgen.Engine.builtin("adamw", hyper, storage=optgen.Storage(optgen.Q8, {"exp_avg_sq": optgen.UQ8}))
    grads = [torch.empty_like(p) for p in engine_p]
    engine.add_param_group([optgen.TensorBinding(p.data_ptr(), g.data_ptr(), p.numel(),
                                                 optgen.F32 if dtype == torch.float32 else optgen.BF16)
                            for p, g in zip(engine_p, grads)], hyper)
    stream = torch.cuda.current_stream().cuda_stream
    engine.prepare(stream)
    for step in range(5):
        for p, mine, g in zip(ours_p, grads, q8_grads(ours_p, step)):
            p.grad = g
            mine.copy_(g)
        ours.step()
        engine.step(stream)
    torch.cuda.synchronize()
    assert_equal([p.detach() for p in ours_p], [p.detach() for p in engine_p])
    layout = optgen.Blockwise8Layout.of(optgen.Q8)
    for p in ours_p[:3]:
        assert ours.state[p]["exp_avg"].dtype == torch.uint8
        assert ours.state[p]["exp_avg"].numel() == layout.buffer_bytes(p.numel())
    assert ours.state[ours_p[3]]["exp_avg"].dtype == torch.float32  # under 4096 elements


def test_an_8bit_state_dict_holds_values_that_quantise_back_to_the_same_bits_and_resume_bit_identically():
    straight_p, resumed_p = q8_params(8), q8_params(8)
    straight = ot.AdamW(straight_p, lr=1e-2, state_dtype=Q8_STATES)
    q8_run(straight, straight_p, 6)
    first = ot.AdamW(resumed_p, lr=1e-2, state_dtype=Q8_STATES)
    q8_run(first, resumed_p, 3)
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer)
    for i, p in enumerate(resumed_p):
        for name in ("exp_avg", "exp_avg_sq"):
            assert saved["state"][i][name].dtype == torch.float32 and saved["state"][i][name].shape == p.shape
    kept = {i: {name: first.state[p][name].clone() for name in ("exp_avg", "exp_avg_sq")}
            for i, p in enumerate(resumed_p)}
    del first
    resumed = ot.AdamW(resumed_p, lr=1e-2, state_dtype=Q8_STATES)
    resumed.load_state_dict(saved)  # the values quantised into buffers for the engine
    for i, p in enumerate(resumed_p):
        for name, bits in kept[i].items():
            assert torch.equal(resumed.state[p][name], bits), f"param {i}: {name} is not the saved bits"
    q8_run(resumed, resumed_p, 3, first_step=3)
    assert_equal([p.detach() for p in resumed_p], [p.detach() for p in straight_p])


def test_8bit_states_load_torch_adamw_checkpoints_and_torch_adamw_loads_theirs():
    theirs_p, ours_p = q8_params(9), q8_params(9)
    theirs = torch.optim.AdamW(theirs_p, lr=1e-2)
    q8_run(theirs, theirs_p, 3)
    ours = ot.AdamW(ours_p, lr=1e-2, state_dtype=Q8_STATES)
    ours.load_state_dict(theirs.state_dict())
    saved = ours.state_dict()
    for i, p in enumerate(theirs_p):
        for name in ("exp_avg", "exp_avg_sq"):
            a, b = saved["state"][i][name], theirs.state[p][name]
            assert a.dtype == torch.float32 and a.shape == b.shape and a.stride() == b.stride()
            if p.numel() < 4096:
                assert torch.equal(a, b), f"param {i}: {name} kept in float32 changed"
            else:
                worst = ((a - b).abs().max() / b.abs().max()).item()
                assert 0 < worst <= Q8_HALF_STEP, f"param {i}: {name} moved by {worst} of its largest value"
    back = torch.optim.AdamW([torch.nn.Parameter(p.detach().clone()) for p in ours_p], lr=1e-2)
    back.load_state_dict(saved)
    q8_run(back, back.param_groups[0]["params"], 1, first_step=3)  # torch steps from our values
    for i, p in enumerate(back.param_groups[0]["params"]):
        assert back.state[p]["step"].item() == 4


def test_8bit_state_dtypes_are_checked():
    params = q8_params(1)
    with pytest.raises(ValueError, match=r"state_dtype must be torch.float32, .*'q8' or 'uq8'"):
        ot.AdamW(params, state_dtype="q4")
    with pytest.raises(ValueError, match=r"state_dtype\['exp_avg'\] must be"):
        ot.AdamW(params, state_dtype={"exp_avg": "int8"})
    sgd = ot.SGD(params, lr=0.1, momentum=0.9, state_dtype="q8")  # SGD generates no 8-bit kernels
    for p, g in zip(params, q8_grads(params, 0)):
        p.grad = g
    with pytest.raises(optgen.OptgenError, match=r"storage f32:q8 was generated"):
        sgd.step()


# ---- 8-bit states in a spec of rows (Adam-mini) ----

MINI_Q8_STATES = {"*": "q8", "vmean": torch.float32, "v": "uq8"}  # adam_mini's "f32:q8:vmean=f32:v=uq8"


def mini_model(seed):
    """Named parameters of Adam_mini's kinds, most of 4096 elements or more (8-bit states): an
    embedding and an output layer (a row per neuron), a query (a row per head), a bias of 4100
    (per element: `v` in uq8, its last 8-bit block of 4 elements), a norm (4096 elements, one block
    for the whole) and a bias under 4096 (float32 states)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    shapes = {"embed.weight": (100, 64), "blocks.0.q_proj.weight": (64, 64), "blocks.0.mlp.0.bias": (4100,),
              "norm.weight": (4096,), "lm_head.weight": (100, 64), "blocks.0.mlp.1.bias": (64,)}
    return [(name, torch.nn.Parameter(torch.randn(s, generator=g, device="cuda"))) for name, s in shapes.items()]


def mini_run(optimizer, named, steps, first_step=0):
    params = [p for _, p in named]
    for step in range(first_step, first_step + steps):
        for p, g in zip(params, q8_grads(params, step)):
            p.grad = g
        optimizer.step()
    torch.cuda.synchronize()


def test_adam_mini_with_8bit_states_steps_near_float32_and_resumes_bit_identically():
    eight, f32, resumed = mini_model(3), mini_model(3), mini_model(3)
    options = dict(lr=1e-2, weight_decay=0.1, dim=64, n_heads=4)
    ours = ot.AdamMini(eight, state_dtype=MINI_Q8_STATES, **options)
    mini_run(ours, eight, 6)
    kinds = {name: {k: v.dtype for k, v in ours.state[p].items() if k != "step"} for name, p in eight}
    assert kinds["embed.weight"] == {"m": torch.uint8, "vmean": torch.float32}
    assert kinds["blocks.0.mlp.0.bias"] == {"m": torch.uint8, "v": torch.uint8}
    assert kinds["norm.weight"]["m"] == torch.uint8
    assert kinds["blocks.0.mlp.1.bias"] == {"m": torch.float32, "v": torch.float32}  # under 4096 elements
    # The same steps with float32 states: 8-bit moments move each step by less than 3% of its size;
    # a tensor under 4096 elements keeps float32 states and steps alike.
    reference = ot.AdamMini(f32, **options)
    mini_run(reference, f32, 6)
    for (name, a), (_, b), (_, start) in zip(eight, f32, mini_model(3)):
        moved, apart = (b - start).abs().max().item(), (a - b).abs().max().item()
        if a.numel() < 4096:
            assert apart == 0, name
        else:
            assert 0 < apart <= 0.03 * moved, name
    # A state_dict taken after three steps resumes to the same bits as six steps straight.
    first = ot.AdamMini(resumed, state_dtype=MINI_Q8_STATES, **options)
    mini_run(first, resumed, 3)
    saved = copy.deepcopy(first.state_dict())
    del first
    again = ot.AdamMini(resumed, state_dtype=MINI_Q8_STATES, **options)
    again.load_state_dict(saved)
    mini_run(again, resumed, 3, first_step=3)
    assert_equal([p.detach() for _, p in resumed], [p.detach() for _, p in eight])
