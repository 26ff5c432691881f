#!/usr/bin/env python3
"""Says whether optgen's loss curves match torch's, and what share of an iteration the optimizer step takes.

For each model with runs in the results directory (<model>_<optimizer>.json from train_gpt.py and train_cnn.py), it
prints the median optimizer-step and iteration times of every optimizer and the step's share of the iteration, then
checks optgen's losses against torch's fused AdamW ("torch").

Why not equal, and how close is close enough: both compute AdamW's update in fp32, the same math in another order of
operations, so after the first step their params differ in the last bits. Under bf16 autocast such a difference
sooner or later flips the rounding of a weight to bf16, and training, a chaotic process, amplifies it: the two runs
drift apart step by step although neither is wrong. How far correct implementations drift is measured, not guessed:
torch's foreach AdamW is the same math in yet another order, so its distance from torch's fused AdamW on the same
init and batches ("torch-foreach" vs "torch") is the yardstick. optgen matches when it stays as close to fused torch
as foreach torch does, within a factor of --factor (4), in each of:

  start   the loss before the first update: the same init and batch, no optimizer involved yet, so equal (1e-6 rel)
  early   each of the first --early steps (20), where a wrong update shows before chaos blurs it
  curve   the difference of the losses averaged over --window steps (50), over the whole run: a systematic offset
          (a wrong lr, weight decay, eps or beta) accumulates there while step-to-step noise averages out
  final   the final validation loss

Muon (muon-optgen, optgen.torch.MuonWithAuxAdam, against muon-torch, torch.optim.Muon beside torch.optim.AdamW):
both orthogonalise in bf16, torch a matrix at a time and optgen batched by shape, so their updates differ from the
first step by a bf16 rounding here and there, and there is no second torch implementation to measure a yardstick
with. Its check is looser and stated as such: the averaged curve and the final validation loss within --muon-rtol
(1%) of torch's.

A floor of 1e-5 of the loss stands in for the yardstick where it happens to be zero (the two torch implementations
agreeing bit for bit over a stretch). Measured on the CPU with a small GPT (train_gpt.py, 300 steps), foreach vs fused
drifted 5e-5 early, 7e-5 on the averaged curve and 6e-5 in the final validation loss, while a slightly wrong
optimizer stood out by 8x to 200x: lr 2% high, beta2 0.98 for 0.99, no weight decay, eps 1e-6 for 1e-8. A run of
torch with another seed differed by 0.04, a yardstick 500 times looser. Exit status: 0 when every model matches,
1 when one does not or lacks a run, 2 when the directory has no results.
"""

import argparse
import sys

import numpy as np

import results

CANDIDATE = "optgen"
YARDSTICK = "torch-foreach"
START_RTOL = 1e-6
FLOOR = 1e-5  # of the loss


def timing_table(runs_by_model):
    lines = ["| model | optimizer | optimizer.step() ms | iteration ms | step share | torch's step / this "
             "| final val loss |", "|---|---|---:|---:|---:|---:|---:|"]
    for model, runs in runs_by_model.items():
        for optimizer, run in runs.items():
            baseline = runs.get(results.MUON_BASELINE if optimizer.startswith("muon") else results.BASELINE)
            s = run["summary"]
            ratio = f"{baseline['summary']['median_step_ms'] / s['median_step_ms']:.2f}" if baseline else "-"
            lines.append(f"| {model} | {optimizer} | {s['median_step_ms']:.3f} | {s['median_iteration_ms']:.2f} "
                         f"| {100 * s['optimizer_share']:.1f}% | {ratio} | {s['final_val_loss']:.4f} |")
    return lines


def differences(candidate, baseline, early, window):
    """The four measures of the module's docstring for one run against the baseline: {check: |difference|}."""
    d = results.losses(candidate) - results.losses(baseline)
    return {"start": abs(d[0]), "early": np.abs(d[1:early + 1]).max(),
            "curve": np.abs(results.moving_average(d, window)).max(),
            "final": abs(candidate["summary"]["final_val_loss"] - baseline["summary"]["final_val_loss"])}


def check(model, runs, args):
    """Prints the checks of one model; True when optgen matches torch."""
    missing = [name for name in (CANDIDATE, results.BASELINE, YARDSTICK) if name not in runs]
    if missing:
        print(f"{model}: cannot check, no run of {', '.join(missing)}")
        return False
    baseline = runs[results.BASELINE]
    measured = differences(runs[CANDIDATE], baseline, args.early, args.window)
    yardstick = differences(runs[YARDSTICK], baseline, args.early, args.window)
    floor = FLOOR * results.losses(baseline)[0]
    limits = {name: args.factor * max(spread, floor) for name, spread in yardstick.items()}
    limits["start"] = START_RTOL * results.losses(baseline)[0]
    print(f"{model}: |{CANDIDATE} - torch| against |{YARDSTICK} - torch|")
    print(f"  {'check':8s} {CANDIDATE:>12s} {YARDSTICK:>14s} {'limit':>10s}")
    ok = True
    for name, value in measured.items():
        passed = value <= limits[name]
        ok &= passed
        print(f"  {name:8s} {value:12.3e} {yardstick[name]:14.3e} {limits[name]:10.3e}  {'ok' if passed else 'FAILED'}")
    print(f"  {model}: optgen's loss curve {'matches' if ok else 'DOES NOT match'} torch's")
    return ok


def check_muon(model, runs, args):
    """Prints the Muon check of one model (the module's docstring); True when optgen's Muon matches torch's, None
    when there are no Muon runs."""
    if results.MUON not in runs and results.MUON_BASELINE not in runs:
        return None
    if results.MUON not in runs or results.MUON_BASELINE not in runs:
        print(f"{model}: cannot check Muon, it needs runs of both {results.MUON} and {results.MUON_BASELINE}")
        return False
    measured = differences(runs[results.MUON], runs[results.MUON_BASELINE], args.early, args.window)
    loss = results.losses(runs[results.MUON_BASELINE])
    limits = {"start": START_RTOL * loss[0], "curve": args.muon_rtol * loss[-args.window:].mean(),
              "final": args.muon_rtol * runs[results.MUON_BASELINE]["summary"]["final_val_loss"]}
    print(f"{model}: |{results.MUON} - {results.MUON_BASELINE}|")
    ok = True
    for name, limit in limits.items():
        passed = measured[name] <= limit
        ok &= passed
        print(f"  {name:8s} {measured[name]:12.3e} {limit:10.3e}  {'ok' if passed else 'FAILED'}")
    print(f"  {model}: optgen's Muon {'matches' if ok else 'DOES NOT match'} torch's")
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results_dir", help="where the <model>_<optimizer>.json files are")
    p.add_argument("--factor", type=float, default=4.0, help="how many yardsticks optgen may drift (default: 4)")
    p.add_argument("--early", type=int, default=20, help="steps compared one by one (default: 20)")
    p.add_argument("--window", type=int, default=50, help="steps averaged for the curve check (default: 50)")
    p.add_argument("--muon-rtol", type=float, default=0.01, help="Muon's curve and final loss, of torch's (0.01)")
    args = p.parse_args()
    runs_by_model = {model: runs for model in results.MODELS if (runs := results.load_runs(args.results_dir, model))}
    if not runs_by_model:
        p.error(f"no <model>_<optimizer>.json files in {args.results_dir}")
    print("\n".join(timing_table(runs_by_model)))
    print()
    matched = [check(model, runs, args) for model, runs in runs_by_model.items()]
    muon = [check_muon(model, runs, args) for model, runs in runs_by_model.items()]
    return 0 if all(matched) and all(m is not False for m in muon) else 1


if __name__ == "__main__":
    sys.exit(main())
