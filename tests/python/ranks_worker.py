#!/usr/bin/env python3
"""One rank of tests/python/test_torch_ranks_gpu.py: optgen.torch optimizers on DTensor shards against
the same optimizers on whole tensors, and distributed checkpoints. Prints one JSON line per check
(rank 0 only).

    torchrun --standalone --nproc_per_node 2 ranks_worker.py trajectories [--no-reduce] [--backend gloo]
    torchrun --standalone --nproc_per_node 2 ranks_worker.py muon [--no-gather] [--backend gloo]
    torchrun --standalone --nproc_per_node 2 ranks_worker.py save DIR [--backend gloo]
    torchrun --standalone --nproc_per_node 2 ranks_worker.py load DIR [--backend gloo]  # or 1: one rank's mesh
    python3 ranks_worker.py load DIR       # one process, one GPU, plain tensors ("ranks": 0)

--backend nccl (the default) puts each rank on a GPU of its own; gloo puts every rank on the first
GPU (a process standing in for each rank, on a machine of one GPU), where the all-reduces are
gloo's on CUDA tensors and nothing is captured in a CUDA graph (gloo's collectives are not). No
other collective runs: each rank takes its shard of the whole gradients itself, and compares its
own shards with the same part of the whole tensors (the worst violation all-reduced).

The model holds tensors that two ranks shard unevenly along dimension 0 (rows of ceil(n / 2), as
fully_shard splits them): w1 37x19 (19 and 18 rows), b1 37, w2 5x37 (3 and 2
rows), emb 3x4 (2 and 1) and scale 1 (1 and 0: rank 1's shard is empty), in three param groups, the
last holding only scale (a group with no elements on rank 1); Adafactor's groups
(ADAFACTOR_GROUPS) hold conv 4x3x2x2 too (whole matrices on each rank) and row 1x6 (rank 1 holds
none of its rows, and still sums its columns). Gradients are whole tensors drawn
from a seed per step, the same in every process (plus, for the D-adaptation cases, a part the
same every step: STEADY); each rank takes its shard of them.

trajectories: every case steps a sharded copy (fully_shard) and a whole copy (each rank holds one,
as one GPU would) from the same init with the same gradients; after every step each rank's
shards must equal the same rows of the whole copy's within |a - b| <= ATOL + RTOL * |b|
(the same arithmetic; only the order in which a reduction's partial sums are added differs). It
reports the worst ratio |a - b| / (ATOL + RTOL * |b|) ("violation", at most 1 to pass) and the
largest difference. --no-reduce removes the hook that combines the ranks' reductions, so each rank
reads its own shards' norms: the check must then fail for every case that reduces. Last, an
Adafactor of a DTensor sharded along dimension 1 must be refused (its rows are split). AdamMini
(adam_mini) takes the named params with every block rule among them: heads and rows whole on each
rank, and the one block of scale, conv and row cut across the ranks (rank 1's part of scale and
of row empty); a query whose shards cut a head must be refused.

muon: optgen.torch.Muon on the matrices (w1, w2, emb, conv 4x3x2x2, row 1x6: rank 1's shard of
it empty) in two groups of different variants (Nesterov's momentum and plain), sharded and whole,
eagerly and (nccl) in a CUDA graph, and with Newton-Schulz in f32. Newton-Schulz runs in bf16 on
batches of other sizes on the owner than on one GPU, so cuBLAS may round differently: each step may
differ by MUON_TOL of lr times the step's scale, far below what orthogonalising a shard instead of
the whole matrix changes (--no-gather: each rank orthogonalises its own rows, and the check must
fail); in f32 by a hundredth of that.

save: steps a sharded copy SAVE_AT steps, saves model and optimizer through
torch.distributed.checkpoint (get_model_state_dict / get_optimizer_state_dict), steps on to STEPS
and keeps each rank's final shards in DIR/<case>.final.<rank>.pt (AdamW with master copies on
bf16 params among the cases, and AdamW and AdamMini with 8-bit states on a model with BIG). load: a new copy
(sharded under torchrun, plain tensors in one process) loads DIR, steps from SAVE_AT to STEPS and
must end where save did (8-bit states loaded into another layout: within RESHARD_8BIT_ATOL).
Prodigy's state_dict keeps s and p0 flat for plain tensors (prodigyopt's layout) but in the param's
shape for DTensors, so its sharded checkpoint does not load into plain tensors: reported as an error.
"""

import argparse
import faulthandler
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException  # a BaseException
from torch.distributed.checkpoint.state_dict import (get_model_state_dict, get_optimizer_state_dict,
                                                     set_model_state_dict, set_optimizer_state_dict)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor, Shard

import optgen.torch as ot

SHAPES = {"w1": (37, 19), "b1": (37,), "w2": (5, 37), "emb": (3, 4), "scale": (1,), "conv": (4, 3, 2, 2),
          "row": (1, 6)}
GROUPS = (("w1", "w2", "emb"), ("b1",), ("scale",))
STEPS, SAVE_AT = 8, 4
SAVED_RANKS = 2  # save runs on two ranks
RTOL, ATOL = 1e-5, 1e-6

CASES = {
    "adamw": lambda groups: ot.AdamW(groups, lr=1e-2, weight_decay=0.1),
    "adamw_clipped": lambda groups: ot.AdamW(groups, lr=1e-2, weight_decay=0.1, max_grad_norm=1.0),
    "lamb": lambda groups: ot.LAMB(groups, lr=1e-2, weight_decay=0.1),
    "lamb_clipped": lambda groups: ot.LAMB(groups, lr=1e-2, weight_decay=0.1, max_grad_norm=1.0),
    "lars": lambda groups: ot.LARS(groups, lr=0.1, momentum=0.9, weight_decay=1e-2),
    "prodigy": lambda groups: ot.Prodigy(groups, lr=1.0, weight_decay=0.01),
    "dadapt_adam": lambda groups: ot.DAdaptAdam(groups, lr=1.0),
    "cautious_adamw": lambda groups: ot.CautiousAdamW(groups, lr=1e-2),
    "adafactor": lambda groups: ot.Adafactor(groups, lr=1e-2, weight_decay=0.1),
    "adam_mini": lambda named: adam_mini(named),
}
REDUCING = sorted(set(CASES) - {"adamw"})  # those whose step reads a reduction
# The D-adaptation cases' gradients hold a direction that persists from step to step (this weight
# of a second normal draw, the same every step), as training's do. Drawn afresh each step alone,
# they leave D's estimate under d0 for all STEPS: D never moves and the sums it reads go unchecked.
STEADY = {"prodigy": 0.5, "dadapt_adam": 0.5}
# Checkpointed too: AdamW with fp32 master copies of bf16 params (state "master_param"), and
# bitsandbytes' AdamW8bit storage on a model with a tensor large enough for 8-bit states (BIG).
MASTER = {"adamw_master": lambda groups: ot.AdamW(groups, lr=1e-2, weight_decay=0.1, master_weights=True)}
EIGHT_BIT = {"adamw_8bit": lambda groups: ot.AdamW(groups, lr=1e-2, weight_decay=0.1,
                                                    state_dtype={"*": "q8", "exp_avg_sq": "uq8"}),
             # Adam-mini's moments in 8 bits: its step on shards (rows summed across the ranks) walks
             # 8-bit blocks; big is one block of Adam-mini's, cut across the ranks.
             "adam_mini_8bit": lambda named: adam_mini(named, state_dtype={"*": "q8", "vmean": torch.float32,
                                                                           "v": "uq8"})}
CHECKPOINTED = ("adamw_clipped", "prodigy", "adafactor", "adamw_master", "adam_mini", "adamw_8bit", "adam_mini_8bit")
# 8-bit states from 4096 elements: big's halves (75 rows, 4800 elements) are codes on each rank,
# in blocks of 256 from each half's start, which the whole tensor's blocks cut elsewhere (4800 =
# 18.75 blocks). A checkpoint holds the states' values; loaded into another layout they are
# quantised in its blocks, each value moving by up to half a code's step of its new block's
# absmax, and a run on from there differs from the saved one's by up to RESHARD_8BIT_ATOL.
BIG = {"big": (150, 64)}
RESHARD_8BIT_ATOL = 2e-3
# Adafactor's groups: rows and columns of matrices split unevenly (w1, w2, emb) and of one whose
# rank 1 holds none of its rows (row), a conv weight whose matrices are whole on each rank, vectors.
ADAFACTOR_GROUPS = (("w1", "conv", "row"), ("w2", "emb", "b1", "scale"))


def adam_mini(named, **options):
    """AdamMini over the named params, every block rule among them: w2 as 5 heads of 37 (dim 37,
    37 heads; its shards hold 3 and 2 heads), w1 and emb a block per row, b1 Adam's, and scale,
    conv and row one block each, which the shards cut (rank 1's parts of scale and row empty)."""
    opt = ot.AdamMini(named, lr=1e-2, weight_decay=0.1, dim=37, n_heads=37, **options)
    opt.wqk_names, opt.mlp_names, opt.embd_names, opt.adam_block_names = {"w2"}, {"w1"}, {"emb"}, {"b1"}
    return opt


class Model(torch.nn.Module):
    def __init__(self, shapes=SHAPES, steady=0.0):
        super().__init__()
        self.shapes, self.steady = shapes, steady
        generator = torch.Generator().manual_seed(0)
        for name, shape in shapes.items():
            self.register_parameter(name, torch.nn.Parameter(torch.randn(shape, generator=generator)))

    def groups(self):
        return [{"params": [getattr(self, name) for name in names]} for names in GROUPS]

    def groups_of(self, case):
        """The param groups case `case` steps (AdamMini's: the named params)."""
        if case.startswith("adam_mini"):
            return list(self.named_parameters())
        names = ADAFACTOR_GROUPS if case.startswith("adafactor") else GROUPS
        groups = [{"params": [getattr(self, name) for name in group]} for group in names]
        groups[0]["params"] += [getattr(self, name) for name in self.shapes if name not in SHAPES]
        return groups


def whole_grads(step, device, shapes=SHAPES, steady=0.0):
    generator, fixed = torch.Generator().manual_seed(1000 + step), torch.Generator().manual_seed(999)
    return {name: (torch.randn(shape, generator=generator) + steady * torch.randn(shape, generator=fixed)).to(device)
            for name, shape in shapes.items()}


def ranks():
    return (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)


def part(t):
    """This rank's part of whole tensor t as Shard(0) splits it over the ranks: rows of ceil(n /
    ranks) each, the last rank's fewer, an empty part past the end (fully_shard's split)."""
    rank, world = ranks()
    size = -(-t.shape[0] // world)
    begin = min(rank * size, t.shape[0])
    return t[begin:min(begin + size, t.shape[0])]


def set_grads(model, step, device):
    for name, g in whole_grads(step, device, model.shapes, model.steady).items():
        p = getattr(model, name)
        g = g.to(p.dtype)
        if isinstance(p, DTensor):
            g = DTensor.from_local(part(g).contiguous(), p.device_mesh, p.placements, run_check=False, shape=g.shape,
                                   stride=g.stride())
        p.grad = g


def compare(a_model, b_model, rtol=RTOL, atol=ATOL):
    """The worst violation of the tolerance and the largest difference over every param of a_model
    (sharded or whole) against b_model's (whole): each rank its own part, then the worst of all."""
    violation, largest = 0.0, 0.0
    for name in a_model.shapes:
        a, b = getattr(a_model, name).detach(), getattr(b_model, name).detach()
        if isinstance(a, DTensor):
            a, b = a.to_local(), part(b)
        diff = (a.double() - b.double()).abs()
        if diff.numel():
            violation = max(violation, (diff / (atol + rtol * b.double().abs())).max().item())
            largest = max(largest, diff.max().item())
    if dist.is_initialized():
        worst = torch.tensor([violation, largest], dtype=torch.float64, device=a.device)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        violation, largest = worst.tolist()
    return violation, largest


def report(rank, **fields):
    if rank == 0:
        print(json.dumps(fields), flush=True)


def dtype_of(case):
    return torch.bfloat16 if case in MASTER else torch.float32


def shapes_of(case):
    return {**SHAPES, **BIG} if case in EIGHT_BIT else SHAPES


def sharded_model(device, mesh, dtype=torch.float32, shapes=SHAPES, steady=0.0):
    model = Model(shapes, steady).to(device, dtype)
    fully_shard(model, mesh=mesh)
    return model


def trajectories(rank, device, mesh, no_reduce, backend):
    if no_reduce:  # each rank reads its own shards' reductions
        ot.Optimizer._reduce_across_ranks = lambda self, engine, params: None
    for case, make in CASES.items():
        steady = STEADY.get(case, 0.0)
        sharded, reference = sharded_model(device, mesh, steady=steady), Model(steady=steady).to(device)
        opt, ref = make(sharded.groups_of(case)), make(reference.groups_of(case))
        violation, largest, norms = 0.0, 0.0, 0.0
        for step in range(STEPS):
            set_grads(sharded, step, device)
            set_grads(reference, step, device)
            opt.step()
            ref.step()
            v, d = compare(sharded, reference)
            violation, largest = max(violation, v), max(largest, d)
            if "clipped" in case:  # the published global norms: the whole tensors'
                for g in range(len(GROUPS)):
                    a, b = opt.grad_norm(g).item(), ref.grad_norm(g).item()
                    norms = max(norms, abs(a - b) / b)
        # D-adaptation's D, where the case has one: the whole copy's after STEPS (d0 if it never moved)
        d = ref.state_dict()["param_groups"][0].get("d") if case in STEADY else None
        report(rank, check="trajectory", case=case, violation=violation, largest=largest, grad_norm_rel=norms, d=d)
    if backend == "nccl":  # gloo's collectives cannot be captured
        report(rank, check="trajectory", case="lamb_clipped_graph",
               violation=captured(device, mesh, CASES["lamb_clipped"]))
        report(rank, check="trajectory", case="adafactor_graph",
               violation=captured(device, mesh, CASES["adafactor"], lambda model: model.groups_of("adafactor")))
        report(rank, check="trajectory", case="adam_mini_graph",
               violation=captured(device, mesh, CASES["adam_mini"], lambda model: model.groups_of("adam_mini")))
    # A shard along dimension 1 splits the columns of a matrix, which Adafactor cannot step: refused.
    world = dist.get_world_size()
    local = torch.zeros(37, 10, device=device)
    param = torch.nn.Parameter(DTensor.from_local(local, mesh, [Shard(1)], run_check=False, shape=(37, 10 * world),
                                                  stride=(10 * world, 1)))
    param.grad = torch.zeros_like(param)
    try:
        ot.Adafactor([param]).step()
        report(rank, check="refusal", case="adafactor_shard1", error=None)
    except ValueError as e:
        report(rank, check="refusal", case="adafactor_shard1", error=str(e))
    # AdamMini's query of 2 heads of 3 rows (dim 6), its rows split 4 and 2 (as no fully_shard
    # would, but a DTensor may be): each shard cuts a head, refused.
    rows = 4 if rank == 0 else 2
    query = torch.nn.Parameter(DTensor.from_local(torch.zeros(rows, 6, device=device), mesh, [Shard(0)], run_check=False,
                                                  shape=(6, 6), stride=(6, 1)))
    query.grad = torch.zeros_like(query)
    try:
        ot.AdamMini([("wq", query)], dim=6, n_heads=2).step()
        report(rank, check="refusal", case="adam_mini_cut_head", error=None)
    except ValueError as e:
        report(rank, check="refusal", case="adam_mini_cut_head", error=str(e))


def captured(device, mesh, make, groups=Model.groups, tolerance=lambda step: {}):
    """The worst violation of a step captured in a CUDA graph (the collectives inside it, gradients
    in place) against eager steps of whole tensors: `make` makes the optimizer of `groups` of a
    model, compare() checks step `step` within tolerance(step)."""
    sharded, reference = sharded_model(device, mesh), Model().to(device)
    opt, ref = make(groups(sharded)), make(groups(reference))
    set_grads(sharded, 0, device)
    set_grads(reference, 0, device)
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # torch's recipe: a first (real) step on a side stream
        opt.step()
    torch.cuda.current_stream(device).wait_stream(side)
    ref.step()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        opt.step()
    violation = 0.0
    for step in range(1, STEPS):
        for name, g in whole_grads(step, device).items():
            getattr(sharded, name).grad.to_local().copy_(part(g))
        graph.replay()
        set_grads(reference, step, device)
        ref.step()
        violation = max(violation, compare(sharded, reference, **tolerance(step))[0])
    return violation


MUON_GROUPS = ((("w1", "conv", "row"), {}), (("w2", "emb"), {"lr": 0.02, "nesterov": False}))
MUON_LR, MUON_TOL = 0.02, 0.02


def muon_tolerance(step):
    """|a - b| within MUON_TOL of lr times the largest scale (sqrt(37 / 19)) a step, for each step so far."""
    return dict(rtol=0.0, atol=MUON_TOL * MUON_LR * (37 / 19) ** 0.5 * (step + 1))


def muon_groups(model):
    return [{"params": [getattr(model, name) for name in names], **options} for names, options in MUON_GROUPS]


def muon(rank, device, mesh, no_gather, backend):
    if no_gather:  # each rank orthogonalises its own rows, as if they were the whole matrix
        import optgen.torch._optimizer as optimizer_module

        def local(engine, params, device):
            def apply(work):
                for m in work.matrices:
                    if m.batch:
                        scratch = torch.empty(engine.matrix_function_scratch_bytes(m.group, m.value, m.batch, m.rows,
                                                                                   m.cols, m.dtype),
                                              dtype=torch.uint8, device=device)
                        engine.apply_matrix_function(m.group, m.value, m.arguments, m.x, scratch.data_ptr(), m.batch,
                                                     m.rows, m.cols, work.stream)
            return apply
        optimizer_module.RankMatrices = local
    sharded, reference = sharded_model(device, mesh), Model().to(device)
    opt = ot.Muon(muon_groups(sharded), lr=MUON_LR)
    ref = ot.Muon(muon_groups(reference), lr=MUON_LR)
    violation, largest = 0.0, 0.0
    for step in range(STEPS):
        set_grads(sharded, step, device)
        set_grads(reference, step, device)
        opt.step()
        ref.step()
        v, d = compare(sharded, reference, **muon_tolerance(step))
        violation, largest = max(violation, v), max(largest, d)
    report(rank, check="muon", case="muon", violation=violation, largest=largest)
    if no_gather:
        return
    # Newton-Schulz in f32 (state_dtype={"o": torch.float32}): the rows moved and the products run
    # in f32, which batches of other sizes round alike but for their sums' order (a hundredth of
    # MUON_TOL).
    sharded, reference = sharded_model(device, mesh), Model().to(device)
    opt = ot.Muon(muon_groups(sharded), lr=MUON_LR, state_dtype={"o": torch.float32})
    ref = ot.Muon(muon_groups(reference), lr=MUON_LR, state_dtype={"o": torch.float32})
    violation = 0.0
    for step in range(STEPS):
        set_grads(sharded, step, device)
        set_grads(reference, step, device)
        opt.step()
        ref.step()
        tolerance = muon_tolerance(step)
        tolerance["atol"] /= 100
        violation = max(violation, compare(sharded, reference, **tolerance)[0])
    report(rank, check="muon", case="muon_f32", violation=violation)
    if backend != "nccl":
        return
    # In a CUDA graph: the all-to-alls inside it.
    violation = captured(device, mesh, lambda groups: ot.Muon(groups, lr=MUON_LR), muon_groups, muon_tolerance)
    report(rank, check="muon", case="muon_graph", violation=violation)


def save(rank, device, mesh, directory):
    for case in CHECKPOINTED:
        model = sharded_model(device, mesh, dtype_of(case), shapes_of(case))
        opt = {**CASES, **MASTER, **EIGHT_BIT}[case](model.groups_of(case))
        for step in range(STEPS):
            if step == SAVE_AT:
                dcp.save({"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)},
                         checkpoint_id=os.path.join(directory, case))
            set_grads(model, step, device)
            opt.step()
        # Each rank keeps its shards; load joins them (the rows of every rank, in rank order).
        torch.save({name: getattr(model, name).detach().to_local().cpu() for name in model.shapes},
                   os.path.join(directory, f"{case}.final.{rank}.pt"))
        report(rank, check="save", case=case)


def load(rank, device, mesh, directory):
    for case in CHECKPOINTED:
        dtype, shapes = dtype_of(case), shapes_of(case)
        model = sharded_model(device, mesh, dtype, shapes) if mesh is not None else Model(shapes).to(device, dtype)
        opt = {**CASES, **MASTER, **EIGHT_BIT}[case](model.groups_of(case))
        state = {"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}
        try:
            dcp.load(state, checkpoint_id=os.path.join(directory, case))
        except (Exception, CheckpointException) as e:  # reported: Prodigy's flat s and p0 in plain tensors
            report(rank, check="load", case=case, ranks=0, error=str(e)[-2000:])
            continue
        set_model_state_dict(model, state["model"])
        set_optimizer_state_dict(model, opt, state["optim"])
        for step in range(SAVE_AT, STEPS):
            set_grads(model, step, device)
            opt.step()
        shards = [torch.load(os.path.join(directory, f"{case}.final.{r}.pt")) for r in range(SAVED_RANKS)]
        expected = Model(shapes)
        with torch.no_grad():
            for name in shapes:
                getattr(expected, name).copy_(torch.cat([shard[name] for shard in shards]))
        world = dist.get_world_size() if mesh is not None else 0
        resharded = case in EIGHT_BIT and world != SAVED_RANKS  # quantised in other blocks
        tolerance = dict(rtol=0.0, atol=RESHARD_8BIT_ATOL) if resharded else {}
        violation, largest = compare(model, expected.to(device), **tolerance)
        report(rank, check="load", case=case, ranks=world, violation=violation, largest=largest)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("trajectories", "muon", "save", "load"))
    parser.add_argument("directory", nargs="?")
    parser.add_argument("--no-reduce", action="store_true")
    parser.add_argument("--no-gather", action="store_true")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    args = parser.parse_args()
    # A collective that one rank never joins hangs the others: print where each stands and end.
    faulthandler.dump_traceback_later(float(os.environ.get("RANKS_WORKER_TIMEOUT", 240)), exit=True)
    distributed = "LOCAL_RANK" in os.environ
    rank, device, mesh = 0, torch.device("cuda", 0), None
    if distributed:
        dist.init_process_group(args.backend)
        rank = dist.get_rank()
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]) if args.backend == "nccl" else 0)
        torch.cuda.set_device(device)
        mesh = init_device_mesh("cuda", (dist.get_world_size(),))
    elif args.mode != "load":
        sys.exit("trajectories, muon and save run under torchrun")
    if args.mode == "trajectories":
        trajectories(rank, device, mesh, args.no_reduce, args.backend)
    elif args.mode == "muon":
        muon(rank, device, mesh, args.no_gather, args.backend)
    elif args.mode == "save":
        save(rank, device, mesh, args.directory)
    else:
        load(rank, device, mesh, args.directory)
    if distributed:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
