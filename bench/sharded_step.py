#!/usr/bin/env python3
"""Step time of optgen.torch optimizers on DTensor shards (FSDP2's layout: every tensor split along
dimension 0 over the ranks), against one GPU stepping whole tensors.

    torchrun --standalone --nproc_per_node 2 bench/sharded_step.py --out sharded2.json
    python3 bench/sharded_step.py --out sharded1.json          # one GPU, plain tensors

For a workload's parameter shapes (bench/workloads/<name>.json), f32 params with persistent
gradients: the time of one step() per rank, from CUDA events around --steps back-to-back steps
after 5 warm-ups, the slowest rank's. Optimizers that reduce all-reduce their reductions across the
ranks inside the step (optgen.torch.Optimizer, DTensor params); torch's row clips with
clip_grad_norm_ (which all-reduces the DTensor norms) before its fused AdamW. Adafactor on shards
runs its step on shards (its row, column and matrix values computed where read) and all-reduces
the ranks' parts of its column and matrix sums too; on one GPU, its own step.

Muon steps the workload's hidden matrices (its 2-D tensors but those with a dimension of 32768 or
more, as bench/torch_muon.py picks them): optgen.torch.Muon gathers each matrix's momentum to an
owner rank, orthogonalises there and hands the rows back; torch.optim.Muon is timed on the same
params where it runs (on DTensors its matmuls redistribute them as DTensor does), else its error
is recorded.
"""

import argparse
import json
import os
import pathlib

import torch
import torch.distributed as dist

import optgen.torch as ot

REPO = pathlib.Path(__file__).resolve().parents[1]

METHODS = {
    "optgen AdamW": lambda params: ot.AdamW(params, lr=1e-3, weight_decay=0.01),
    "optgen AdamW, clipped": lambda params: ot.AdamW(params, lr=1e-3, weight_decay=0.01, max_grad_norm=1.0),
    "optgen LAMB": lambda params: ot.LAMB(params, lr=1e-3, weight_decay=0.01),
    "optgen Adafactor": lambda params: ot.Adafactor(params, lr=1e-2),
    "torch AdamW fused, clipped": lambda params: torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=True),
    "optgen Muon": lambda params: ot.Muon(params, lr=0.02),
    "torch Muon": lambda params: torch.optim.Muon(params, lr=0.02),
}
EMBEDDING = 32768  # a dimension at least this long is a token embedding or an output head


def make(shapes, mesh):
    """Params with gradients: DTensors sharded over `mesh` along dimension 0, or plain tensors."""
    from torch.distributed.tensor import Shard, distribute_tensor
    generator = torch.Generator(device="cuda").manual_seed(0)
    params = []
    for shape in shapes:
        p = torch.randn(shape, device="cuda", generator=generator) * 0.01
        g = torch.randn(shape, device="cuda", generator=generator) * 1e-3
        if mesh is not None:
            p, g = distribute_tensor(p, mesh, [Shard(0)]), distribute_tensor(g, mesh, [Shard(0)])
        params.append(torch.nn.Parameter(p))
        params[-1].grad = g
    return params


def measure(name, optimizer, params, steps):
    def step():
        if "clipped" in name and "torch" in name:
            torch.nn.utils.clip_grad_norm_(params, 1.0, foreach=True)
        optimizer.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        step()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / steps


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="llama-1b")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--out", type=pathlib.Path)
    p.add_argument("--only", nargs="*", help="the methods whose names hold one of these words (default: all)")
    args = p.parse_args()
    mesh, rank, world = None, 0, 1
    if "LOCAL_RANK" in os.environ:
        from torch.distributed.device_mesh import init_device_mesh
        dist.init_process_group("nccl")
        rank, world = dist.get_rank(), dist.get_world_size()
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        mesh = init_device_mesh("cuda", (world,))
    shapes = [tuple(s) for s in json.loads((REPO / "bench" / "workloads" / f"{args.workload}.json").read_text())["shapes"]]
    results = {"device": torch.cuda.get_device_name(), "ranks": world, "workload": args.workload, "ms": {}}
    hidden = [s for s in shapes if len(s) == 2 and max(s) < EMBEDDING]
    for name, make_optimizer in METHODS.items():
        if args.only and not any(word in name for word in args.only):
            continue
        params = make(hidden if "Muon" in name else shapes, mesh)
        try:
            ms = torch.tensor(measure(name, make_optimizer(params), params, args.steps), device="cuda")
        except Exception as e:  # noqa: BLE001 - torch.optim.Muon on DTensors, where it fails
            results.setdefault("errors", {})[name] = f"{type(e).__name__}: {str(e)[:300]}"
            continue
        if mesh is not None:
            dist.all_reduce(ms, op=dist.ReduceOp.MAX)
        results["ms"][name] = round(ms.item(), 3)
        del params
        torch.cuda.empty_cache()
    if rank == 0:
        print(json.dumps(results))
        if args.out:
            args.out.write_text(json.dumps(results, indent=1) + "\n")
    if mesh is not None:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
