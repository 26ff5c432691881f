#!/usr/bin/env python3
"""Record trajectories of torch's fused CUDA optimizers under AMP, for optgen's tests.

What it records
---------------
torch.optim.Adam, AdamW and SGD with ``fused=True``, on a CUDA device, in float32, stepped the way
``torch.amp.GradScaler`` steps a fused optimizer: the scaler sets ``optimizer.grad_scale`` (the
scale the gradients carry, a float32 device tensor) and ``optimizer.found_inf`` (a float32 device
tensor, 1.0 when the scaled gradients overflowed) and calls ``optimizer.step()``; the fused kernel
divides each gradient by the scale, and skips the whole step, step count included, when found_inf
is 1. The scale changes between steps as GradScaler's backoff and growth would change it, and two
steps overflow (one gradient element is inf, found_inf is 1).

For every case, ``<out>/<spec>.json`` holds (as tests/record_trajectories.py does, with optgen's
hyperparameter names): ``groups``, ``shapes``, ``params0``, ``grads`` (the *scaled* gradients
handed to torch, inf included), ``grad_scale`` and ``found_inf`` per step, and ``params`` after each
step. The first step never overflows: torch's fused SGD leaves a momentum buffer it skips
uninitialised.

How to run (on a machine with a CUDA GPU and torch):

    python3 tests/record_amp_trajectories.py --out tests/data/amp
"""

import argparse
import json
import os
import sys
import zlib

import torch

SHAPES = [[1], [5], [3, 4]]
STEPS = 6
SCALES = [65536.0, 65536.0, 65536.0, 32768.0, 32768.0, 3000.0]  # backoff after each overflow, then any value
FOUND_INF = [0, 0, 1, 0, 1, 0]

CASES = {
    "adam": ("Adam", [
        dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, amsgrad=False, maximize=False),
        dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.0, amsgrad=True, maximize=True),
    ]),
    "adamw": ("AdamW", [
        dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, amsgrad=False, maximize=False),
        dict(lr=0.02, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.05, amsgrad=True, maximize=False),
    ]),
    "sgd": ("SGD", [
        dict(lr=0.05, momentum=0.9, dampening=0.0, weight_decay=0.01, nesterov=True, maximize=False),
        dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.0, nesterov=False, maximize=True),
        dict(lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.01, nesterov=False, maximize=False),
    ]),
}


def optgen_names(hps):
    out = {}
    for k, v in hps.items():
        if k == "betas":
            out["beta1"], out["beta2"] = v
        else:
            out[k] = v
    return out


def flat(t):
    return [float(x) for x in t.detach().cpu().reshape(-1).tolist()]


def run_case(spec, cls, index, hps):
    gen = torch.Generator().manual_seed(zlib.crc32(f"amp:{spec}:{index}".encode()))
    params = [torch.randn(shape, generator=gen, dtype=torch.float32).cuda().requires_grad_() for shape in SHAPES]
    params0 = [flat(p) for p in params]
    opt = cls(params, fused=True, **hps)
    grads, after = [], []
    for step in range(STEPS):
        scale = SCALES[step]
        step_grads = []
        for p in params:
            g = torch.randn(p.shape, generator=gen, dtype=torch.float32) * scale
            if FOUND_INF[step] and p.numel() == 5:
                g.view(-1)[2] = float("inf")
            step_grads.append(flat(g))
            p.grad = g.cuda()
        grads.append(step_grads)
        opt.grad_scale = torch.tensor(scale, dtype=torch.float32, device="cuda")
        opt.found_inf = torch.tensor(float(FOUND_INF[step]), dtype=torch.float32, device="cuda")
        opt.step()
        del opt.grad_scale
        del opt.found_inf
        torch.cuda.synchronize()
        after.append([flat(p) for p in params])
    name = ",".join(f"{k}={v}" for k, v in hps.items())
    return {"name": name,
            "groups": [{"tensors": [0, 1, 2], "hyperparameters": optgen_names(hps)}],
            "shapes": SHAPES, "params0": params0, "grads": grads,
            "grad_scale": SCALES, "found_inf": FOUND_INF, "params": after}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("record_amp_trajectories.py: torch sees no CUDA device; fused optimizers need one")
    os.makedirs(args.out, exist_ok=True)
    for spec, (class_name, cases) in CASES.items():
        cls = getattr(torch.optim, class_name)
        doc = {"torch_version": torch.__version__, "spec": spec, "torch_class": class_name,
               "implementation": "fused=True, float32, CUDA, stepped as torch.amp.GradScaler steps it",
               "steps": STEPS, "cases": [run_case(spec, cls, i, hps) for i, hps in enumerate(cases)]}
        path = os.path.join(args.out, f"{spec}.json")
        with open(path, "w") as f:
            json.dump(doc, f, indent=1, allow_nan=True)
            f.write("\n")
        print(f"wrote {path}: {len(cases)} cases")


if __name__ == "__main__":
    main()
