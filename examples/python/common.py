"""What train_gpt.py and train_cnn.py share: the command line, the optimizers, the lr schedule, the timed training
loop and the JSON file a run writes.

A script describes its task (model, batches, loss, evaluation) and calls run(); everything about optimizers and
timing is here, so both scripts train and measure the same way.
"""

import argparse
import json
import math
import os
import platform
import statistics
import time

import torch

from results import OPTIMIZERS

EPS = 1e-8
OPTIMIZER_HELP = ("optgen: optgen.torch.AdamW; torch: torch.optim.AdamW(fused=True); torch-foreach: "
                  "torch.optim.AdamW(foreach=True), the same math in another order of operations, which compare.py "
                  "uses as its yardstick; muon-optgen: optgen.torch.MuonWithAuxAdam, Muon for the hidden matrices "
                  "and AdamW for the rest; muon-torch: torch.optim.Muon and torch.optim.AdamW(fused=True) so")


def parser(description, *, model, steps, batch_size, lr, weight_decay):
    """The options every training script takes, with the script's defaults."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="torch", help=OPTIMIZER_HELP)
    p.add_argument("--steps", type=int, default=steps, help="training steps")
    p.add_argument("--batch-size", type=int, default=batch_size)
    p.add_argument("--lr", type=float, default=lr, help="peak learning rate")
    p.add_argument("--lr-warmup", type=int, default=None,
                   help="steps of linear lr warm-up before the cosine decay (default: a tenth of --steps)")
    p.add_argument("--weight-decay", type=float, default=weight_decay, help="on weight matrices and kernels only")
    p.add_argument("--timing-warmup", type=int, default=10, help="first steps left out of the timing medians")
    p.add_argument("--seed", type=int, default=0, help="seeds the init, the data and the batches")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (a smoke test: no CUDA events)")
    p.add_argument("--out", default=None, help=f"JSON results (default: {model}_<optimizer>.json)")
    return p


def check_args(p, args, model):
    """Fills in the defaults that depend on other options, and rejects inconsistent ones."""
    if args.lr_warmup is None:
        args.lr_warmup = max(1, args.steps // 10)
    if args.out is None:
        args.out = f"{model}_{args.optimizer}.json"
    if args.steps < 2 or not 0 <= args.timing_warmup < args.steps or not 1 <= args.lr_warmup <= args.steps:
        p.error("need --steps >= 2, 0 <= --timing-warmup < --steps and 1 <= --lr-warmup <= --steps")
    args.device = torch.device(args.device)
    if args.device.type != "cuda":
        if args.optimizer == "optgen":
            p.error("optgen.torch steps CUDA tensors only: --optimizer optgen needs --device cuda")
    elif not torch.cuda.is_available():
        p.error("no CUDA device here: pass --device cpu for a smoke test")
    else:
        torch.cuda.set_device(args.device.index or 0)  # CUDA events record on the current device


def param_groups(model, weight_decay):
    """Two groups, as GPT and timm training recipes do: weight decay on matrices and conv kernels, none on biases,
    norms' scales and other vectors."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


def make_optimizer(name, groups, *, lr, betas, hidden=()):
    """The optimizer `name` (OPTIMIZER_HELP); for the Muon runs, Muon steps `hidden` (the hidden matrices, taken out of
    `groups`) with torch's adjust_lr_fn="match_rms_adamw", which lets it share AdamW's lr and weight decay (Moonlight's
    recipe), and AdamW the rest."""
    if name.startswith("muon"):
        hidden_ids = {id(p) for p in hidden}
        rest = [{**g, "params": [p for p in g["params"] if id(p) not in hidden_ids]} for g in groups]
        decay = groups[0]["weight_decay"]
        muon = dict(lr=lr, weight_decay=decay, adjust_lr_fn="match_rms_adamw")
        if name == "muon-optgen":
            import optgen.torch

            return optgen.torch.MuonWithAuxAdam([dict(params=list(hidden), use_muon=True, **muon)] +
                                                [dict(g, use_muon=False, lr=lr, betas=betas, eps=EPS) for g in rest])
        return Chained(torch.optim.Muon(list(hidden), **muon),
                       torch.optim.AdamW(rest, lr=lr, betas=betas, eps=EPS, fused=True))
    if name == "optgen":
        import optgen.torch  # here only: the torch runs need no optgen

        return optgen.torch.AdamW(groups, lr=lr, betas=betas, eps=EPS)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=EPS, fused=name == "torch",
                             foreach=name == "torch-foreach")


class Chained:
    """Two torch optimizers stepped as one (torch.optim.Muon beside torch.optim.AdamW); each has its own lr schedule
    (schedulers() below)."""

    def __init__(self, *parts):
        self.parts = parts

    def zero_grad(self, set_to_none=True):
        for part in self.parts:
            part.zero_grad(set_to_none=set_to_none)

    def step(self):
        for part in self.parts:
            part.step()


def schedulers(optimizer, factor):
    """A LambdaLR per optimizer of `optimizer` (one, or a Chained pair's two)."""
    return [torch.optim.lr_scheduler.LambdaLR(part, factor) for part in getattr(optimizer, "parts", [optimizer])]


def warmup_cosine(steps, warmup, final_fraction=0.1):
    """LambdaLR's factor: linear warm-up over `warmup` steps, then a cosine from 1 down to `final_fraction`."""

    def factor(step):
        if step < warmup:
            return (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return final_fraction + (1 - final_fraction) * 0.5 * (1 + math.cos(math.pi * progress))

    return factor


class CudaTimer:
    """CUDA events at named points of every step, read once after the loop: timing adds no synchronization, so the
    host runs ahead of the GPU as in any training loop. An interval is GPU time between two events: the kernels in
    between, and any time the GPU waited for the host to launch them."""

    def __init__(self, steps):
        self.steps = steps
        self.events = {}

    def mark(self, name, step):
        if name not in self.events:
            self.events[name] = [torch.cuda.Event(enable_timing=True) for _ in range(self.steps)]
        self.events[name][step].record()

    def elapsed_ms(self, start, end):
        torch.cuda.synchronize()
        return [a.elapsed_time(b) for a, b in zip(self.events[start], self.events[end])]


class HostTimer:
    """The same points timed on the host, for CPU runs, where every operation has finished when it returns."""

    def __init__(self, steps):
        self.times = {}
        self.steps = steps

    def mark(self, name, step):
        self.times.setdefault(name, [0.0] * self.steps)[step] = time.perf_counter()

    def elapsed_ms(self, start, end):
        return [(b - a) * 1e3 for a, b in zip(self.times[start], self.times[end])]


def train(task, model, optimizer, schedules, steps, device):
    """The training loop, as ordinary as it gets, with the optimizer step and the whole iteration timed. Losses stay
    on the device until the end, so nothing in the loop waits for the GPU."""
    timer = CudaTimer(steps) if device.type == "cuda" else HostTimer(steps)
    losses = torch.empty(steps, device=device)
    lrs = []
    model.train()
    for step in range(steps):
        timer.mark("iteration", step)
        optimizer.zero_grad(set_to_none=True)
        inputs, targets = task.batch(step)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = task.loss(model, inputs, targets)
        loss.backward()
        lrs.append(schedules[0].get_last_lr()[0])
        timer.mark("step", step)
        optimizer.step()
        timer.mark("step_end", step)
        for schedule in schedules:
            schedule.step()
        losses[step] = loss.detach()
        timer.mark("iteration_end", step)
    return {"loss": losses.tolist(), "lr": lrs, "step_ms": timer.elapsed_ms("step", "step_end"),
            "iteration_ms": timer.elapsed_ms("iteration", "iteration_end")}


def summarize(history, timing_warmup):
    step_ms = statistics.median(history["step_ms"][timing_warmup:])
    iteration_ms = statistics.median(history["iteration_ms"][timing_warmup:])
    return {"median_step_ms": step_ms, "median_iteration_ms": iteration_ms, "optimizer_share": step_ms / iteration_ms,
            "timing_warmup": timing_warmup, "final_train_loss": history["loss"][-1]}


def environment(device):
    return {"torch": torch.__version__, "python": platform.python_version(),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"}


def run(task, model, args, *, betas, config, hidden_matrices=None):
    """Trains `model` on `task` as the command line says, evaluates it, writes the JSON file and prints a summary.

    task: batch(step) -> (inputs, targets) on the device; loss(model, inputs, targets) -> scalar tensor;
    evaluate(model) -> dict of validation metrics, called in eval mode under no_grad and autocast.
    config: what the script adds to the recorded configuration (model and data sizes).
    hidden_matrices(model): the params the Muon runs step with Muon (the others with AdamW); None: no Muon runs.
    """
    if args.optimizer.startswith("muon") and hidden_matrices is None:
        raise SystemExit(f"--optimizer {args.optimizer}: this script trains with AdamW only")
    optimizer = make_optimizer(args.optimizer, param_groups(model, args.weight_decay), lr=args.lr, betas=betas,
                               hidden=hidden_matrices(model) if hidden_matrices else ())
    schedules = schedulers(optimizer, warmup_cosine(args.steps, args.lr_warmup))
    start = time.perf_counter()
    history = train(task, model, optimizer, schedules, args.steps, args.device)
    wall_s = time.perf_counter() - start
    model.eval()
    with torch.no_grad(), torch.autocast(args.device.type, dtype=torch.bfloat16):
        validation = task.evaluate(model)
    summary = {**summarize(history, args.timing_warmup), "train_wall_s": wall_s,
               **{f"final_{name}": value for name, value in validation.items()}}
    options = {k: str(v) if k == "device" else v for k, v in vars(args).items()}
    record = {"config": {**options, "betas": betas, "eps": EPS, **config}, "environment": environment(args.device),
               "per_step": history, "summary": summary}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(record, f, indent=1)
    print(json.dumps(summary, indent=1))
    print(f"wrote {args.out}")
