#!/usr/bin/env python3
"""Record torch.optim.Muon itself, its Newton-Schulz iteration in float32, on the cases of
tests/data/published/muon.json, for optgen's C++ tests.

tests/data/published/muon.json is a float64 transcription of torch's Muon (tests/record_published.py):
it checks that optgen's CPU reference computes what torch's code says. This file checks the
reference against torch's own code as it runs: torch.optim.Muon of the installed torch, on the CPU,
in float32, with its iteration's bf16 cast (`.bfloat16()` in _zeropower_via_newtonschulz) made a
float32 copy, as tests/python/test_torch_muon_gpu.py runs it on the GPU. The reference computes
the iteration in double; tests/reference_test.cpp says how far apart the two may be.

Each case takes the transcription's hyperparameters, initial params and gradients; it records the
params and momentum buffers torch gives after each step. torch.optim.Muon refuses a param of more
than two dimensions, so a tensor of more is given to it as its matrices over the last two (as
optgen steps it), each a param, and recorded joined back.

Needs torch with torch.optim.Muon (2.9 or newer). Run from the repository root:

    python3 tests/record_torch_muon_f32.py --out tests/data/torch_f32
"""

import argparse
import copy
import inspect
import json
import os
import sys
import textwrap

import torch
import torch.optim._muon as muon_module

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from record_published import write_file  # noqa: E402

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "published", "muon.json")


def newton_schulz_in_f32():
    """torch's _zeropower_via_newtonschulz, its `.bfloat16()` replaced by `.float().clone()`."""
    source = textwrap.dedent(inspect.getsource(muon_module._zeropower_via_newtonschulz))
    if source.count(".bfloat16()") != 1:
        raise SystemExit("torch's Newton-Schulz no longer casts with .bfloat16() once: update this script")
    namespace = dict(vars(muon_module))
    exec(compile(source.replace(".bfloat16()", ".float().clone()"), muon_module.__file__, "exec"), namespace)
    return namespace["_zeropower_via_newtonschulz"]


def torch_arguments(h):
    """The spec's hyperparameters as torch.optim.Muon's arguments."""
    return dict(lr=h["lr"], weight_decay=h["weight_decay"], momentum=h["momentum"], nesterov=h["nesterov"],
                ns_coefficients=(h["ns_a"], h["ns_b"], h["ns_c"]), eps=h["eps"], ns_steps=h["ns_steps"],
                adjust_lr_fn="match_rms_adamw" if h["match_rms_adamw"] else "original")


def run_case(case, steps):
    shapes = case["shapes"]
    # Each tensor as its matrices: a list of (rows, cols) params per tensor.
    pieces = []
    for shape, values in zip(shapes, case["params0"]):
        matrix = torch.tensor(values, dtype=torch.float32).reshape(-1, shape[-2], shape[-1])
        pieces.append([torch.nn.Parameter(m.clone()) for m in matrix])
    groups = [dict(params=[p for t in g["tensors"] for p in pieces[t]], **torch_arguments(g["hyperparameters"]))
              for g in case["groups"]]
    opt = torch.optim.Muon(groups)
    params, momentum = [], []
    for step in range(steps):
        for t, shape in enumerate(shapes):
            grad = torch.tensor(case["grads"][step][t], dtype=torch.float32).reshape(-1, shape[-2], shape[-1])
            for p, g in zip(pieces[t], grad):
                p.grad = g.clone()
        opt.step()
        params.append([torch.cat([p.detach().flatten() for p in ps]).double().tolist() for ps in pieces])
        momentum.append([torch.cat([opt.state[p]["momentum_buffer"].flatten() for p in ps]).double().tolist()
                         for ps in pieces])
    recorded = copy.deepcopy(case)
    recorded.pop("float32_deviation", None)
    recorded["params"] = params
    recorded["state"] = {"momentum_buffer": momentum}
    return recorded


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="directory to write muon.json into")
    args = ap.parse_args()
    if not hasattr(torch.optim, "Muon"):
        raise SystemExit(f"torch {torch.__version__} has no torch.optim.Muon")
    with open(SOURCE, encoding="ascii") as f:
        transcription = json.load(f)
    steps = transcription["steps"]
    muon_module._zeropower_via_newtonschulz = newton_schulz_in_f32()
    torch.manual_seed(0)
    doc = {
        "source": "torch.optim.Muon of torch " + torch.__version__ + ", CPU, float32, its Newton-Schulz in float32 "
                  "(.bfloat16() made .float().clone()), on the cases of tests/data/published/muon.json",
        "torch_version": torch.__version__,
        "spec": "muon",
        "implementation": "torch.optim.Muon, tests/record_torch_muon_f32.py",
        "steps": steps,
        "cases": [run_case(case, steps) for case in transcription["cases"]],
    }
    os.makedirs(args.out, exist_ok=True)
    size = write_file(os.path.join(args.out, "muon.json"), doc)
    print(f"{args.out}/muon.json: {len(doc['cases'])} cases, {steps} steps, {size} bytes")


if __name__ == "__main__":
    main()
