"""The results of train_gpt.py and train_cnn.py as plot.py and compare.py find and read them; no torch needed.

A run writes <model>_<optimizer>.json (model: gpt or cnn); a results directory holds one per model and optimizer.
"""

import json
import os

import numpy as np

MODELS = ("gpt", "cnn")
OPTIMIZERS = ("optgen", "torch", "torch-foreach", "muon-optgen", "muon-torch")
BASELINE = "torch"  # what the AdamW runs are compared with: torch.optim.AdamW(fused=True)
# Muon for the hidden matrices, AdamW for the rest: optgen.torch.MuonWithAuxAdam against torch.optim.Muon beside
# torch.optim.AdamW(fused=True).
MUON, MUON_BASELINE = "muon-optgen", "muon-torch"


def path(directory, model, optimizer):
    return os.path.join(directory, f"{model}_{optimizer}.json")


def load_runs(directory, model):
    """{optimizer: results} for the runs of `model` in `directory`, in OPTIMIZERS' order; missing ones left out."""
    runs = {}
    for optimizer in OPTIMIZERS:
        if os.path.exists(path(directory, model, optimizer)):
            with open(path(directory, model, optimizer)) as f:
                runs[optimizer] = json.load(f)
    return runs


def losses(run):
    return np.asarray(run["per_step"]["loss"], dtype=np.float64)


def moving_average(values, window):
    """The mean of each `window` consecutive values (len(values) - window + 1 of them); the values themselves when
    there are fewer than `window`."""
    window = min(window, len(values))
    return np.convolve(values, np.ones(window) / window, mode="valid")
