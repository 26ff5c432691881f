"""Reductions across ranks, for optimizers whose params are DTensors (FSDP2's fully_shard, or any
DTensor sharded over a device mesh).

Each rank steps its own shards; an optimizer that looks beyond one element (a per-tensor norm, a
global gradient norm, Prodigy's sums over the group) needs the whole tensor's reductions. The engine
hands its reduction hook the results of each Reduce stage before the stages that read them
(Engine.set_reduction_hook); RankReductions all-reduces each of the stage's reductions over the
mesh dimensions the params are sharded along, on the step's stream, so every rank reads the same
whole-tensor sums and maxima. Sums of two ranks are exact in any order of arrival; for more ranks
NCCL's order is fixed for a communicator, so a step is deterministic either way.
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
