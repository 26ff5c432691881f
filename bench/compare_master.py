#!/usr/bin/env python3
"""AdamW with an fp32 master copy of bf16 params, side by side with torch's fused AdamW.

optgen's AdamW with storage bf16+master (bf16 params and gradients; the update runs on an fp32
master copy of each param, with fp32 states, and writes the bf16 param from it) is timed beside,
in one process, on the same workload shapes (bench/workloads):

  optgen_master   optgen_adamw_create with param_write MASTER, bf16 params (the master copy is
                  optgen's, made from the params at the first step)
  optgen_f32      optgen's AdamW on fp32 params, fp32 states
  fused_f32       torch.optim.AdamW(fused=True) on fp32 params: the same update on the same
                  values as optgen_master's master copy (torch has no master copy for bf16 params)
  fused_bf16      torch.optim.AdamW(fused=True) on bf16 params: states in bf16 too (torch keeps
                  states in the param's dtype)

lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01. Reported per method: µs per step (median
of --reps repetitions of --steps steps, CUDA events around a Python loop) and its share of its
floor, the bytes a step must move at the measured copy bandwidth: optgen_master 28 per parameter
(the master read and written, 8; the bf16 param written, 2; the bf16 grad read, 2; two fp32 states
read and written, 16), f32 AdamW 28 (param, grad, states), bf16 AdamW with bf16 states 14.
Markdown goes to stdout, JSON to --out. The library path and workload folder default as
torch_compare.py's do.
"""

import argparse
import ctypes
import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_8bit as c8  # noqa: E402  (params of either dtype through the C ABI)
import torch_compare as tc  # noqa: E402  (workloads, timing, copy bandwidth)

OPTGEN_PARAM_MASTER = 1  # optgen/c_api.h
METHODS = ["optgen_master", "optgen_f32", "fused_f32", "fused_bf16"]
# Bytes a step moves per parameter (the floors): see the docstring.
FLOOR_BYTES = {"optgen_master": 28, "optgen_f32": 28, "fused_f32": 28, "fused_bf16": 14}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", default=["gpt2", "bert-base", "llama-1b"])
    p.add_argument("--workload-dir", default=None)
    p.add_argument("--methods", nargs="+", default=METHODS, choices=METHODS)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--lib", default="build/specs/liboptgen_builtin.so")
    p.add_argument("--out", default="compare_master.json")
    args = p.parse_args(argv)
    args.workload_dir = os.path.abspath(args.workload_dir) if args.workload_dir else tc.default_workload_dir()
    args.lib = tc.resolve(args.lib)
    return args


def master_storage():
    """fp32 states, an fp32 master copy of each bf16 param."""
    s = tc.OptgenStorage()
    s.param_write = OPTGEN_PARAM_MASTER
    return s


def setup(method, og, params):
    """(step, cleanup) for one method on `params`."""
    import torch
    if method.startswith("optgen"):
        handle = og.create("adamw", c8.HYPER, master_storage() if method == "optgen_master" else None)
        og.add_param_group(handle, params)
        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        step_fn, check = og.lib.optgen_step, og.check

        def step():
            rc = step_fn(handle, stream)
            if rc != 0:
                check(rc, "optgen_step")

        return step, lambda: og.destroy(handle)
    opt = torch.optim.AdamW(params, fused=True, lr=c8.HYPER["lr"], betas=(c8.HYPER["beta1"], c8.HYPER["beta2"]),
                            eps=c8.HYPER["eps"], weight_decay=c8.HYPER["weight_decay"])
    return opt.step, lambda: None


def measure(og, method, shapes, args):
    import torch
    tc.free_memory()
    dtype = torch.bfloat16 if method in ("optgen_master", "fused_bf16") else torch.float32
    params = c8.make_params(shapes, dtype, seed=1)
    step, cleanup = setup(method, og, params)
    try:
        return tc.time_steps(step, args.steps, args.reps, 2, False)
    finally:
        cleanup()
        del params
        tc.free_memory()


def main(argv=None):
    args = parse_args(argv)
    import torch
    og = c8.Optgen8(args.lib)
    copy = tc.measure_copy_bandwidth(2.0)
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}, copy bandwidth {copy:.2f} TB/s")
    results = []
    for wname in args.workloads:
        w = tc.load_workload(args.workload_dir, wname)
        row = {"workload": w["name"], "params": w["parameters"], "tensors": w["tensors"]}
        for method in args.methods:
            try:
                row[method] = measure(og, method, w["shapes"], args)
                row[method]["floor_us"] = FLOOR_BYTES[method] * w["parameters"] / (copy * 1e12) * 1e6
            except Exception as e:
                row[method] = {"error": f"{type(e).__name__}: {e}"}
                traceback.print_exc()
        results.append(row)
        with open(args.out, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "copy_tbps": copy,
                       "results": results}, f, indent=1)
        print(f"== {row['workload']}: " + ", ".join(
            f"{m} {row[m]['us_per_step']:.1f} us" if "us_per_step" in row[m] else f"{m} {row[m]}" for m in args.methods),
            flush=True)
    print()
    print("| workload | method | params | µs/step | of its floor | vs optgen_master |")
    print("|---|---|---|---|---|---|")
    for row in results:
        ours = row.get("optgen_master", {}).get("us_per_step")
        for method in args.methods:
            r = row[method]
            if "us_per_step" not in r:
                print(f"| {row['workload']} | {method} | | {next(iter(r.values()))[:60]} | | |")
                continue
            kind = "bf16" if method in ("optgen_master", "fused_bf16") else "f32"
            ratio = f"{r['us_per_step'] / ours:.2f}x" if ours else ""
            print(f"| {row['workload']} | {method} | {kind} | {r['us_per_step']:.1f} | "
                  f"{r['floor_us'] / r['us_per_step']:.0%} | {ratio} |")


if __name__ == "__main__":
    main()
