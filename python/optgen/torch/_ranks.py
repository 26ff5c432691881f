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
there and hands the rows back (two all-to-alls a step).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from .._capi import ReductionResults
from ._device_array import DeviceArray


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
    or max, as each reduction is), or raises `error` (shard_groups' reason) at the first stage."""

    def __init__(self, groups: list, error: Optional[str], device: torch.device):
        self.groups = groups
        self.error = error
        self.device = device
        self._views: Dict[Tuple[int, int], torch.Tensor] = {}  # the engine's result buffers, as tensors

    def _doubles(self, address: int, count: int) -> torch.Tensor:
        view = self._views.get((address, count))
        if view is None:
            view = torch.as_tensor(DeviceArray(address, (count,), "<f8"), device=self.device)
            self._views[(address, count)] = view
        return view

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
        current = torch.cuda.current_stream(self.device)
        stream = current if current.cuda_stream == r.stream else torch.cuda.ExternalStream(r.stream, self.device)
        with torch.cuda.stream(stream):
            for part, op in parts:
                for group in self.groups:
                    dist.all_reduce(part, op=op, group=group)


def row_shards(rows: int, ranks: int) -> List[int]:
    """The rows of each rank's shard of a tensor of `rows` rows sharded along its first dimension
    (DTensor's Shard(0), FSDP2's fully_shard): torch.chunk's, ceil(rows / ranks) each, the last
    ones fewer or none."""
    chunk = -(-rows // ranks) if ranks else 0
    return [max(0, min(chunk, rows - r * chunk)) for r in range(ranks)]


class _Owned:
    """A rank's matrices of one shape and one set of arguments: their whole matrices, batched."""

    def __init__(self, key: tuple, engine, device: torch.device):
        self.value, self.rows, self.cols, self.arguments = key
        self.members: List[int] = []  # indices into RankMatrices._matrices
        self.engine, self.device = engine, device

    def allocate(self, group: int) -> None:
        count = len(self.members)
        self.group = group
        self.whole = torch.empty((count, self.rows, self.cols), dtype=torch.bfloat16, device=self.device)
        scratch = self.engine.matrix_function_scratch_bytes(count, self.rows, self.cols)
        self.scratch = torch.empty(max(1, scratch), dtype=torch.uint8, device=self.device)

    def apply(self, stream: int) -> None:
        self.engine.apply_matrix_function(self.group, self.value, self.arguments, self.whole.data_ptr(),
                                          self.scratch.data_ptr(), len(self.members), self.rows, self.cols, stream)


class RankMatrices:
    """An engine's matrix hook for params that are DTensors sharded along their first dimension
    over one process group (FSDP2's fully_shard): a matrix function (Muon's Newton-Schulz) needs
    each whole matrix, of which every rank holds some rows.

    Each matrix has an owner rank, the matrices spread over the ranks by their cost (the largest
    first, each to the least loaded rank). After the Reduce stage that
    stores a step's matrices, one all-to-all sends every rank's rows of each matrix to its owner;
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
        key = (work.stage, tuple((m.value, m.group, m.tensor, m.x, m.batch, m.rows, m.cols, m.arguments)
                                 for m in work.matrices))
        with torch.cuda.stream(self.stream_of(work)):
            plan = self._plans.get(key)
            if plan is None:
                plan = self._plans[key] = _Exchange(self, work)
            plan.run(work.stream)

    def stream_of(self, work) -> torch.cuda.Stream:
        """The step's stream, as torch's."""
        current = torch.cuda.current_stream(self.device)
        return current if current.cuda_stream == work.stream else torch.cuda.ExternalStream(work.stream, self.device)


class _Exchange:
    """What RankMatrices does after one Reduce stage of one binding: the views, splits and buffers
    of its two all-to-alls and its owned batches, made once."""

    def __init__(self, hook: RankMatrices, work):
        engine, rank, ranks, device = hook.engine, hook.rank, hook.ranks, hook.device
        self.group = hook.group
        # Every matrix of the stage, listed alike by every rank (the engine lists empty shards too):
        # (value, group, tensor), whole rows, columns, each rank's rows, this rank's Matrices.
        matrices = []
        for m in work.matrices:
            p = hook.params[(m.group, m.tensor)]
            rows, cols = p.shape[0], p.numel() // max(p.shape[0], 1)
            shards = row_shards(rows, ranks)
            if m.batch > 1 or m.rows != shards[rank] or m.cols != cols:
                raise ValueError(f"a DTensor param of shape {tuple(p.shape)} is bound as {m.batch} matrices of "
                                 f"{m.rows} x {m.cols}, not as rank {rank}'s {shards[rank]} rows of its {rows} x "
                                 f"{cols}: a matrix function of sharded params needs each one matrix sharded along "
                                 "its first dimension (Shard(0)), as fully_shard shards it")
            matrices.append(((m.value, m.group, m.tensor), rows, cols, shards, m))
        self.matrices = matrices
        # Owners: the costliest first (Newton-Schulz's products, m * m * n for m <= n), each to the
        # least loaded rank; all ranks reach the same answer.
        load = [0.0] * ranks
        owner = [0] * len(matrices)
        for i in sorted(range(len(matrices)), key=lambda i: (-self._cost(matrices[i]), i)):
            _, rows, cols, shards, _ = matrices[i]
            owner[i] = min(range(ranks), key=lambda r: (load[r], r))
            load[owner[i]] += self._cost(matrices[i])
        owned_by = [[i for i in range(len(matrices)) if owner[i] == r] for r in range(ranks)]
        # Arguments: an owner holds rows of each of its matrices, so its own work lists them.
        batches: Dict[tuple, _Owned] = {}
        self.position: Dict[int, Tuple[_Owned, int]] = {}
        for i in owned_by[rank]:
            mine = matrices[i][4]
            key = (mine.value, matrices[i][1], matrices[i][2], mine.arguments)
            batch = batches.setdefault(key, _Owned(key, engine, device))
            self.position[i] = (batch, len(batch.members))
            batch.members.append(i)
        for key, batch in batches.items():
            batch.allocate(matrices[batch.members[0]][0][1])
        self.batches = list(batches.values())

        def local_view(i):
            m = matrices[i][4]
            return _bf16(m.x, m.rows * m.cols, device) if m.rows else None

        def rows_of(i, r):  # rank r's rows of matrix i, as elements
            return matrices[i][3][r] * matrices[i][2]

        # Gather: to each rank its matrices' rows from this one; from each rank this one's matrices' rows.
        self.send_splits = [sum(rows_of(i, rank) for i in owned_by[d]) for d in range(ranks)]
        self.recv_splits = [sum(rows_of(i, s) for i in owned_by[rank]) for s in range(ranks)]
        self.send_views = [v for d in range(ranks) for i in owned_by[d] if (v := local_view(i)) is not None]
        self.send = torch.empty(sum(self.send_splits), dtype=torch.bfloat16, device=device)
        self.recv = torch.empty(sum(self.recv_splits), dtype=torch.bfloat16, device=device)
        # The received rows, source-major, as each batch's whole matrices read them (matrix-major).
        pieces: Dict[Tuple[int, int], torch.Tensor] = {}
        at = 0
        for s in range(ranks):
            for i in owned_by[rank]:
                n = rows_of(i, s)
                pieces[(i, s)] = self.recv[at:at + n]
                at += n
        self.assemble = [(batch, [pieces[(i, s)] for i in batch.members for s in range(ranks) if rows_of(i, s)])
                         for batch in self.batches]
        # Scatter back: the owner's whole matrices cut by rank, destination-major; received by owner.
        self.back_views = []
        for d in range(ranks):
            for i in owned_by[rank]:
                batch, j = self.position[i]
                first = sum(matrices[i][3][:d]) * matrices[i][2]
                if rows_of(i, d):
                    self.back_views.append(batch.whole[j].view(-1)[first:first + rows_of(i, d)])
        self.back_send = torch.empty(sum(self.recv_splits), dtype=torch.bfloat16, device=device)
        self.back_recv = torch.empty(sum(self.send_splits), dtype=torch.bfloat16, device=device)
        self.result_views = [v for o in range(ranks) for i in owned_by[o] if (v := local_view(i)) is not None]
        self.result_sizes = [v.numel() for v in self.result_views]
        self._check_alike(matrices, device)

    def _check_alike(self, matrices: list, device: torch.device) -> None:
        """Raises ValueError unless every rank lists the same matrices (their count and whole sizes):
        ranks that split them otherwise would wait for each other's rows for good. Once per binding,
        eagerly (a capture skips it)."""
        if torch.cuda.is_current_stream_capturing():
            return
        mine = torch.tensor([len(matrices), sum(rows * cols for _, rows, cols, _, _ in matrices)], device=device)
        every = [torch.empty_like(mine) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(every, mine, group=self.group)
        if any(not torch.equal(x, mine) for x in every):
            raise ValueError("the ranks bind different matrices (count, elements: "
                             f"{[tuple(x.tolist()) for x in every]}): every rank must hold the same params with "
                             "gradients, each its shard of every one (an empty one too)")

    @staticmethod
    def _cost(matrix) -> float:
        _, rows, cols, _, _ = matrix
        small, large = min(rows, cols), max(rows, cols)
        return float(small) * small * large

    def run(self, stream: int) -> None:
        if self.send_views:
            torch.cat(self.send_views, out=self.send)
        dist.all_to_all_single(self.recv, self.send, self.recv_splits, self.send_splits, group=self.group)
        for batch, pieces in self.assemble:
            torch.cat(pieces, out=batch.whole.view(-1))
            batch.apply(stream)
        if self.back_views:
            torch.cat(self.back_views, out=self.back_send)
        dist.all_to_all_single(self.back_recv, self.back_send, self.send_splits, self.recv_splits, group=self.group)
        if self.result_views:
            torch._foreach_copy_(self.result_views, list(torch.split(self.back_recv, self.result_sizes)))


def _bf16(address: int, count: int, device: torch.device) -> torch.Tensor:
    """`count` bf16 values at device address `address`, as a flat tensor (through int16: the array
    interface has no bf16)."""
    return torch.as_tensor(DeviceArray(address, (count,), "<i2"), device=device).view(torch.bfloat16)
