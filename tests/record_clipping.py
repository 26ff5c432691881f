#!/usr/bin/env python3
"""Record trajectories of torch.nn.utils.clip_grad_norm_ followed by a torch.optim step, for the
global-norm clipping every optgen spec has (max_grad_norm; generator/clipping.h).

Each case is a case of tests/record_trajectories.py (same tensors, seeds, JSON format) whose
groups carry optgen's ``max_grad_norm``: before every step, each param group's gradients are
clipped with ``torch.nn.utils.clip_grad_norm_(group_params, max_grad_norm, foreach=False)``
(norm_type 2, error_if_nonfinite False), which is what optgen fuses into its step. Cases cover a
norm above the limit (clipping scales), below it (the coefficient clamps to 1), and two groups
with different limits, one of them not clipping (max_grad_norm 0). Every case also records
``grad_norms``: the norm clip_grad_norm_ returned, per step and group (NaN-free; 0 for a group
that does not clip).

Writes ``<out>/<spec>.json`` for adam, adamw and sgd (with momentum). Run:

    python3 tests/record_clipping.py --out tests/data/clipping [--steps 10]

Requires torch; tests/data/clipping is read by tests/reference_test.cpp.
"""

import argparse
import os

import torch

import record_trajectories as rt

# spec -> the base overrides of record_trajectories' BASES, then the clipping cases:
# (name, [(tensor indices, overrides incl. max_grad_norm)]).
CASES = {
    "adamw": {"weight_decay": 0.01},
    "adam": {},
    "sgd": {"momentum": 0.9},
}
LIMITS = [
    ("clipped", [([0, 1, 2], {"max_grad_norm": 0.5})]),
    ("not_clipped", [([0, 1, 2], {"max_grad_norm": 100.0})]),
    ("two_groups", [([0, 1], {"max_grad_norm": 0.25}), ([2], {"max_grad_norm": 0.0})]),
]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    args = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    os.makedirs(args.out, exist_ok=True)
    for spec, base_overrides in CASES.items():
        cls_name = rt.SPECS[spec][0]
        cls = getattr(torch.optim, cls_name)
        cases = []
        for index, (name, groups) in enumerate(LIMITS):
            limits, plain = [], []
            for idxs, overrides in groups:
                limits.append((idxs, overrides["max_grad_norm"]))
                hps = rt.normalize(spec, {**rt.BASES[spec], **base_overrides,
                                          **{k: v for k, v in overrides.items() if k != "max_grad_norm"}})
                plain.append((idxs, hps))
            norms = []

            def clip(params):
                step_norms = []
                for idxs, limit in limits:
                    if limit > 0:
                        total = torch.nn.utils.clip_grad_norm_([params[i] for i in idxs], limit, foreach=False)
                        step_norms.append(float(total))
                    else:
                        step_norms.append(0.0)
                norms.append(step_norms)

            case = rt.run_case(spec, cls, 1000 + index, plain, args.steps, before_step=clip)
            for group, (_, limit) in zip(case["groups"], limits):
                group["hyperparameters"]["max_grad_norm"] = limit
            cases.append({"name": name, **case, "grad_norms": norms})
        doc = {
            "torch_version": torch.__version__,
            "spec": spec,
            "torch_class": cls_name,
            "implementation": "clip_grad_norm_(foreach=False) per group, then single_tensor (foreach=False), "
                              "float64, CPU",
            "steps": args.steps,
            "cases": cases,
        }
        path = os.path.join(args.out, f"{spec}.json")
        size = rt.write_file(path, doc)
        print(f"{spec}: {len(cases)} cases -> {path} ({size} bytes)")


if __name__ == "__main__":
    main()
