#!/usr/bin/env python3
"""Record LAMB trajectories from a transcription of NVIDIA APEX's FusedLAMB, for specs/lamb.yaml.

The source: NVIDIA/apex, apex/optimizers/fused_lamb.py (class FusedLAMB: its arguments and
defaults, the per-step beta1/beta2 corrections it passes to the kernel) and
csrc/multi_tensor_lamb.cu (LAMBStage1Functor: the moments and the update; LAMBStage2Functor: the
trust ratio). `apex_lamb_step` below follows them line by line, in float64 on the CPU, one
tensor at a time (APEX computes the same per tensor, chunked):

    stage 1, per element (MOMENT_MODE_0 is L2, MOMENT_MODE_1 is adam_w_mode):
      scaled_grad = grad / clipped_global_grad_norm           (1 here: see below)
      L2:     scaled_grad += decay * p
      m = beta1 * m + beta3 * scaled_grad                      beta3 = 1 - beta1 if grad_averaging else 1
      v = beta2 * v + (1 - beta2) * scaled_grad^2
      update = (m / beta1_correction) / (sqrt(v / beta2_correction) + eps)
      adamw:  update += decay * p
    stage 2, per tensor:
      ratio = lr
      if use_nvlamb or decay != 0:
          ratio = lr * (p_norm / u_norm) if p_norm != 0 and u_norm != 0 else lr
      p -= ratio * update
    beta1_correction = 1 - beta1^step, beta2_correction = 1 - beta2^step when bias_correction, else 1.

FusedLAMB's max_grad_norm (clipping by the global norm of every group's gradients before stage
1) is not part of specs/lamb.yaml, which has the max_grad_norm every spec has (torch's
clip_grad_norm_; tests/record_clipping.py); the cases here run with it off.

Writes tests/data/published/lamb.json in tests/record_trajectories.py's format (read by
tests/reference_test.cpp). Run: python3 tests/record_lamb.py --out tests/data/published
"""

import argparse
import os
import zlib

import torch

import record_trajectories as rt

BASE = dict(lr=0.01, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.01, bias_correction=True, adam_w_mode=True,
            grad_averaging=True, use_nvlamb=False)
CASES = [
    {},
    {"weight_decay": 0.0},                      # no trust ratio: plain Adam-like step
    {"weight_decay": 0.0, "use_nvlamb": True},  # the ratio without weight decay
    {"adam_w_mode": False},                     # L2 weight decay
    {"bias_correction": False, "grad_averaging": False},
    {"lr": 0.1, "beta1": 0.5, "beta2": 0.9, "eps": 1e-3},
]
SOURCE = "NVIDIA/apex apex/optimizers/fused_lamb.py + csrc/multi_tensor_lamb.cu (FusedLAMB), transcribed"


def apex_lamb_step(params, grads, states, h, step):
    beta1, beta2 = h["beta1"], h["beta2"]
    beta1_correction = 1 - beta1 ** step if h["bias_correction"] else 1.0
    beta2_correction = 1 - beta2 ** step if h["bias_correction"] else 1.0
    beta3 = 1 - beta1 if h["grad_averaging"] else 1.0
    decay = h["weight_decay"]
    for p, g, (m, v) in zip(params, grads, states):
        scaled_grad = g.clone()
        if not h["adam_w_mode"]:
            scaled_grad = scaled_grad + decay * p
        m.mul_(beta1).add_(beta3 * scaled_grad)
        v.mul_(beta2).add_((1 - beta2) * scaled_grad * scaled_grad)
        update = (m / beta1_correction) / ((v / beta2_correction).sqrt() + h["eps"])
        if h["adam_w_mode"]:
            update = update + decay * p
        ratio = h["lr"]
        if h["use_nvlamb"] or decay != 0:
            p_norm, u_norm = p.norm(), update.norm()
            ratio = h["lr"] * (p_norm / u_norm) if p_norm != 0 and u_norm != 0 else h["lr"]
        p.sub_(ratio * update)


def run_case(index, groups, steps, zero_tensor):
    gen = torch.Generator().manual_seed(zlib.crc32(f"lamb:{index}".encode()))
    params = [torch.randn(s, generator=gen, dtype=torch.float64) for s in rt.SHAPES]
    if zero_tensor:
        params[1].zero_()  # a zero norm: that tensor takes the step unscaled
    params0 = [rt.flat(p) for p in params]
    states = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    grads_rec, params_rec = [], []
    for step in range(1, steps + 1):
        grads = [torch.randn(s, generator=gen, dtype=torch.float64) for s in rt.SHAPES]
        for idxs, h in groups:
            apex_lamb_step([params[i] for i in idxs], [grads[i] for i in idxs], [states[i] for i in idxs], h, step)
        grads_rec.append([rt.flat(g) for g in grads])
        params_rec.append([rt.flat(p) for p in params])
    return {"groups": [{"tensors": list(idxs), "hyperparameters": h} for idxs, h in groups], "shapes": rt.SHAPES,
            "params0": params0, "grads": grads_rec, "params": params_rec}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    cases = []
    for index, overrides in enumerate(CASES):
        h = {**BASE, **overrides}
        cases.append({"name": rt.case_name(overrides) if overrides else "base",
                      **run_case(index, [([0, 1, 2], h)], args.steps, zero_tensor=False)})
    h0, h1 = BASE, {**BASE, "weight_decay": 0.1, "lr": 0.02}
    cases.append({"name": "two_groups_zero_param", **run_case(len(CASES), [([0, 1], h0), ([2], h1)], args.steps,
                                                               zero_tensor=True)})
    doc = {"source": SOURCE, "torch_version": torch.__version__, "spec": "lamb", "steps": args.steps,
           "implementation": "apex_lamb_step in tests/record_lamb.py, float64, CPU", "cases": cases}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "lamb.json")
    print(f"lamb: {len(cases)} cases -> {path} ({rt.write_file(path, doc)} bytes)")


if __name__ == "__main__":
    main()
