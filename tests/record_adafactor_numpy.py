#!/usr/bin/env python3
"""A stand-in for torch's Adafactor trajectories where torch is not installed.

A float64 numpy transcription of torch.optim.Adafactor's single-tensor step
(torch 2.11, torch/optim/_adafactor.py, _single_tensor_adafactor) run on the
cases, shapes and hyperparameters tests/record_trajectories.py records for the
spec adafactor, written in the same format (plus "source"). Its random numbers
are numpy's, not torch's, so its file differs from the recording; it is for
testing optgen's CPU reference on a machine without torch, never to be
committed: the real file comes from

    python3 tests/record_trajectories.py --out tests/data/factored --only adafactor

Usage: python3 tests/record_adafactor_numpy.py --out DIR [--steps 10]
(writes DIR/adafactor.json; OPTGEN_FACTORED_DATA=DIR build/tests/optgen_tests
"CPU reference with rows and columns*" replays it). Requires numpy.
"""

import argparse
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import record_trajectories as rt  # noqa: E402  (the case tables; needs no torch)

SPEC = "adafactor"


def adafactor_step(param, grad, state, h, step):
    """One step of one tensor, as _single_tensor_adafactor computes it; `state` holds row_var and
    col_var (shapes (..., R, 1) and (..., 1, C)) for a tensor of two or more dimensions, else
    variance; `step` is the tensor's step after the increment."""
    grad = -grad if h["maximize"] else grad
    eps1, eps2 = h["eps1"], h["eps2"]
    one_minus_beta2_t = step ** h["beta2_decay"]
    rho_t = min(h["lr"], 1 / (step ** 0.5))
    alpha = max(eps2, np.linalg.norm(param.reshape(-1)) / (param.size ** 0.5)) * rho_t
    if h["weight_decay"] != 0:
        param = param * (1 - h["lr"] * h["weight_decay"])
    if grad.ndim > 1:
        row_mean = np.square(np.linalg.norm(grad, axis=-1, keepdims=True)) / grad.shape[-1]
        state["row_var"] = state["row_var"] + one_minus_beta2_t * (row_mean - state["row_var"])
        col_mean = np.square(np.linalg.norm(grad, axis=-2, keepdims=True)) / grad.shape[-2]
        state["col_var"] = state["col_var"] + one_minus_beta2_t * (col_mean - state["col_var"])
        var_estimate = state["row_var"] @ state["col_var"]
        var_estimate = var_estimate / np.maximum(state["row_var"].mean(axis=-2, keepdims=True), eps1)
    else:
        state["variance"] = state["variance"] + one_minus_beta2_t * (grad * grad - state["variance"])
        var_estimate = state["variance"].copy()
    update = 1 / np.sqrt(np.maximum(var_estimate, eps1 * eps1)) * grad
    denom = max(1.0, np.linalg.norm(update.reshape(-1)) / ((update.size ** 0.5) * h["d"]))
    return param + (-alpha / denom) * update


def initial_state(shape):
    if len(shape) > 1:
        row, col = list(shape), list(shape)
        row[-1] = 1
        col[-2] = 1
        return {"row_var": np.zeros(row), "col_var": np.zeros(col)}
    return {"variance": np.zeros(shape)}


def flat(a):
    return [float(x) for x in np.asarray(a).reshape(-1)]


def run_case(index, groups, steps):
    rng = np.random.default_rng(zlib.crc32(f"{SPEC}:{index}".encode("ascii")))
    shapes = rt.shapes_of(SPEC)
    params = [rng.standard_normal(s) for s in shapes]
    params0 = [flat(p) for p in params]
    states = [initial_state(s) for s in shapes]
    hps = {}
    for idxs, h in groups:
        for i in idxs:
            hps[i] = h
    grads_rec, params_rec = [], []
    states_rec = {name: [] for name in rt.RECORDED_STATES[SPEC]}
    for step in range(1, steps + 1):
        grads = [rng.standard_normal(s) for s in shapes]
        for i in range(len(params)):
            params[i] = adafactor_step(params[i], grads[i], states[i], hps[i], float(step))
        grads_rec.append([flat(g) for g in grads])
        params_rec.append([flat(p) for p in params])
        for name in states_rec:
            states_rec[name].append([flat(s[name]) if name in s else [] for s in states])
    return {
        "groups": [{"tensors": list(idxs), "hyperparameters": h} for idxs, h in groups],
        "shapes": shapes,
        "params0": params0,
        "grads": grads_rec,
        "params": params_rec,
        "state": states_rec,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory (not tests/data)")
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    cases = [{"name": name, **run_case(i, groups, args.steps)} for i, (name, groups) in enumerate(rt.build_cases(SPEC))]
    defaults = {"lr": 1e-2, "beta2_decay": -0.8, "eps1": rt.FLOAT32_EPS, "eps2": 1e-3, "d": 1.0,
                "weight_decay": 0.0, "maximize": False}
    doc = {
        "source": "numpy transcription of torch.optim.Adafactor (tests/record_adafactor_numpy.py), not torch",
        "spec": SPEC,
        "implementation": "_single_tensor_adafactor transcribed to numpy, float64",
        "steps": args.steps,
        "torch_defaults": defaults,
        "cases": cases,
    }
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{SPEC}.json")
    size = rt.write_file(path, doc)
    print(f"{SPEC}: {len(cases)} cases -> {path} ({size} bytes)")


if __name__ == "__main__":
    main()
