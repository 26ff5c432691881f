#!/usr/bin/env python3
"""optgen.torch.Muon beside torch.optim.Muon: time per step on the hidden matrices of real models.

In one process, for each workload (bench/workloads/<name>.json; default gpt2 and llama-1b), on the
same CUDA parameters and gradients (fp32, N(0, 1)), with torch's default hyperparameters, it times
one optimizer step of:

  optgen        optgen.torch.Muon(hidden).step(), from a Python loop
  optgen_graph  the same step captured once in a torch.cuda.CUDAGraph, replayed
  torch         torch.optim.Muon(hidden).step()

where `hidden` are the workload's 2-D tensors but those with a dimension of 32768 or more (token
embeddings and output heads, which Muon's users step with AdamW), as bench/newton_schulz_bench.cpp
picks them. With --with-adamw it also times the whole model: Muon on `hidden` and AdamW on the rest
(optgen.torch.Muon + optgen.torch.AdamW, and torch.optim.Muon + torch.optim.AdamW(fused=True)),
and AdamW alone on the rest.

The Newton-Schulz FLOPs of a step (ns_steps x (4 m^2 n + 2 m^3) per m x n matrix, m <= n) over the
step's time give the TFLOP/s in the table. The timing is bench/torch_compare.py's time_steps():
the median over --reps repetitions of CUDA-event time around a Python loop of --steps steps, in µs
per step, and the host time per step. optgen's eager step and its replay take their repetitions in
turn, the order reversed each round: a GPU's clock falls as its power rises over a run of products
(1755 to 1665 MHz on an H200), and whichever ran later read up to 5% slower. Markdown to stdout, JSON to --out. It needs torch (2.11 has
torch.optim.Muon), a GPU and the optgen package with its library (PYTHONPATH=python
OPTGEN_LIBRARY=<build>/liboptgen.so).

    python3 bench/torch_muon.py --out muon.json --with-adamw
"""

import argparse
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_compare as tc  # noqa: E402

EMBEDDING = 32768  # a dimension this long marks an embedding or an output head


def ns_flops(shapes, steps=5):
    total = 0
    for a, b in shapes:
        m, n = min(a, b), max(a, b)
        total += steps * (4 * m * m * n + 2 * m ** 3)
    return total


def make(shapes, seed):
    import torch
    g = torch.Generator(device="cuda").manual_seed(seed)
    params = [torch.nn.Parameter(torch.randn(s, generator=g, device="cuda")) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g, device="cuda")
    return params


def idle_host_us(step, calls=50):
    """The median host time of a call of `step` with the GPU idle before it (no queueing counted)."""
    import statistics
    import time
    import torch
    step()
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(times)


def alternated(steps, n, reps):
    """time_steps of each of `steps` (name -> step), one repetition of each in turn, the order
    reversed every round, so that a GPU warming through the run weighs on each alike."""
    import statistics
    gpu, host = {name: [] for name in steps}, {name: [] for name in steps}
    names = list(steps)
    for rep in range(reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            r = tc.time_steps(steps[name], n, 1, 2 if rep == 0 else 1, False)
            gpu[name] += r["reps_us"]
            host[name] += r["reps_host_us"]
    return {name: {"us_per_step": statistics.median(gpu[name]), "host_us_per_step": statistics.median(host[name]),
                   "reps_us": gpu[name], "reps_host_us": host[name]} for name in names}


def graphed(step):
    """`step` captured once (after a warm-up on a side stream), then replayed."""
    import torch
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload-dir", default=tc.default_workload_dir())
    ap.add_argument("--workloads", nargs="+", default=["gpt2", "llama-1b"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--with-adamw", action="store_true", help="also the whole model, AdamW on the rest")
    ap.add_argument("--breakdown", action="store_true", help="also optgen with ns_steps=0 (no products)")
    ap.add_argument("--many", action="store_true",
                    help="also 10,000 small matrices of 20 shapes: the host time of an eager step and of a replay")
    ap.add_argument("--out", default="")
    args = ap.parse_args()
    import torch
    import optgen.torch as ot
    if not hasattr(torch.optim, "Muon"):
        sys.exit(f"torch {torch.__version__} has no torch.optim.Muon")
    device = torch.cuda.get_device_name()
    print(f"{device}, torch {torch.__version__}, {platform.python_version()}\n")
    print("| workload | matrices (shapes) | method | µs a step | host µs | NS TFLOP/s | speedup vs torch |")
    print("|---|---|---|---:|---:|---:|---:|")
    results = {"device": device, "torch": torch.__version__, "workloads": {}}
    for name in args.workloads:
        w = tc.load_workload(args.workload_dir, name)
        hidden = [s for s in w["shapes"] if len(s) == 2 and max(s) < EMBEDDING]
        rest = [s for s in w["shapes"] if not (len(s) == 2 and max(s) < EMBEDDING)]
        flops = ns_flops(hidden)
        runs = {}

        def run(method, step):
            r = tc.time_steps(step, args.steps, args.reps, 2, False)
            runs[method] = r
            return r

        params = make(hidden, 1)
        ours = ot.Muon(params)
        runs.update(alternated({"optgen": ours.step, "optgen_graph": graphed(ours.step)}, args.steps, args.reps))
        del ours, params
        if args.breakdown:
            # The step without the iteration's products: its elementwise stages and the norms.
            params = make(hidden, 1)
            ours = ot.Muon(params, ns_steps=0)
            run("optgen ns_steps=0", ours.step)
            del ours, params
        params = make(hidden, 1)
        theirs = torch.optim.Muon(params)
        run("torch", theirs.step)
        del theirs, params
        if args.with_adamw:
            hp, rp = make(hidden, 1), make(rest, 2)
            muon, adamw = ot.Muon(hp), ot.AdamW(rp, lr=3e-4)
            run("optgen muon+adamw", lambda: (muon.step(), adamw.step()))
            run("optgen adamw (rest)", adamw.step)
            del muon, adamw, hp, rp
            hp, rp = make(hidden, 1), make(rest, 2)
            tmuon, tadamw = torch.optim.Muon(hp), torch.optim.AdamW(rp, lr=3e-4, fused=True)
            run("torch muon+adamw(fused)", lambda: (tmuon.step(), tadamw.step()))
            del tmuon, tadamw, hp, rp
        torch.cuda.empty_cache()
        shapes = len(set(hidden))
        for method, r in runs.items():
            us = r["us_per_step"]
            tflops = flops / (us * 1e-6) / 1e12 if "adamw (rest)" not in method and "=0" not in method else float("nan")
            base = runs["torch muon+adamw(fused)" if "+" in method else "torch"]["us_per_step"]
            print(f"| {name} | {len(hidden)} ({shapes}) | {method} | {us:.1f} | {r['host_us_per_step']:.1f} | "
                  f"{tflops:.1f} | {base / us:.2f}x |")
        results["workloads"][name] = {"matrices": len(hidden), "shapes": shapes, "ns_tflop": flops / 1e12,
                                      "runs": runs}
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
    if args.many:
        # 500 matrices of each of 20 shapes, 32 to 108 rows by 64 columns (wide and tall).
        shapes = [(32 + 4 * (i % 20), 64) for i in range(10000)]
        params = make(shapes, 3)
        ours = ot.Muon(params)
        timed = alternated({"eager": ours.step, "replay": graphed(ours.step)}, args.steps, args.reps)
        eager, replay = timed["eager"], timed["replay"]
        idle = idle_host_us(ours.step)
        del ours
        static = ot.Muon(params, static_grads=True)
        static_idle = idle_host_us(static.step)
        print(f"\n10,000 matrices of 20 shapes: eager {eager['us_per_step']:.1f} µs a step "
              f"(host {eager['host_us_per_step']:.1f} µs; {idle:.1f} µs with the GPU idle before the call, "
              f"{static_idle:.1f} µs with static_grads=True), graph replay {replay['us_per_step']:.1f} µs "
              f"(host {replay['host_us_per_step']:.1f} µs)")
        results["many"] = {"eager": eager, "replay": replay, "idle_host_us": idle, "static_grads_idle_host_us": static_idle}
        if args.out:
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
