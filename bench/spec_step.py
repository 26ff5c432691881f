#!/usr/bin/env python3
"""GPU time of a step of any spec (optgen.torch.Optimizer.from_spec) on real models' parameter
shapes, against the floor its bytes set at the device's copy rate.

For each workload (bench/workloads/<name>.json), f32 params and persistent gradients: CUDA-event time
per step over --steps back-to-back steps (the median of --reps repetitions), and the floor: the
step's bytes per parameter (--bytes-per-param: what the spec's plan reads and writes per element,
stated by the caller) times the parameters, at the copy rate torch's device-to-device copy of
1 GiB reaches in the same process (read + write bytes per second).

    python3 bench/spec_step.py --spec tests/specs/block_adam.yaml --bytes-per-param 24
"""

import argparse
import json
import pathlib
import statistics

import torch

import optgen.torch as ot

REPO = pathlib.Path(__file__).resolve().parents[1]


def shapes_of(name):
    return [tuple(s) for s in json.loads((REPO / "bench" / "workloads" / f"{name}.json").read_text())["shapes"]]


def timed(fn, steps, reps):
    """The median over `reps` of the mean event time of `steps` calls of fn, in microseconds."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1000 / steps)
    return statistics.median(times)


def copy_rate(steps, reps):
    """Bytes read and written per second by a device-to-device copy of 1 GiB."""
    src = torch.empty(1 << 28, device="cuda")
    dst = torch.empty_like(src)
    us = timed(lambda: dst.copy_(src), steps, reps)
    return 2 * src.numel() * 4 / (us * 1e-6)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", required=True, help="the spec's YAML file")
    parser.add_argument("--bytes-per-param", type=float, required=True,
                        help="bytes the step reads and writes per parameter (its floor)")
    parser.add_argument("--workloads", nargs="+", default=["gpt2", "llama-1b"])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    rate = copy_rate(args.steps, args.reps)
    print(f"{torch.cuda.get_device_name()}: copy {rate / 1e12:.2f} TB/s; {args.spec}, "
          f"{args.bytes_per_param:g} bytes per parameter")
    for name in args.workloads:
        g = torch.Generator(device="cuda").manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(s, generator=g, device="cuda")) for s in shapes_of(name)]
        for p in params:
            p.grad = torch.randn(p.shape, generator=g, device="cuda") * 1e-3
        opt = ot.Optimizer.from_spec(args.spec, params, static_grads=True)
        us = timed(opt.step, args.steps, args.reps)
        numel = sum(p.numel() for p in params)
        floor = numel * args.bytes_per_param / rate * 1e6
        print(f"{name}: {numel} params, {us:.1f} us a step, floor {floor:.1f} us: {100 * floor / us:.0f}% of it")
        del opt, params
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
