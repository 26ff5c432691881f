"""optgen.torch.Muon on a GPU against torch.optim.Muon (torch 2.11): parameters and momentum
buffers after every step, for each of torch's options, for matrices of several shapes (wide, tall,
square, one row, one column, shapes shared by several parameters); checkpoints both ways mid-run;
a step captured in a CUDA graph; and torch's refusals.

Both sides orthogonalise in bf16 with fp32 accumulation (cuBLAS), torch one matrix at a time and
optgen batched by shape: the products may sum in another order, and a bf16 rounding that differs
in the last bit moves an entry of the orthogonalised update by up to 2^-8 of its size. The bound
below is 2 % of the largest entry the update can have (lr times the shape's scale), per step,
measured against both sides' own distance from an fp64 iteration (about 1 %)."""

import copy
import math

import pytest

torch = pytest.importorskip("torch")

import optgen.torch as ot  # noqa: E402
import cuda_tensors  # noqa: E402

pytestmark = pytest.mark.gpu

SHAPES = [(64, 32), (32, 64), (64, 32), (48, 48), (1, 40), (40, 1), (300, 100)]
STEPS = 8

CONFIGS = [
    dict(),
    dict(lr=0.02, nesterov=False),
    dict(lr=0.02, adjust_lr_fn="match_rms_adamw", weight_decay=0.0),
    dict(lr=0.01, momentum=0.9, ns_steps=3, ns_coefficients=(2.0, -1.5, 0.5), eps=1e-5),
]


def reference():
    if not hasattr(torch.optim, "Muon"):
        pytest.skip(f"torch {torch.__version__} has no torch.optim.Muon")
    return torch.optim.Muon


def make_params(seed):
    return cuda_tensors.make_params(SHAPES, seed)


def gradients(step):
    return cuda_tensors.gradients(SHAPES, step)


def bound(config, shape, steps):
    """How far the parameters may drift apart after `steps` steps (see above)."""
    lr = config.get("lr", 1e-3)
    a, b = shape
    scale = 0.2 * math.sqrt(max(a, b)) if config.get("adjust_lr_fn") == "match_rms_adamw" else math.sqrt(max(1, a / b))
    return 0.02 * lr * scale * steps + 1e-6


def step_both(ours, theirs, ours_p, theirs_p, step):
    for p, q, g in zip(ours_p, theirs_p, gradients(step)):
        p.grad, q.grad = g.clone(), g.clone()
    ours.step()
    theirs.step()


def compare(config, ours, theirs, ours_p, theirs_p, steps, when):
    for i, (p, q) in enumerate(zip(ours_p, theirs_p)):
        worst = (p - q).abs().max().item()
        assert worst <= bound(config, p.shape, steps), f"param {i} {tuple(p.shape)} {when}: {worst}"
        torch.testing.assert_close(ours.state[p]["momentum_buffer"], theirs.state[q]["momentum_buffer"],
                                   rtol=1e-5, atol=1e-6 + 2 * bound(config, p.shape, steps),
                                   msg=lambda m: f"momentum_buffer of param {i} {when}: {m}")


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()) or "defaults")
def test_muon_steps_as_torch(config):
    Muon = reference()
    ours_p, theirs_p = make_params(1), make_params(1)
    ours, theirs = ot.Muon(ours_p, **config), Muon(theirs_p, **config)
    for step in range(STEPS):
        step_both(ours, theirs, ours_p, theirs_p, step)
        compare(config, ours, theirs, ours_p, theirs_p, step + 1, f"after step {step + 1}")


def test_checkpoints_move_both_ways_mid_run():
    Muon = reference()
    config = dict(lr=0.02)
    ours_p, theirs_p = make_params(2), make_params(2)
    ours, theirs = ot.Muon(ours_p, **config), Muon(theirs_p, **config)
    for step in range(3):
        step_both(ours, theirs, ours_p, theirs_p, step)
    # torch's checkpoint into optgen, optgen's into torch: each then steps on as the other.
    ours2_p = [torch.nn.Parameter(q.detach().clone()) for q in theirs_p]
    theirs2_p = [torch.nn.Parameter(p.detach().clone()) for p in ours_p]
    ours2, theirs2 = ot.Muon(ours2_p, **config), Muon(theirs2_p, **config)
    ours2.load_state_dict(copy.deepcopy(theirs.state_dict()))
    theirs2.load_state_dict(copy.deepcopy(ours.state_dict()))
    for step in range(3, 6):
        step_both(ours2, theirs, ours2_p, theirs_p, step)
        step_both(ours, theirs2, ours_p, theirs2_p, step)
    compare(config, ours2, theirs, ours2_p, theirs_p, 6, "loaded from torch")
    compare(config, ours, theirs2, ours_p, theirs2_p, 6, "torch loaded from optgen")
    assert ours.state_dict()["param_groups"][0]["adjust_lr_fn"] is None


def captured_step(optimizer):
    """optimizer.step() captured in a CUDA graph on a side stream, as torch.cuda.graph asks."""
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph):
        optimizer.step()
    torch.cuda.current_stream().wait_stream(stream)
    return graph


def test_a_step_captured_in_a_graph_is_the_eager_step():
    eager_p, replayed_p = make_params(3), make_params(3)
    eager, replayed = ot.Muon(eager_p, lr=0.02), ot.Muon(replayed_p, lr=0.02)
    for p, q, g in zip(eager_p, replayed_p, gradients(0)):
        p.grad, q.grad = g.clone(), g.clone()
    eager.step()
    replayed.step()
    graph = captured_step(replayed)
    for step in range(1, 4):
        for p, q, g in zip(eager_p, replayed_p, gradients(step)):
            p.grad.copy_(g)
            q.grad.copy_(g)
        eager.step()
        graph.replay()
    torch.cuda.synchronize()
    for p, q in zip(eager_p, replayed_p):
        assert torch.equal(p, q)


def test_torch_refusals():
    reference()
    with pytest.raises(ValueError, match="Muon only supports 2D parameters"):
        ot.Muon([torch.nn.Parameter(torch.zeros(5, device="cuda"))])
    with pytest.raises(ValueError, match="Adjust learning rate function"):
        ot.Muon([torch.nn.Parameter(torch.zeros(2, 3, device="cuda"))], adjust_lr_fn="sqrt")
    with pytest.raises(ValueError, match="Learning rate"):
        ot.Muon([torch.nn.Parameter(torch.zeros(2, 3, device="cuda"))], lr=-1.0)


def test_muon_with_aux_adam_steps_as_torch_muon_and_adamw():
    """Hidden matrices by Muon, the rest (an embedding, biases, a norm's weight) by AdamW, in one
    optimizer: as torch.optim.Muon and torch.optim.AdamW side by side. Then checkpoints every way,
    each followed by more steps: its state_dict() into a new one of its own, its parts' into
    torch's two, and torch's two into a new one's parts."""
    Muon = reference()
    g = torch.Generator(device="cuda").manual_seed(4)
    hidden_shapes, rest_shapes = [(64, 32), (32, 64), (64, 32)], [(500, 32), (64,), (32,)]

    def model():
        return ([torch.nn.Parameter(torch.randn(s, generator=g, device="cuda")) for s in hidden_shapes],
                [torch.nn.Parameter(torch.randn(s, generator=g, device="cuda")) for s in rest_shapes])

    hidden, rest = model()
    t_hidden = [torch.nn.Parameter(p.detach().clone()) for p in hidden]
    t_rest = [torch.nn.Parameter(p.detach().clone()) for p in rest]
    ours = ot.MuonWithAuxAdam([dict(params=hidden, use_muon=True, lr=0.02, weight_decay=0.01),
                               dict(params=rest, use_muon=False, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)])
    t_muon = Muon(t_hidden, lr=0.02, weight_decay=0.01)
    t_adamw = torch.optim.AdamW(t_rest, lr=3e-3, betas=(0.9, 0.95), weight_decay=0.0)
    assert [gr["use_muon"] for gr in ours.param_groups] == [True, False]
    for step in range(5):
        grads = [torch.randn(p.shape, generator=g, device="cuda") for p in hidden + rest]
        for p, q, gr in zip(hidden + rest, t_hidden + t_rest, grads):
            p.grad, q.grad = gr.clone(), gr.clone()
        ours.step()
        t_muon.step()
        t_adamw.step()
        if step == 2:
            ours.param_groups[1]["lr"] = 1e-3  # as a scheduler would: reaches the device
            t_adamw.param_groups[0]["lr"] = 1e-3
    for i, (p, q) in enumerate(zip(hidden, t_hidden)):
        assert (p - q).abs().max().item() <= bound(dict(lr=0.02), p.shape, 5), f"hidden {i}"
    for i, (p, q) in enumerate(zip(rest, t_rest)):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m: f"rest {i}: {m}")
    saved = ours.state_dict()
    assert [len(gr["params"]) for gr in saved["param_groups"]] == [3, 3]
    assert set(saved["state"][0]) >= {"momentum_buffer"} and set(saved["state"][3]) >= {"exp_avg", "exp_avg_sq"}

    def clones(params):
        return [torch.nn.Parameter(p.detach().clone()) for p in params]

    again_hidden, again_rest = clones(hidden), clones(rest)
    again = ot.MuonWithAuxAdam([dict(params=again_hidden, use_muon=True), dict(params=again_rest, use_muon=False)])
    again.load_state_dict(copy.deepcopy(saved))
    assert again.param_groups[0]["lr"] == 0.02 and again.param_groups[1]["lr"] == 1e-3
    torch.testing.assert_close(again.state[again_hidden[0]]["momentum_buffer"], ours.state[hidden[0]]["momentum_buffer"])
    to_torch_hidden, to_torch_rest = clones(hidden), clones(rest)
    to_torch_muon = Muon(to_torch_hidden)
    to_torch_muon.load_state_dict(copy.deepcopy(ours.muon.state_dict()))
    to_torch_adamw = torch.optim.AdamW(to_torch_rest)
    to_torch_adamw.load_state_dict(copy.deepcopy(ours.adamw.state_dict()))
    assert to_torch_muon.param_groups[0]["lr"] == 0.02 and to_torch_adamw.param_groups[0]["lr"] == 1e-3
    from_torch_hidden, from_torch_rest = clones(t_hidden), clones(t_rest)
    from_torch = ot.MuonWithAuxAdam([dict(params=from_torch_hidden, use_muon=True),
                                     dict(params=from_torch_rest, use_muon=False)])
    from_torch.muon.load_state_dict(copy.deepcopy(t_muon.state_dict()))
    from_torch.adamw.load_state_dict(copy.deepcopy(t_adamw.state_dict()))
    # Loaded into its parts alone, it lists their new groups.
    assert from_torch.param_groups[0]["lr"] == 0.02 and from_torch.param_groups[1]["lr"] == 1e-3
    assert [gr["use_muon"] for gr in from_torch.param_groups] == [True, False]
    # Two more steps of every copy on the same gradients.
    sides = [(ours, hidden + rest), (again, again_hidden + again_rest),
             ((to_torch_muon, to_torch_adamw), to_torch_hidden + to_torch_rest),
             (from_torch, from_torch_hidden + from_torch_rest), ((t_muon, t_adamw), t_hidden + t_rest)]
    for step in range(2):
        grads = [torch.randn(p.shape, generator=g, device="cuda") for p in hidden + rest]
        for opts, params in sides:
            for p, gr in zip(params, grads):
                p.grad = gr.clone()
            for opt in opts if isinstance(opts, tuple) else (opts,):
                opt.step()
    # Its own checkpoint resumes exactly; a checkpoint crossing to or from torch, within the bound
    # of two steps of the matrices' Newton-Schulz (the rest: AdamW's rounding).
    for p, q in zip(again_hidden + again_rest, hidden + rest):
        assert torch.equal(p, q)
    for ours_side, torch_side, what in ((hidden + rest, to_torch_hidden + to_torch_rest, "optgen -> torch"),
                                        (from_torch_hidden + from_torch_rest, t_hidden + t_rest, "torch -> optgen")):
        for i, (p, q) in enumerate(zip(ours_side[:3], torch_side[:3])):
            assert (p - q).abs().max().item() <= bound(dict(lr=0.02), p.shape, 2), f"{what}: hidden {i}"
        for i, (p, q) in enumerate(zip(ours_side[3:], torch_side[3:])):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=lambda m: f"{what}: rest {i}: {m}")
    torch.testing.assert_close(from_torch.state[from_torch_hidden[0]]["momentum_buffer"],
                               t_muon.state[t_hidden[0]]["momentum_buffer"], rtol=1e-5,
                               atol=1e-6 + 2 * bound(dict(lr=0.02), hidden_shapes[0], 2))


def test_muon_with_aux_adam_captured_in_a_graph_is_its_eager_step():
    """Muon's and AdamW's groups in one optimizer (optgen_optimizers_step_amp), its step captured in
    one CUDA graph: every replay the eager step's bits, the matrices' and the rest's."""
    g = torch.Generator(device="cuda").manual_seed(6)
    shapes = [(64, 32), (32, 64), (48, 48), (500, 32), (64,), (32,)]
    eager_p = [torch.nn.Parameter(torch.randn(s, generator=g, device="cuda")) for s in shapes]
    replayed_p = [torch.nn.Parameter(p.detach().clone()) for p in eager_p]

    def optimizer(params):
        return ot.MuonWithAuxAdam([dict(params=params[:3], use_muon=True, lr=0.02, weight_decay=0.01),
                                   dict(params=params[3:], use_muon=False, lr=3e-3, weight_decay=0.1)])

    eager, replayed = optimizer(eager_p), optimizer(replayed_p)

    def set_grads():
        for p, q in zip(eager_p, replayed_p):
            grad = torch.randn(p.shape, generator=g, device="cuda")
            if p.grad is None:
                p.grad, q.grad = grad.clone(), grad.clone()
            else:
                p.grad.copy_(grad)
                q.grad.copy_(grad)

    set_grads()
    eager.step()
    replayed.step()
    graph = captured_step(replayed)
    for _ in range(3):
        set_grads()
        eager.step()
        graph.replay()
    torch.cuda.synchronize()
    for i, (p, q) in enumerate(zip(eager_p, replayed_p)):
        assert torch.equal(p, q), f"param {i} {tuple(p.shape)}"
    assert torch.equal(eager.state[eager_p[3]]["exp_avg_sq"], replayed.state[replayed_p[3]]["exp_avg_sq"])


def test_splits_step_each_part_as_its_own_matrix():
    """A fused QKV weight with splits=3 steps as torch.optim.Muon steps its three thirds apart."""
    Muon = reference()
    g = torch.Generator(device="cuda").manual_seed(5)
    qkv = torch.nn.Parameter(torch.randn(3 * 48, 48, generator=g, device="cuda"))
    thirds = [torch.nn.Parameter(part.detach().clone()) for part in qkv.detach().split(48)]
    ours = ot.Muon([dict(params=[qkv], splits=3)], lr=0.02)
    theirs = Muon(thirds, lr=0.02)
    for step in range(4):
        grad = torch.randn(qkv.shape, generator=g, device="cuda")
        qkv.grad = grad.clone()
        for part, piece in zip(thirds, grad.split(48)):
            part.grad = piece.clone()
        ours.step()
        theirs.step()
    worst = (qkv.detach() - torch.cat([p.detach() for p in thirds])).abs().max().item()
    assert worst <= bound(dict(lr=0.02), (48, 48), 4), worst
    assert ours.state_dict()["param_groups"][0]["splits"] == 3
    with pytest.raises(ValueError, match="splits=5 does not divide"):
        ot.Muon([dict(params=[torch.nn.Parameter(torch.zeros(12, 4, device="cuda"))], splits=5)])


def test_column_splits_step_each_part_as_its_own_matrix():
    """A Conv1D's fused QKV weight (in x out: GPT-2's c_attn) with splits=3, split_dim=1 steps as
    torch.optim.Muon steps its three column thirds apart, beside a whole matrix of a third's shape."""
    Muon = reference()
    g = torch.Generator(device="cuda").manual_seed(8)
    qkv = torch.nn.Parameter(torch.randn(40, 3 * 24, generator=g, device="cuda"))
    whole = torch.nn.Parameter(torch.randn(40, 24, generator=g, device="cuda"))
    thirds = [torch.nn.Parameter(part.detach().clone().contiguous()) for part in qkv.detach().split(24, dim=1)]
    other = torch.nn.Parameter(whole.detach().clone())
    ours = ot.Muon([dict(params=[qkv], splits=3, split_dim=1), dict(params=[whole])], lr=0.02)
    theirs = Muon(thirds + [other], lr=0.02)
    for step in range(4):
        grad = torch.randn(qkv.shape, generator=g, device="cuda")
        qkv.grad = grad.clone()
        for part, piece in zip(thirds, grad.split(24, dim=1)):
            part.grad = piece.clone().contiguous()
        whole.grad = torch.randn(whole.shape, generator=g, device="cuda")
        other.grad = whole.grad.clone()
        ours.step()
        theirs.step()
    worst = (qkv.detach() - torch.cat([p.detach() for p in thirds], dim=1)).abs().max().item()
    assert worst <= bound(dict(lr=0.02), (40, 24), 4), worst
    assert (whole.detach() - other.detach()).abs().max().item() <= bound(dict(lr=0.02), (40, 24), 4)
    group = ours.state_dict()["param_groups"][0]
    assert (group["splits"], group["split_dim"]) == (3, 1)
    with pytest.raises(ValueError, match="has 4 columns, which splits=3 does not divide"):
        ot.Muon([dict(params=[torch.nn.Parameter(torch.zeros(12, 4, device="cuda"))], splits=3, split_dim=1)])
    with pytest.raises(ValueError, match="split_dim must be 0"):
        ot.Muon([dict(params=[torch.nn.Parameter(torch.zeros(12, 4, device="cuda"))], splits=2, split_dim=2)])
    with pytest.raises(ValueError, match="split_dim must be 0"):
        ot.Muon([dict(params=[torch.nn.Parameter(torch.zeros(12, 4, device="cuda"))], splits=2, split_dim=1.0)])
    channels_last = torch.nn.Parameter(torch.randn(6, 3, 2, 2, device="cuda").to(memory_format=torch.channels_last))
    with pytest.raises(ValueError, match="is not contiguous"):
        ot.Muon([dict(params=[channels_last], splits=3, split_dim=1)])
    # A checkpoint of other splits loads, and the group keeps the splits its tensors were bound with.
    halves = torch.nn.Parameter(qkv.detach().clone())
    rows = ot.Muon([dict(params=[halves], splits=2), dict(params=[torch.nn.Parameter(whole.detach().clone())])],
                   lr=0.02)
    rows.load_state_dict(ours.state_dict())
    assert (rows.param_groups[0]["splits"], rows.param_groups[0]["split_dim"]) == (2, 0)


def test_a_convolution_weight_steps_as_its_matrix_of_first_dimension_against_the_rest():
    """A 4-D weight (torch.optim.Muon refuses it) steps as torch's Muon steps its (out, in * kh * kw) view."""
    Muon = reference()
    g = torch.Generator(device="cuda").manual_seed(6)
    conv = torch.nn.Parameter(torch.randn(16, 8, 3, 3, generator=g, device="cuda"))
    flat = torch.nn.Parameter(conv.detach().reshape(16, 72).clone())
    ours, theirs = ot.Muon([conv], lr=0.02), Muon([flat], lr=0.02)
    for step in range(4):
        grad = torch.randn(conv.shape, generator=g, device="cuda")
        conv.grad, flat.grad = grad.clone(), grad.reshape(16, 72).clone()
        ours.step()
        theirs.step()
    worst = (conv.detach().reshape(16, 72) - flat.detach()).abs().max().item()
    assert worst <= bound(dict(lr=0.02), (16, 72), 4), worst


def _torch_newton_schulz_in_f32():
    """torch.optim.Muon's own _zeropower_via_newtonschulz with its bf16 cast made a float32 copy
    (its source, `.bfloat16()` replaced by `.float().clone()`: the cast copies, and the iteration
    divides its matrix in place, which without the copy would be torch's momentum buffer): torch's
    iteration in fp32 throughout (no TF32: torch.backends.cuda.matmul.allow_tf32 is off by default)."""
    import inspect
    import textwrap

    import torch.optim._muon as muon_module
    source = textwrap.dedent(inspect.getsource(muon_module._zeropower_via_newtonschulz))
    assert source.count(".bfloat16()") == 1, "torch's Newton-Schulz no longer casts with .bfloat16() once"
    namespace = dict(vars(muon_module))
    exec(compile(source.replace(".bfloat16()", ".float().clone()"), muon_module.__file__, "exec"), namespace)
    return muon_module, namespace["_zeropower_via_newtonschulz"]


@pytest.mark.parametrize("config", CONFIGS[:3], ids=["defaults", "plain momentum", "match_rms_adamw"])
def test_muon_with_newton_schulz_in_f32_steps_as_torchs_iteration_in_f32(config, monkeypatch):
    # state_dtype={"o": torch.float32}: the kernel set "f32:o=f32", products in fp32 (cublasLt, 32F).
    Muon = reference()
    muon_module, f32_iteration = _torch_newton_schulz_in_f32()
    assert not torch.backends.cuda.matmul.allow_tf32
    ours_p, theirs_p, bf16_p = make_params(1), make_params(1), make_params(1)
    ours = ot.Muon(ours_p, state_dtype={"o": torch.float32}, **config)
    bf16 = ot.Muon(bf16_p, **config)
    theirs = Muon(theirs_p, **config)
    monkeypatch.setattr(muon_module, "_zeropower_via_newtonschulz", f32_iteration)
    apart = 0.0  # the bf16 iteration's distance from torch's f32 one, in units of the f32 bound
    for step in range(STEPS):
        for p, q, r, g in zip(ours_p, theirs_p, bf16_p, gradients(step)):
            p.grad, q.grad, r.grad = g.clone(), g.clone(), g.clone()
        ours.step()
        theirs.step()
        bf16.step()
        for i, (p, q, r) in enumerate(zip(ours_p, theirs_p, bf16_p)):
            # Sums in another order only: a hundredth of the bf16 test's bound (less its 1e-6 for the
            # params' own rounding, which torch's two in-place updates round apart from our one).
            tight = (bound(config, p.shape, step + 1) - 1e-6) / 100 + 1e-6
            worst = (p - q).abs().max().item()
            assert worst <= tight, f"param {i} {tuple(p.shape)} after step {step + 1}: {worst} > {tight}"
            apart = max(apart, (r - q).abs().max().item() / tight)
    assert apart > 1, "the bf16 iteration is as close to torch's f32 one as the f32 iteration: no f32 ran"
    assert ours.engine.state_dtypes == bf16.engine.state_dtypes  # the momentum stays float32
