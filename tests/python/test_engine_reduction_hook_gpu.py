"""The reduction hook through optgen.Engine (C ABI 8) on one GPU: what a hook is handed (each Reduce
stage's reductions and their results in device memory), that the stages after it read what it
leaves, that a shard's whole_numel is what the spec's mean counts, and that a hook's exception
comes out of step(). tests/python/test_torch_ranks_gpu.py uses it across two GPUs."""

import pytest

torch = pytest.importorskip("torch")
from optgen import Engine, OptgenError, Reduction  # noqa: E402
from optgen._capi import F32, TensorBinding  # noqa: E402

pytestmark = pytest.mark.gpu
SHAPES = [(300, 257), (4097,), (1,)]


def _bind(engine, params, grads, hyper, whole=1):
    engine.add_param_group([TensorBinding(p.data_ptr(), g.data_ptr(), p.numel(), F32,
                                          whole_numel=whole * p.numel() if whole != 1 else 0)
                            for p, g in zip(params, grads)], hyper)


def _problem(seed=7):
    g = torch.Generator(device="cuda").manual_seed(seed)
    params = [torch.randn(s, generator=g, device="cuda") for s in SHAPES]
    grads = [torch.randn(s, generator=g, device="cuda") for s in SHAPES]
    return params, grads


def test_the_hook_sees_each_stage_and_its_results():
    params, grads = _problem()
    start = [p.double().clone() for p in params]
    engine = Engine.builtin("lamb")
    _bind(engine, params, grads, {"weight_decay": 0.1})
    seen = []

    def hook(r):
        torch.cuda.current_stream().synchronize()  # the stage's results are written on r.stream
        n = r.num_tensors
        results = torch.as_tensor(_Doubles(r.tensor_results, len(r.reductions) * n), device="cuda").clone()
        seen.append((r.stage, list(r.reductions), results.view(len(r.reductions), n)))

    engine.set_reduction_hook(hook)
    engine.step(torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert [s for s, _, _ in seen] == [1]  # LAMB: one Reduce stage (both norms), then the update
    stage, reductions, results = seen[0]
    assert all(isinstance(x, Reduction) and x.stage == 1 and not x.is_max and not x.over_group for x in reductions)
    assert len(reductions) == 2
    assert [x.name for x in reductions] == ["sum_param_times_param", "sum_u_times_u"]
    # The kernel squares in float and sums in double.
    torch.testing.assert_close(results[0], torch.stack([(p * p).sum() for p in start]), rtol=1e-6, atol=0)


def test_stages_read_what_the_hook_leaves_and_means_count_whole_numel():
    """Two ranks holding the same shard, each half of a tensor of twice its elements: a hook that
    doubles every sum (as an all-reduce of the two would) and whole_numel = 2 * numel step exactly
    as one whole tensor (a mean: twice the sum over twice the elements)."""
    hyper = {"lr": 1e-2}
    runs = []
    for doubled in (False, True, None):  # None: whole_numel doubled, but no hook
        params, grads = _problem()
        engine = Engine.builtin("cautious_adamw")
        _bind(engine, params, grads, hyper, whole=1 if doubled is False else 2)
        if doubled:
            def hook(r):
                n = len(r.reductions) * r.num_tensors
                results = torch.as_tensor(_Doubles(r.tensor_results, n), device="cuda")
                with torch.cuda.stream(torch.cuda.ExternalStream(r.stream)):
                    for i, x in enumerate(r.reductions):
                        if x.stage == r.stage:
                            results[i * r.num_tensors:(i + 1) * r.num_tensors] *= 2
            engine.set_reduction_hook(hook)
        for _ in range(3):
            engine.step(torch.cuda.current_stream().cuda_stream)
        runs.append(params)
    torch.cuda.synchronize()
    whole, doubled, unhooked = runs
    for a, b in zip(whole, doubled):
        assert torch.equal(a, b)
    assert not all(torch.equal(a, b) for a, b in zip(whole, unhooked))  # half the mean without the hook


def test_a_hook_exception_comes_out_of_step():
    params, grads = _problem()
    engine = Engine.builtin("adamw")
    _bind(engine, params, grads, {"max_grad_norm": 1.0})

    def hook(r):
        raise KeyError("from the hook")

    engine.set_reduction_hook(hook)
    with pytest.raises(KeyError, match="from the hook") as raised:
        engine.step(torch.cuda.current_stream().cuda_stream)
    assert isinstance(raised.value.__cause__, OptgenError)
    assert "reduction hook failed after Reduce stage 1" in str(raised.value.__cause__)
    engine.set_reduction_hook(None)
    engine.step(torch.cuda.current_stream().cuda_stream)  # steps again without it
    torch.cuda.synchronize()


def test_a_hook_of_a_spec_with_columns_gets_the_runs_a_shard_of_rows_holds_part_of():
    # Adafactor on half the rows of a 600 x 257 matrix: each column's sum is this rank's part.
    g = torch.Generator(device="cuda").manual_seed(3)
    param, grad = (torch.randn(300, 257, generator=g, device="cuda") for _ in range(2))
    before = param.clone()
    engine = Engine.builtin("adafactor")
    engine.add_param_group([TensorBinding(param.data_ptr(), grad.data_ptr(), param.numel(), F32, shape=(300, 257),
                                          whole_numel=2 * param.numel())], {})
    seen = []
    engine.set_reduction_hook(lambda r: seen.append((r.row_runs, r.col_runs)))
    stream = torch.cuda.current_stream().cuda_stream
    engine.prepare(stream)
    engine.step(stream)
    torch.cuda.synchronize()
    assert seen and all(rows == [] for rows, _ in seen)  # whole rows: their sums are this rank's own
    assert sum(count for _, cols in seen for _, count in cols) == 257
    assert not torch.equal(param, before)


class _Doubles:
    def __init__(self, address, count):
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": "<f8", "data": (address, False), "version": 2}
