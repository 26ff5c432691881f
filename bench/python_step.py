#!/usr/bin/env python3
"""The cost of optgen.torch's Python layer: host time of optimizer.step() and GPU time per step.

For each workload (bench/workloads/<name>.json: the parameter shapes of a real model, or
"many-10000": 10,000 tensors of 64 to 4096 elements), AdamW with f32 params and persistent
gradients (as a training loop that zeroes in place keeps them):
- host: wall time of one step() call on the host, no synchronization (median of --steps calls,
  the GPU drained every 10 calls outside the timing so the launch queue never fills);
- gpu: CUDA-event time per step over --steps back-to-back steps;
- host, new grads: host time of step() in the usual loop, where each step's gradients are new
  tensors that autograd made (zero_grad(set_to_none=True), then a backward pass, untimed, with
  the GPU drained before the step).
Methods: optgen.torch.AdamW (default: every .grad checked), optgen.torch.AdamW(static_grads=True),
and torch.optim.AdamW(fused=True). Compare "gpu" with optgen_bench's C++ figure for the same
workload to see what Python adds on the device (nothing but the launch itself).

    python3 bench/python_step.py --out python_step.json
"""

import argparse
import json
import pathlib
import statistics
import time

import torch

import optgen.torch as ot

REPO = pathlib.Path(__file__).resolve().parents[1]


def shapes_of(name):
    if name == "many-10000":
        g = torch.Generator().manual_seed(0)
        return [(int(n),) for n in torch.randint(64, 4097, (10000,), generator=g)]
    return [tuple(s) for s in json.loads((REPO / "bench" / "workloads" / f"{name}.json").read_text())["shapes"]]


def make(shapes):
    params = [torch.nn.Parameter(torch.randn(s, device="cuda") * 0.01) for s in shapes]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    return params


METHODS = {
    "optgen": lambda params: ot.AdamW(params, lr=1e-3, weight_decay=0.01),
    "optgen static_grads": lambda params: ot.AdamW(params, lr=1e-3, weight_decay=0.01, static_grads=True),
    "torch fused": lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=True),
}


def measure(optimizer, steps):
    for _ in range(5):
        optimizer.step()
    torch.cuda.synchronize()
    host = []
    for i in range(steps):
        if i % 10 == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        optimizer.step()
        host.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        optimizer.step()
    end.record()
    torch.cuda.synchronize()
    return statistics.median(host) * 1e6, start.elapsed_time(end) * 1e3 / steps


def measure_new_grads(optimizer, params, steps):
    """Median host time of step() when autograd has just made every gradient anew."""
    incoming = [p.grad.detach().clone() for p in params]
    host = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        torch.autograd.backward(params, incoming)  # each .grad a new tensor (static_grads: accumulated in place)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        optimizer.step()
        host.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(host) * 1e6


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workloads", nargs="+", default=["many-10000", "ghostnet_100", "gpt2"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", default=None, help="JSON results")
    args = parser.parse_args()
    results = []
    print(f"{'workload':<14} {'method':<22} {'host us/step':>13} {'gpu us/step':>12} {'host us, new grads':>19}")
    for workload in args.workloads:
        shapes = shapes_of(workload)
        for method in args.methods:
            params = make(shapes)
            optimizer = METHODS[method](params)
            host, gpu = measure(optimizer, args.steps)
            host_new = measure_new_grads(optimizer, params, args.steps)
            results.append(dict(workload=workload, tensors=len(shapes), method=method, host_us=host, gpu_us=gpu,
                                host_new_grads_us=host_new))
            print(f"{workload:<14} {method:<22} {host:>13.1f} {gpu:>12.1f} {host_new:>19.1f}", flush=True)
            del params, optimizer
            torch.cuda.empty_cache()
    if args.out:
        pathlib.Path(args.out).write_text(json.dumps(dict(device=torch.cuda.get_device_name(),
                                                          torch=torch.__version__, results=results), indent=1))


if __name__ == "__main__":
    main()
