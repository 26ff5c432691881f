"""8-bit blockwise states through optgen.Engine (C ABI 6) on a GPU: bitsandbytes' AdamW8bit
storage, engine-allocated states read with Engine.state_buffer and decoded with the maps that
tests/record_blockwise8_maps.py computes, against torch's AdamW on the same params."""

import math
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")
from optgen import Engine  # noqa: E402
from optgen._capi import BF16, F32, Q8, UQ8, Storage, TensorBinding  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import record_blockwise8_maps as maps  # noqa: E402

pytestmark = pytest.mark.gpu
SHAPES = [(300, 257), (4095,), (4096,), (33, 17)]  # 8-bit from 4096 elements (bitsandbytes' min_8bit_size)
HYPER = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}


def read(engine, name, tensor):
    """Tensor `tensor` of group 0's state `name`, decoded to float32, and its stored dtype."""
    buf = engine.state_buffer(name, 0, tensor)
    raw = torch.empty(buf.bytes, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    raw.copy_(torch.as_tensor(_Device(buf.address, buf.bytes), device="cuda"))
    if buf.dtype == F32:
        return raw.view(torch.float32)[:buf.numel], buf
    qmap = torch.tensor(maps.dynamic_map(buf.dtype == Q8), device="cuda")
    absmax = raw[buf.absmax_offset:].view(torch.float32)
    return qmap[raw[:buf.numel].long()] * absmax.repeat_interleave(256)[:buf.numel], buf


class _Device:
    """`bytes` bytes of device memory at `address`, for torch.as_tensor (__cuda_array_interface__)."""

    def __init__(self, address, size):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False), "version": 3}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_adamw8bit_states_follow_torch_adamw_within_a_code(dtype):
    g = torch.Generator(device="cuda").manual_seed(3)
    params = [torch.randn(s, generator=g, device="cuda").to(dtype) for s in SHAPES]
    reference = [p.float().clone().requires_grad_() for p in params]
    engine = Engine.builtin("adamw", HYPER, storage=Storage(Q8, {"exp_avg_sq": UQ8}))
    grads = [torch.empty_like(p) for p in params]
    engine.add_param_group([TensorBinding(p.data_ptr(), gr.data_ptr(), p.numel(), F32 if dtype == torch.float32
                                          else BF16) for p, gr in zip(params, grads)], HYPER)
    engine.prepare(torch.cuda.current_stream().cuda_stream)
    torch_adamw = torch.optim.AdamW(reference, lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]),
                                    eps=HYPER["eps"], weight_decay=HYPER["weight_decay"])
    for step in range(3):
        for gr, r in zip(grads, reference):
            r.grad = torch.randn(r.shape, generator=g, device="cuda") * 1e-2
            gr.copy_(r.grad.to(dtype))
            r.grad = gr.float()
        engine.step(torch.cuda.current_stream().cuda_stream)
        torch_adamw.step()
    torch.cuda.synchronize()
    for i, (p, r) in enumerate(zip(params, reference)):
        n = p.numel()
        for name, signed in (("exp_avg", True), ("exp_avg_sq", False)):
            ours, buf = read(engine, name, i)
            theirs = torch_adamw.state[r][name].flatten()
            assert buf.numel == n
            if n < 4096:
                assert buf.dtype == F32 and buf.bytes == 4 * n  # bitsandbytes keeps small tensors in fp32
                torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-9)
                continue
            assert buf.dtype == (Q8 if signed else UQ8)
            assert buf.bytes == (n + 15) // 16 * 16 + 4 * math.ceil(n / 256)  # codes, then an absmax per block
            # Within one code of the state's block: the map's widest gap is 0.9 / 64 of the absmax
            # (signed) and 0.9 / 128 (unsigned); three steps of rounding, each within half a gap.
            blocks = theirs.abs().reshape(-1)
            block_max = torch.nn.functional.pad(blocks, (0, -n % 256)).reshape(-1, 256).amax(1)
            allowed = 3 * 0.5 * (0.9 / (64 if signed else 128)) * block_max.repeat_interleave(256)[:n] * 1.05
            assert ((ours - theirs).abs() <= allowed + 1e-30).all(), f"tensor {i} {name}"
        # The params move as torch's (three steps of about lr each), to within what the quantised
        # moments change, and bf16 params within their rounding (half an ulp a step).
        allowed = 0.3 * 3 * HYPER["lr"] + (3 * 2.0 ** -8 * r.detach().abs() if dtype == torch.bfloat16 else 0.0)
        assert ((r.detach() - p.float()).abs() <= allowed).all(), f"param {i}"
