"""Launch shape and chunk size through optgen.Engine (C ABI 7) on a GPU: another shape, compiled by
NVRTC, and another chunk size step the same tensors to the same bits."""

import pytest

torch = pytest.importorskip("torch")
from optgen import Engine  # noqa: E402
from optgen._capi import F32, TensorBinding  # noqa: E402

pytestmark = pytest.mark.gpu
SHAPES = [(300, 257), (4097,), (33, 17)]
HYPER = {"lr": 1e-3, "weight_decay": 0.01}


def test_another_launch_shape_and_chunk_size_give_the_same_steps():
    g = torch.Generator(device="cuda").manual_seed(7)
    start = [torch.randn(s, generator=g, device="cuda") for s in SHAPES]
    grads = [torch.empty_like(p) for p in start]
    runs = []
    for shaped in (False, True):
        params = [p.clone() for p in start]
        engine = Engine.builtin("adamw", HYPER)
        engine.add_param_group([TensorBinding(p.data_ptr(), gr.data_ptr(), p.numel(), F32)
                                for p, gr in zip(params, grads)], HYPER)
        if shaped:
            engine.set_launch_shape(64, 4)
            engine.set_chunk_size(1024)
        runs.append((engine, params))
    stream = torch.cuda.current_stream().cuda_stream
    for step in range(3):
        for gr in grads:
            gr.copy_(torch.randn(gr.shape, generator=g, device="cuda"))
        for engine, _ in runs:
            engine.step(stream)
    torch.cuda.synchronize()
    (default, default_params), (shaped, shaped_params) = runs
    assert shaped.launch_shape(0) == (64, 4)
    assert shaped.chunk_size(0) == 1024
    assert default.launch_shape(0) != (64, 4)
    for a, b in zip(default_params, shaped_params):
        assert torch.equal(a, b)
    assert not torch.equal(default_params[0], start[0])  # the steps moved the params
