#!/usr/bin/env python3
"""8-bit AdamW side by side: optgen against bitsandbytes and torchao, on the same tensors.

optgen's AdamW with bitsandbytes' 8-bit blockwise states (storage f32:q8:exp_avg_sq=uq8, or
bf16:q8:exp_avg_sq=uq8 for bf16 params: the signed dynamic map for exp_avg, the unsigned one for
exp_avg_sq, a float absmax per block of 256, tensors under 4096 elements in fp32) is timed beside,
in one process, on the same CUDA parameters and gradients of each workload (bench/workloads):

  optgen8       optgen_adamw_create with that storage, one optgen_step per step (ctypes)
  optgen32      optgen's AdamW with fp32 states, for reference
  bnb           bitsandbytes.optim.AdamW8bit (blockwise, min_8bit_size 4096: the same format)
  torchao       torchao.optim.AdamW8bit (block 256, its own map; a torch.compile'd step per param)
  fused         torch.optim.AdamW(fused=True), fp32 states

lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01. Reported per method: µs per step (median
of --reps repetitions of --steps steps, CUDA events around a Python loop), the optimizer state's
device memory per parameter (torch.cuda.memory_allocated after the first step against before it:
what the optimizer keeps; optgen allocates its states itself, so for it the bytes that
optgen_state_buffer reports), and for optgen8 its floor: the bytes it must move (param read and
written, grad read, each 8-bit state's code read and written plus 4 bytes of absmax per 256
elements; fp32 states for tensors under 4096 elements) at the measured copy bandwidth.

A cross-check first: 5 steps of optgen8 and of bnb from identical params and gradients; printed are
the largest difference of the params (relative to the largest param change of fp32 AdamW over the
same steps) and of the dequantized states. Markdown goes to stdout, JSON to --out. A method whose
package is missing is reported as n/a. The library path and workload folder default as
torch_compare.py's do.
"""

import argparse
import ctypes
import json
import math
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_compare as tc  # noqa: E402  (the ctypes layer, workloads, timing, copy bandwidth)

OPTGEN_BF16, OPTGEN_Q8, OPTGEN_UQ8 = 1, 3, 4  # optgen/c_api.h
METHODS = ["optgen8", "optgen32", "bnb", "torchao", "fused"]
HYPER = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}
MIN_8BIT = 4096  # bitsandbytes' min_8bit_size; optgen's blockwise8::kMin8bitSize
BLOCK = 256


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", default=["ghostnet_100", "resnet50", "gpt2", "llama-1b"])
    p.add_argument("--workload-dir", default=None)
    p.add_argument("--param-dtypes", nargs="+", default=["f32", "bf16"], choices=["f32", "bf16"])
    p.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--lib", default="build/specs/liboptgen_builtin.so")
    p.add_argument("--out", default="compare_8bit.json")
    args = p.parse_args(argv)
    args.workload_dir = os.path.abspath(args.workload_dir) if args.workload_dir else tc.default_workload_dir()
    args.lib = tc.resolve(args.lib)
    return args


class Optgen8(tc.Optgen):
    """torch_compare's ctypes layer, with params of either dtype and optgen_state_buffer."""

    def __init__(self, path):
        super().__init__(path, ["adamw"])
        P = ctypes.POINTER
        fn = self.lib.optgen_state_buffer
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, P(ctypes.c_void_p),
                       P(ctypes.c_int64), P(ctypes.c_int32), P(ctypes.c_size_t)]

    def add_param_group(self, handle, params):
        import torch
        tensors = (tc.OptgenTensor * len(params))()
        codes = {torch.float32: tc.OPTGEN_F32, torch.bfloat16: OPTGEN_BF16}
        for t, p in zip(tensors, params):
            t.param, t.grad = p.data_ptr(), p.grad.data_ptr()
            t.numel = t.grad_numel = p.numel()
            t.dtype = t.grad_dtype = codes[p.dtype]
            t.states = None
        group = ctypes.c_size_t()
        self.check(self.lib.optgen_add_param_group(handle, tensors, len(params), None, None, 0, ctypes.byref(group)),
                   "optgen_add_param_group")

    def state_bytes(self, handle, count):
        """Bytes of the states of `count` tensors of group 0: optgen allocates them itself (not
        through torch's allocator), so memory_allocated does not see them."""
        total = 0
        for tensor in range(count):
            for name in ("exp_avg", "exp_avg_sq"):
                data, size = ctypes.c_void_p(), ctypes.c_size_t()
                self.check(self.lib.optgen_state_buffer(handle, name.encode(), 0, tensor, ctypes.byref(data), None,
                                                        None, ctypes.byref(size)), "optgen_state_buffer")
                total += size.value
        return total

    def state(self, handle, name, tensor, numel, qmap):
        """A state of tensor `tensor` as float32: an 8-bit one decoded with `qmap` (its map, a
        float32 CUDA tensor of 256 values)."""
        import torch
        data, n, dtype, size = ctypes.c_void_p(), ctypes.c_int64(), ctypes.c_int32(), ctypes.c_size_t()
        self.check(self.lib.optgen_state_buffer(handle, name.encode(), 0, tensor, ctypes.byref(data), ctypes.byref(n),
                                                ctypes.byref(dtype), ctypes.byref(size)), "optgen_state_buffer")
        raw = torch.empty(size.value, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        cuda = ctypes.CDLL("libcuda.so.1")
        if size.value and cuda.cuMemcpyDtoD_v2(ctypes.c_uint64(raw.data_ptr()), ctypes.c_uint64(data.value),
                                               ctypes.c_size_t(size.value)) != 0:
            raise RuntimeError("cuMemcpyDtoD failed")
        if dtype.value == tc.OPTGEN_F32:
            return raw.view(torch.float32)[:numel].clone()
        absmax = raw[(numel + 15) // 16 * 16:].view(torch.float32)  # blockwise8::absmax_offset
        return qmap[raw[:numel].long()] * absmax.repeat_interleave(BLOCK)[:numel]


def storage_struct():
    """bitsandbytes' AdamW8bit states: exp_avg q8, exp_avg_sq uq8 (the params bring their dtype)."""
    s = tc.OptgenStorage()
    s.state_dtype = OPTGEN_Q8
    names = (ctypes.c_char_p * 1)(b"exp_avg_sq")
    dtypes = (ctypes.c_int32 * 1)(OPTGEN_UQ8)
    s.num_state_dtypes, s.state_names, s.state_dtypes = 1, names, dtypes
    s._keep = (names, dtypes)  # the arrays live as long as the struct
    return s


def make_params(shapes, dtype, seed):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    params = []
    for shape in shapes:
        p = torch.nn.Parameter((torch.randn(shape, device="cuda", generator=g) * 0.02).to(dtype))
        p.grad = (torch.randn(shape, device="cuda", generator=g) * 1e-3).to(dtype)
        params.append(p)
    return params


def setup(method, ctx, params):
    """(step, cleanup) for one method on `params`."""
    import torch
    og = ctx["optgen"]
    if method in ("optgen8", "optgen32"):
        handle = og.create("adamw", HYPER, storage_struct() if method == "optgen8" else None)
        og.add_param_group(handle, params)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        step_fn, check = og.lib.optgen_step, og.check

        def step():
            rc = step_fn(handle, stream)
            if rc != 0:
                check(rc, "optgen_step")

        return step, lambda: og.destroy(handle), handle
    kwargs = dict(lr=HYPER["lr"], betas=(HYPER["beta1"], HYPER["beta2"]), eps=HYPER["eps"],
                  weight_decay=HYPER["weight_decay"])
    if method == "bnb":
        try:
            import bitsandbytes as bnb
        except ImportError as e:
            raise tc.NotSupported(f"bitsandbytes: {e}") from e
        opt = bnb.optim.AdamW8bit(params, min_8bit_size=MIN_8BIT, **kwargs)
    elif method == "torchao":
        try:
            from torchao.optim import AdamW8bit
        except ImportError as e:
            raise tc.NotSupported(f"torchao: {e}") from e
        opt = AdamW8bit(params, block_size=BLOCK, **kwargs)
    elif method == "fused":
        opt = torch.optim.AdamW(params, fused=True, **kwargs)
    else:
        raise ValueError(method)
    return opt.step, lambda: None, opt


def floor_bytes(shapes, param_bytes):
    """Bytes optgen8's step must move."""
    total = 0.0
    for shape in shapes:
        n = math.prod(shape)
        state = 2 * (1 + 4 / BLOCK) if n >= MIN_8BIT else 2 * 4  # each state read and written
        total += n * (3 * param_bytes + 2 * state)
    return total


def cross_check(ctx, shapes, dtype):
    """optgen8 against bnb over 5 steps, from identical params and gradients."""
    import torch
    base = make_params(shapes, dtype, seed=7)
    runs = {}
    for method in ("optgen8", "bnb", "fused"):
        params = [torch.nn.Parameter(p.detach().clone()) for p in base]
        for p, b in zip(params, base):
            p.grad = b.grad.clone()
        step, cleanup, handle = setup(method, ctx, params)
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        runs[method] = (params, handle, cleanup)
    change = max((p.float() - b.float()).abs().max().item() for p, b in zip(runs["fused"][0], base))
    param_diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(runs["optgen8"][0], runs["bnb"][0]))
    state_diff = {}
    og = ctx["optgen"]
    bnb_opt = runs["bnb"][1]
    for i, p in enumerate(runs["bnb"][0]):
        st = bnb_opt.state[p]
        for ours, theirs, n in (("exp_avg", "state1", "1"), ("exp_avg_sq", "state2", "2")):
            qmap = st.get("qmap" + n)  # none for a tensor under min_8bit_size: fp32 states
            mine = og.state(runs["optgen8"][1], ours, i, p.numel(), qmap)
            if p.numel() >= MIN_8BIT:
                other = qmap[st[theirs].flatten().long()] * st["absmax" + n].repeat_interleave(BLOCK)[:p.numel()]
            else:
                other = st[theirs].flatten().float()
            scale = max(other.abs().max().item(), 1e-30)
            state_diff[ours] = max(state_diff.get(ours, 0.0), (mine - other).abs().max().item() / scale)
    for _, _, cleanup in runs.values():
        cleanup()
    tc.free_memory()
    return {"param_diff_over_change": param_diff / max(change, 1e-30), "state_diff_over_absmax": state_diff}


def measure(ctx, method, shapes, dtype, args):
    import torch
    tc.free_memory()
    params = make_params(shapes, dtype, seed=1)
    before = torch.cuda.memory_allocated()
    step, cleanup, handle = setup(method, ctx, params)
    try:
        step()
        torch.cuda.synchronize()
        state_bytes = torch.cuda.memory_allocated() - before
        if method.startswith("optgen"):
            state_bytes = ctx["optgen"].state_bytes(handle, len(params))
        r = tc.time_steps(step, args.steps, args.reps, 5 if method == "torchao" else 2, method == "torchao")
        r["state_bytes"] = state_bytes
        return r
    finally:
        cleanup()
        del params
        tc.free_memory()


def main(argv=None):
    args = parse_args(argv)
    import torch
    ctx = {"optgen": Optgen8(args.lib)}
    copy = tc.measure_copy_bandwidth(2.0)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, copy bandwidth {copy:.2f} TB/s")
    versions = {}
    for name in ("bitsandbytes", "torchao"):
        try:
            versions[name] = __import__(name).__version__
        except Exception as e:  # reported, not fatal: its method is n/a
            versions[name] = f"n/a ({type(e).__name__}: {e})"
    print("versions:", versions)
    results = []
    for wname in args.workloads:
        w = tc.load_workload(args.workload_dir, wname)
        for dname in args.param_dtypes:
            dtype = torch.float32 if dname == "f32" else torch.bfloat16
            row = {"workload": w["name"], "params": w["parameters"], "tensors": w["tensors"], "param_dtype": dname}
            try:
                row["check"] = cross_check(ctx, w["shapes"], dtype)
            except Exception as e:
                row["check"] = f"failed: {type(e).__name__}: {e}"
                traceback.print_exc()
            floor_us = floor_bytes(w["shapes"], 4 if dname == "f32" else 2) / (copy * 1e12) * 1e6
            row["floor_us"] = floor_us
            for method in args.methods:
                try:
                    row[method] = measure(ctx, method, w["shapes"], dtype, args)
                except tc.NotSupported as e:
                    row[method] = {"n/a": str(e)}
                except Exception as e:
                    row[method] = {"error": f"{type(e).__name__}: {e}"}
                    traceback.print_exc()
            results.append(row)
            with open(args.out, "w") as f:
                json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "versions": versions,
                           "copy_tbps": copy, "results": results}, f, indent=1)
            print_row(row)
    print()
    print("| workload | params | method | µs/step | B/param of state | vs optgen8 | optgen8 of floor |")
    print("|---|---|---|---|---|---|---|")
    for row in results:
        ours = row.get("optgen8", {}).get("us_per_step")
        for method in args.methods:
            r = row[method]
            if "us_per_step" not in r:
                print(f"| {row['workload']} | {row['param_dtype']} | {method} | {next(iter(r.values()))[:60]} | | | |")
                continue
            ratio = f"{r['us_per_step'] / ours:.2f}x" if ours else ""
            share = f"{row['floor_us'] / ours:.0%}" if method == "optgen8" and ours else ""
            print(f"| {row['workload']} | {row['param_dtype']} | {method} | {r['us_per_step']:.1f} | "
                  f"{r['state_bytes'] / row['params']:.3f} | {ratio} | {share} |")


def print_row(row):
    print(f"== {row['workload']} {row['param_dtype']}: floor {row['floor_us']:.1f} us; check {row['check']}")
    for m in METHODS:
        if m in row:
            r = row[m]
            print(f"   {m}: " + (f"{r['us_per_step']:.1f} us, state {r['state_bytes'] / row['params']:.3f} B/param"
                                 if "us_per_step" in r else str(r)), flush=True)


if __name__ == "__main__":
    main()
