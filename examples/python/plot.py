#!/usr/bin/env python3
"""Plots the runs in a results directory: per model, the loss curves of every AdamW run overlaid with their difference
from torch's fused AdamW (<model>_loss.png), and the optimizer-step and iteration times of every step
(<model>_time.png); the Muon runs alike, against torch.optim.Muon's (<model>_muon_loss.png, <model>_muon_time.png)."""

import argparse
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)
import numpy as np  # noqa: E402

import results  # noqa: E402

COLORS = {"optgen": "tab:orange", "torch": "tab:blue", "torch-foreach": "tab:green", "muon-optgen": "tab:red",
          "muon-torch": "tab:purple"}
STYLES = {"optgen": "--", "torch": "-", "torch-foreach": ":", "muon-optgen": "--", "muon-torch": "-"}
LABELS = {"optgen": "optgen AdamW", "torch": "torch AdamW (fused)", "torch-foreach": "torch AdamW (foreach)",
          "muon-optgen": "optgen Muon + AdamW", "muon-torch": "torch Muon + AdamW (fused)"}


def plot_curve(ax, values, optimizer, window):
    """The raw values, faint, and their moving average, drawn at the middle of each window."""
    smooth = results.moving_average(values, window)
    start = (len(values) - len(smooth)) // 2
    ax.plot(values, color=COLORS[optimizer], alpha=0.25, linewidth=0.7)
    ax.plot(np.arange(start, start + len(smooth)), smooth, color=COLORS[optimizer], linestyle=STYLES[optimizer],
            label=LABELS[optimizer])


def plot_losses(model, runs, window, out_dir, name):
    fig, (curves, differences) = plt.subplots(2, 1, figsize=(9, 7), sharex=True, height_ratios=(3, 2))
    for optimizer, run in runs.items():
        plot_curve(curves, results.losses(run), optimizer, window)
        # AdamW runs against torch's fused AdamW, optgen's Muon against torch's.
        baseline = results.MUON_BASELINE if optimizer.startswith("muon") else results.BASELINE
        if baseline in runs and optimizer != baseline:
            plot_curve(differences, results.losses(run) - results.losses(runs[baseline]), optimizer, window)
    curves.set(ylabel="training loss", title=f"{model}: training loss (faint: per step; lines: mean of {window} steps)")
    curves.legend()
    differences.axhline(0, color="black", linewidth=0.5)
    differences.set(xlabel="step", ylabel="loss − torch's (AdamW fused; Muon)")
    if differences.get_legend_handles_labels()[0]:  # there is a run besides the baseline
        differences.legend()
    return save(fig, out_dir, f"{name}_loss.png")


def plot_times(model, runs, out_dir, name):
    fig, (step_ax, iteration_ax) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for optimizer, run in runs.items():
        per_step, summary = run["per_step"], run["summary"]
        label = f"{LABELS[optimizer]}: median {summary['median_step_ms']:.3f} ms"
        step_ax.plot(per_step["step_ms"], color=COLORS[optimizer], linewidth=0.8, label=label)
        label = f"{LABELS[optimizer]}: median {summary['median_iteration_ms']:.2f} ms"
        iteration_ax.plot(per_step["iteration_ms"], color=COLORS[optimizer], linewidth=0.8, label=label)
    warmup = next(iter(runs.values()))["summary"]["timing_warmup"]
    for ax in (step_ax, iteration_ax):
        ax.axvspan(0, warmup, color="grey", alpha=0.15, label="warm-up, not in the medians")
        ax.set_yscale("log")
        ax.legend(fontsize="small")
    step_ax.set(ylabel="ms", title=f"{model}: optimizer.step() per step")
    iteration_ax.set(xlabel="step", ylabel="ms", title=f"{model}: whole iteration per step")
    return save(fig, out_dir, f"{name}_time.png")


def save(fig, out_dir, name):
    fig.tight_layout()
    path = os.path.join(out_dir, name)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("results_dir", help="where the <model>_<optimizer>.json files are")
    p.add_argument("--out", default=None, help="where to write the PNGs (default: results_dir)")
    p.add_argument("--window", type=int, default=25, help="steps in the moving average of the loss curves")
    args = p.parse_args()
    out_dir = args.out or args.results_dir
    os.makedirs(out_dir, exist_ok=True)
    found = False
    for model in results.MODELS:
        runs = results.load_runs(args.results_dir, model)
        muon = {optimizer: run for optimizer, run in runs.items() if optimizer.startswith("muon")}
        adamw = {optimizer: run for optimizer, run in runs.items() if optimizer not in muon}
        for name, chosen in ((model, adamw), (f"{model}_muon", muon)):
            if chosen:
                found = True
                print(plot_losses(model, chosen, args.window, out_dir, name))
                print(plot_times(model, chosen, out_dir, name))
    if not found:
        p.error(f"no <model>_<optimizer>.json files in {args.results_dir}")


if __name__ == "__main__":
    main()
