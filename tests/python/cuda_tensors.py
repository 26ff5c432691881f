"""Seeded CUDA tensors for the GPU tests: parameters of given shapes and their gradients at each
step, drawn in f32 from torch's CUDA generator, so that a test's two sides (optgen and torch, or a
run and its resumed copy) start from the same values. Imported by the `gpu` tests after
pytest.importorskip("torch")."""

import torch


def make_params(shapes, seed, dtype=torch.float32):
    """Parameters of `shapes`, drawn in f32 from a generator seeded with `seed`, cast to `dtype`."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, generator=g, device="cuda").to(dtype)) for s in shapes]


def gradients(params, step, *, seed=1000, scale=1.0):
    """Gradients at `step` for `params` (parameters, each gradient in its dtype, or shapes, in f32):
    drawn in f32 from a generator seeded with `seed` + `step`, times `scale`."""
    g = torch.Generator(device="cuda").manual_seed(seed + step)
    grads = []
    for p in params:
        shape, dtype = (p.shape, p.dtype) if isinstance(p, torch.Tensor) else (p, torch.float32)
        grads.append((torch.randn(shape, generator=g, device="cuda") * scale).to(dtype))
    return grads
