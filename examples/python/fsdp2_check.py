#!/usr/bin/env python3
"""Checks that optgen.torch.AdamW steps an FSDP2-sharded model as torch.optim.AdamW does.

    torchrun --nproc_per_node 2 examples/python/fsdp2_check.py

Two copies of a small GPT (train_gpt.py's), built from one seed, are sharded with torch.distributed.fsdp.fully_shard
over every process (one per GPU, NCCL); their params are DTensors, each process holding a shard. One copy is stepped by
torch.optim.AdamW(fused=True), the other by optgen.torch.AdamW, with the same hyperparameters and two param groups,
both trained in fp32 on the same batches of train_gpt.py's corpus (each process its own). After the last step every
param is gathered whole (DTensor.full_tensor()) and the copies are compared element by element.

The tolerance: both compute AdamW's update in fp32, the same math in another order of operations, so after a step a
param differs by a unit in the last place (ulp) or so, and the slightly different params then feed back through the
gradients. Adam amplifies that feedback where a gradient is mostly round-off, so the drift is measured rather than
derived: torch's foreach AdamW against its fused one (--candidate torch-foreach), 20 steps of this model on 2 CPU
processes, drifted 4.7e-7 at most. The check asks |optgen - torch| <= atol + rtol * |torch| of every element, with
atol 1e-5 (a hundredth of one step's update at lr 1e-3, 20 times the drift measured) and rtol 1e-5. Wrong updates
miss it by far: the same run with lr 0.1% high drifted 1.8e-3, without weight decay 8.8e-4, with eps 1e-6 for 1e-8
1.0e-2. Exit status 0 when every param matches, 1 when one does not.

--device cpu runs it on the CPU over gloo with torch.optim.AdamW(foreach=True) in optgen's place (optgen steps CUDA
tensors only): a test of the check itself, as is --candidate torch-foreach on GPUs.
"""

import argparse
import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import common
from train_gpt import GPT, GPTConfig, load_corpus, windows

CONFIG = GPTConfig(context=128, layers=4, heads=4, width=256)
BATCH_SIZE = 16  # per process
LR = 1e-3
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.99)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cuda: one GPU per process, NCCL; cpu: gloo, torch-foreach as the candidate")
    p.add_argument("--candidate", choices=("optgen", "torch-foreach"), default=None,
                   help="the optimizer checked against torch.optim.AdamW(fused=True) (default: optgen on cuda, "
                        "torch-foreach on cpu)")
    p.add_argument("--rtol", type=float, default=1e-5)
    p.add_argument("--atol", type=float, default=1e-5)
    args = p.parse_args()
    args.candidate = args.candidate or ("optgen" if args.device == "cuda" else "torch-foreach")
    if args.candidate == "optgen" and args.device != "cuda":
        p.error("optgen.torch steps CUDA tensors only: --candidate optgen needs --device cuda")
    return args


def setup(device_type):
    """Joins the process group torchrun describes; returns (rank, world size, device, device mesh)."""
    dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device(device_type)
    if device_type == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
    return rank, world, device, init_device_mesh(device_type, (world,))


def sharded_copy(model, device, mesh):
    """A copy of `model` on `device`, each block and then the whole sharded over `mesh` (FSDP2)."""
    model = copy.deepcopy(model).to(device)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    return fully_shard(model, mesh=mesh)


def train_step(model, optimizer, tokens):
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(tokens[:, :-1]).flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    return loss.detach()


def full_params(model):
    """Every param, gathered whole from its shards: {name: tensor}."""
    return {name: param.full_tensor() for name, param in model.named_parameters()}


def compare(reference, candidate, rtol, atol):
    """Per param: (max |difference| of an element, |difference| / |reference| of the whole tensor (2-norms),
    whether every element is within atol + rtol * |reference|)."""
    report = {}
    for name, expected in reference.items():
        difference = candidate[name] - expected
        relative = (difference.norm() / expected.norm()).item() if expected.any() else difference.norm().item()
        report[name] = (difference.abs().max().item(), relative,
                        torch.allclose(candidate[name], expected, rtol=rtol, atol=atol))
    return report


def main():
    args = parse_args()
    rank, world, device, mesh = setup(args.device)
    say = print if rank == 0 else lambda *a, **k: None

    torch.manual_seed(0)
    model = GPT(CONFIG)
    reference, candidate = sharded_copy(model, device, mesh), sharded_copy(model, device, mesh)
    first_name, first = next(iter(reference.named_parameters()))
    say(f"FSDP2 over {world} processes ({args.device}): GPT {CONFIG}, "
        f"{sum(p.numel() for p in model.parameters()):,} params in {len(list(model.parameters()))} tensors, "
        f"each a {type(first).__name__}; e.g. {first_name} {tuple(first.shape)} placed {first.placements}, "
        f"of which this process holds {tuple(first.to_local().shape)}")
    if not all(ok for _, _, ok in compare(full_params(reference), full_params(candidate), 0.0, 0.0).values()):
        raise SystemExit("error: the two copies differ before training")

    torch_adamw = torch.optim.AdamW(common.param_groups(reference, WEIGHT_DECAY), lr=LR, betas=BETAS, eps=common.EPS,
                                    fused=True)
    checked = common.make_optimizer(args.candidate, common.param_groups(candidate, WEIGHT_DECAY), lr=LR, betas=BETAS)
    say(f"reference: torch.optim.AdamW(fused=True); candidate: {args.candidate}; lr {LR}, betas {BETAS}, "
        f"weight decay {WEIGHT_DECAY} on matrices; {args.steps} steps, {BATCH_SIZE} sequences per process and step")

    train, _ = load_corpus()
    generator = torch.Generator().manual_seed(1 + rank)  # each process its own batches, both copies the same
    for step in range(args.steps):
        starts = torch.randint(len(train) - CONFIG.context, (BATCH_SIZE,), generator=generator)
        tokens = windows(train, starts, CONFIG.context + 1).to(device)
        losses = train_step(reference, torch_adamw, tokens), train_step(candidate, checked, tokens)
        say(f"step {step:3d}  loss torch {losses[0].item():.6f}  {args.candidate} {losses[1].item():.6f}")

    report = compare(full_params(reference), full_params(candidate), args.rtol, args.atol)
    worst_abs = max(report, key=lambda name: report[name][0])
    worst_rel = max(report, key=lambda name: report[name][1])
    failed = [name for name, (_, _, ok) in report.items() if not ok]
    say(f"after {args.steps} steps, {len(report)} params gathered whole and compared:")
    say(f"  max abs difference of an element      {report[worst_abs][0]:.3e} ({worst_abs})")
    say(f"  max rel difference of a tensor (norm) {report[worst_rel][1]:.3e} ({worst_rel})")
    say(f"  |{args.candidate} - torch| <= {args.atol:g} + {args.rtol:g} * |torch| element by element: "
        + ("every param matches" if not failed else f"FAILED for {len(failed)}, e.g. {', '.join(failed[:5])}"))
    dist.destroy_process_group()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
