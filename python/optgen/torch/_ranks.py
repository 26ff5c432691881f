"""Reductions and matrices across ranks, for optimizers whose params are DTensors (FSDP2's
fully_shard, or any DTensor sharded over a device mesh).

Each rank steps its own shards; an optimizer that looks beyond one element (a per-tensor norm, a
global gradient norm, Prodigy's sums over the group) needs the whole tensor's reductions. The engine
hands its reduction hook the results of each Reduce stage before the stages that read them
(Engine.set_reduction_hook); RankReductions all-reduces each of the stage's reductions over the
mesh dimensions the params are sharded along, on the step's stream, so every rank reads the same
whole-tensor sums and maxima. Sums of two ranks are exact in any order of arrival; for more ranks
NCCL's order is fixed for a communicator, so a step is deterministic either way.

A matrix function (Muon's Newton-Schulz) needs whole matrices: RankMatrices, the engine's matrix
hook (Engine.set_matrix_hook), gathers each matrix's rows to one owner rank, applies the function
there and hands the rows back (two all-to-alls a step, planned by optgen._matrix_exchange).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from .. import _capi
from .._capi import ReductionResults
from .._matrix_exchange import ExchangePlan, row_shards
from ._device_array import DeviceArray
from ._dtypes import torch_dtype


def shard_groups(params: List[torch.Tensor]) -> Tuple[list, Optional[str]]:
    """The process groups a reduction of these params' shards must be summed over (one per mesh
    dimension they are sharded along), and None; or [] and why their reductions cannot be combined
    (a plain tensor beside DTensors, two meshes, a Partial placement): the reason is raised at the
    first step that reduces, since an optimizer without reductions steps such params fine."""
    from torch.distributed.tensor import DTensor

    dtensors = [p for p in params if isinstance(p, DTensor)]
    if not dtensors:
        return [], None
    first = dtensors[0]
    kinds = _placement_kind(first)
    for p in params:
        if not isinstance(p, DTensor):
            return [], (f"the optimizer reduces over tensors (norms, sums), but its params mix DTensors and a plain "
                        f"tensor of shape {tuple(p.shape)}, whose reductions cannot be told apart from a shard's: "
                        "shard every param of the optimizer (fully_shard the whole model), or step the plain ones "
                        "with another optimizer")
        if p.device_mesh != first.device_mesh or _placement_kind(p) != kinds:
            return [], (f"the optimizer reduces over tensors (norms, sums), but its DTensor params lie on different "
                        f"meshes or placements ({first.device_mesh} {list(first.placements)} and {p.device_mesh} "
                        f"{list(p.placements)}): use one optimizer per mesh and placement")
    if "partial" in kinds:
        return [], (f"a DTensor param has a Partial placement ({list(first.placements)}), which holds no shard of "
                    "the param to step: redistribute it to Shard or Replicate")
    return [first.device_mesh.get_group(d) for d, kind in enumerate(kinds) if kind == "shard"], None


def _placement_kind(p: torch.Tensor) -> List[str]:
    """Per mesh dimension: "shard", "replicate" or "partial" (which dimension a shard splits does not
    matter to a sum or a maximum)."""
    return ["shard" if x.is_shard() else "partial" if x.is_partial() else "replicate" for x in p.placements]


class RankReductions:
    """An engine's reduction hook: all-reduces the results of each Reduce stage over `groups` (sum
    or max, as each reduction is), or raises `error` (shard_groups' reason) at the first stage. The
    ranks' parts of row, column and matrix sums (Adafactor's of matrices whose rows are split,
    Adam-mini's of one block cut along its columns: the results' row_runs, col_runs and
    matrix_runs) are gathered into one buffer per kind, summed and put back."""

    def __init__(self, groups: list, error: Optional[str], device: torch.device):
        self.groups = groups
        self.error = error
        self.device = device
        self._views: Dict[tuple, torch.Tensor] = {}  # the engine's result buffers, as tensors
        self._indices: Dict[tuple, torch.Tensor] = {}  # the floats of a list of runs

    def _doubles(self, address: int, count: int) -> torch.Tensor:
        return self._view(address, count, "<f8")

    def _view(self, address: int, count: int, kind: str) -> torch.Tensor:
        view = self._views.get((address, count, kind))
        if view is None:
            view = torch.as_tensor(DeviceArray(address, (count,), kind), device=self.device)
            self._views[(address, count, kind)] = view
        return view

    def _run_parts(self, address: int, runs: List[Tuple[int, int]]) -> List[tuple]:
        """What to sum for `runs` of the float32 buffer at `address`: (tensor, indices or None): the
        run itself where there is one, else the buffer and the indices of every float of the runs
        (made once per list of runs)."""
        if not runs:
            return []
        end = max(first + count for first, count in runs)
        floats = self._view(address, end, "<f4")
        if len(runs) == 1:
            first, count = runs[0]
            return [(floats[first:first + count], None)]
        key = (address, tuple(runs))
        index = self._indices.get(key)
        if index is None:
            index = torch.cat([torch.arange(first, first + count) for first, count in runs]).to(self.device)
            self._indices[key] = index
        return [(floats, index)]

    def __call__(self, r: ReductionResults) -> None:
        if self.error:
            raise ValueError(self.error)
        n, tensors, groups = len(r.reductions), r.num_tensors, r.num_groups
        tensor_results = self._doubles(r.tensor_results, n * tensors)
        group_results = self._doubles(r.group_results, n * groups) if r.group_results else None
        parts = []
        for i, reduction in enumerate(r.reductions):
            if reduction.stage != r.stage:
                continue
            op = dist.ReduceOp.MAX if reduction.is_max else dist.ReduceOp.SUM
            parts.append((tensor_results[i * tensors:(i + 1) * tensors], op))
            if reduction.over_group:
                parts.append((group_results[i * groups:(i + 1) * groups], op))
        runs = [part for address, runs in ((r.row_results, r.row_runs), (r.col_results, r.col_runs),
                                           (r.matrix_results, r.matrix_runs))
                for part in self._run_parts(address, runs)]
        with torch.cuda.stream(_step_stream(r.stream, self.device)):
            for part, op in parts:
                for group in self.groups:
                    dist.all_reduce(part, op=op, group=group)
            for floats, index in runs:
                part = floats if index is None else floats.index_select(0, index)
                for group in self.groups:
                    dist.all_reduce(part, group=group)
                if index is not None:
                    floats.index_copy_(0, index, part)


def _step_stream(stream: int, device: torch.device) -> torch.cuda.Stream:
    """The engine's step stream (a hook's `stream`) as torch's: the current stream, or that one."""
    current = torch.cuda.current_stream(device)
    return current if current.cuda_stream == stream else torch.cuda.ExternalStream(stream, device)


class _Owned:
    """A rank's matrices of one shape and one set of arguments: their whole matrices, batched."""

    def __init__(self, key: tuple, engine, device: torch.device, dtype: int):
        self.value, self.rows, self.cols, self.arguments = key
        self.dtype = dtype
        self.members: List[int] = []  # indices into the stage's matrices (ExchangePlan's)
        self.engine, self.device = engine, device

    def allocate(self, group: int) -> None:
        count = len(self.members)
        self.group = group
        self.whole = torch.empty((count, self.rows, self.cols), dtype=torch_dtype(self.dtype), device=self.device)
        scratch = self.engine.matrix_function_scratch_bytes(group, self.value, count, self.rows, self.cols, self.dtype)
        self.scratch = torch.empty(max(1, scratch), dtype=torch.uint8, device=self.device)

    def apply(self, stream: int) -> None:
        self.engine.apply_matrix_function(self.group, self.value, self.arguments, self.whole.data_ptr(),
                                          self.scratch.data_ptr(), len(self.members), self.rows, self.cols, stream)


class RankMatrices:
    """An engine's matrix hook for params that are DTensors sharded along their first dimension
    over one process group (FSDP2's fully_shard): a matrix function (Muon's Newton-Schulz) needs
    each whole matrix, of which every rank holds some rows.

    Each matrix has an owner rank, the matrices spread over the ranks by their cost (the largest
    first, each to the least loaded rank). After the Reduce stage that stores a step's matrices,
    one all-to-all sends every rank's rows of each matrix to its owner;
    each owner applies the function to its whole matrices, batched by shape as one GPU does; a
    second all-to-all hands every rank its rows of the results back. All of it on the step's stream,
    capturable in a CUDA graph with NCCL. `params`: by (engine group, tensor index)."""

    def __init__(self, engine, params: Dict[Tuple[int, int], torch.Tensor], device: torch.device):
        self.engine, self.params, self.device = engine, params, device
        self.group, self.error = self._row_group(list(params.values()))
        if self.error is None:
            self.rank, self.ranks = dist.get_rank(self.group), dist.get_world_size(self.group)
        self._plans: Dict[tuple, "_Exchange"] = {}

    @staticmethod
    def _row_group(params: List[torch.Tensor]):
        """The process group whose ranks hold the rows of these params, and None; or None and why
        their matrices cannot be brought together (raised at the first step that needs them)."""
        from torch.distributed.tensor import Shard

        groups, error = shard_groups(params)
        if error is None and len(groups) != 1:
            error = f"the params are sharded along {len(groups)} mesh dimensions"
        for p in params:
            if error is None and any(x.is_shard() and x != Shard(0) for x in p.placements):
                error = f"a param of shape {tuple(p.shape)} has placements {list(p.placements)}"
        if error is not None:
            return None, (f"a matrix function (Muon's Newton-Schulz) needs whole matrices, gathered from the rows "
                          f"each rank holds: DTensor params sharded along their first dimension (Shard(0)) over one "
                          f"mesh dimension, as fully_shard shards them; but {error}")
        return groups[0], None

    def __call__(self, work) -> None:
        if self.error:
            raise ValueError(self.error)
        key = (work.stage, tuple((m.value, m.dtype, m.group, m.tensor, m.x, m.batch, m.rows, m.cols, m.arguments)
                                 for m in work.matrices))
        with torch.cuda.stream(_step_stream(work.stream, self.device)):
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = _Exchange(self, work)
            plan.run(work.stream)


class _Exchange:
    """What RankMatrices does after one Reduce stage of one binding: the views, splits and buffers
    of its two all-to-alls (optgen._matrix_exchange's plan) and its owned batches, made once."""

    def __init__(self, hook: RankMatrices, work):
        engine, rank, ranks, device = hook.engine, hook.rank, hook.ranks, hook.device
        self.group = hook.group
        # Every matrix of the stage, listed alike by every rank (the engine lists empty shards too).
        mine, shapes = list(work.matrices), []
        for m in mine:
            p = hook.params[(m.group, m.tensor)]
            rows, cols = p.shape[0], p.numel() // max(p.shape[0], 1)
            local = row_shards(rows, ranks)[rank]
            if m.batch > 1 or m.rows != local or m.cols != cols:
                raise ValueError(f"a DTensor param of shape {tuple(p.shape)} is bound as {m.batch} matrices of "
                                 f"{m.rows} x {m.cols}, not as rank {rank}'s {local} rows of its {rows} x {cols}: "
                                 "a matrix function of sharded params needs each one matrix sharded along its first "
                                 "dimension (Shard(0)), as fully_shard shards it")
            shapes.append((rows, cols))
        self._check_alike(shapes, device)
        dtypes = {m.dtype for m in mine}
        if len(dtypes) > 1:
            raise ValueError("the matrices of one step are bf16 and f32: keep every matrix value of the spec in one "
                             "dtype to step sharded params")
        dtype = dtypes.pop() if dtypes else _capi.BF16
        plan = ExchangePlan(shapes, ranks, rank)
        # The owned matrices in batches of one value, shape and arguments (an owner's own list
        # holds each of its matrices, an empty shard too, with the arguments of its group).
        batches: Dict[tuple, _Owned] = {}
        position: Dict[int, Tuple[_Owned, int]] = {}
        for i in plan.owned:
            key = (mine[i].value, *shapes[i], mine[i].arguments)
            batch = batches.setdefault(key, _Owned(key, engine, device, dtype))
            position[i] = (batch, len(batch.members))
            batch.members.append(i)
        for batch in batches.values():
            batch.allocate(mine[batch.members[0]].group)
        self.batches = list(batches.values())
        self.send_splits, self.recv_splits = plan.send_splits, plan.recv_splits
        # This rank's rows, where the engine keeps them: sent in the gather, written by the scatter.
        self.views = [_device_view(mine[i].x, mine[i].rows * mine[i].cols, dtype, device) for i in plan.sent]
        self.sizes = [v.numel() for v in self.views]
        self.send = torch.empty(sum(self.send_splits), dtype=torch_dtype(dtype), device=device)
        self.recv = torch.empty(sum(self.recv_splits), dtype=torch_dtype(dtype), device=device)
        received = {(x.matrix, x.rank): self.recv[x.at:x.at + x.length] for x in plan.gathered}
        self.assemble = [(batch, [received[(i, r)] for i in batch.members for r in range(ranks) if (i, r) in received])
                         for batch in self.batches]
        self.back_views = [position[x.matrix][0].whole[position[x.matrix][1]].view(-1)[x.first:x.first + x.length]
                           for x in plan.scattered]
        self.back_send = torch.empty(sum(self.recv_splits), dtype=torch_dtype(dtype), device=device)
        self.back_recv = torch.empty(sum(self.send_splits), dtype=torch_dtype(dtype), device=device)

    def _check_alike(self, shapes: list, device: torch.device) -> None:
        """Raises ValueError unless every rank lists the same matrices (their count and whole sizes):
        ranks that split them otherwise would wait for each other's rows for good. Once per binding,
        eagerly (a capture skips it)."""
        if torch.cuda.is_current_stream_capturing():
            return
        mine = torch.tensor([len(shapes), sum(rows * cols for rows, cols in shapes)], device=device)
        every = [torch.empty_like(mine) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(every, mine, group=self.group)
        if any(not torch.equal(x, mine) for x in every):
            raise ValueError("the ranks bind different matrices (count, elements: "
                             f"{[tuple(x.tolist()) for x in every]}): every rank must hold the same params with "
                             "gradients, each its shard of every one (an empty one too)")

    def run(self, stream: int) -> None:
        if self.views:
            torch.cat(self.views, out=self.send)
        dist.all_to_all_single(self.recv, self.send, self.recv_splits, self.send_splits, group=self.group)
        for batch, pieces in self.assemble:
            torch.cat(pieces, out=batch.whole.view(-1))
            batch.apply(stream)
        if self.back_views:
            torch.cat(self.back_views, out=self.back_send)
        dist.all_to_all_single(self.back_recv, self.back_send, self.send_splits, self.recv_splits, group=self.group)
        if self.views:
            torch._foreach_copy_(self.views, list(torch.split(self.back_recv, self.sizes)))



def _device_view(address: int, count: int, dtype: int, device: torch.device) -> torch.Tensor:
    """`count` values of `dtype` (BF16 or F32) at device address `address`, as a flat tensor (bf16
    through int16: the array interface has no bf16)."""
    if dtype == _capi.F32:
        return torch.as_tensor(DeviceArray(address, (count,), "<f4"), device=device)
    return torch.as_tensor(DeviceArray(address, (count,), "<i2"), device=device).view(torch.bfloat16)
