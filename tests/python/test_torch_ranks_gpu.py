"""optgen.torch on DTensor shards of two ranks (ranks_worker.py through torchrun): over two GPUs with
NCCL, and over one GPU with gloo (two processes standing in for the ranks, all-reduces on CUDA
tensors, no CUDA graph):
optimizers that reduce (clipping, LAMB, LARS, Prodigy, DAdaptAdam, cautious AdamW's mean) step as one
GPU holding whole tensors does, in eager steps and in a CUDA graph; without the all-reduce of their
reductions they do not (the check can fail); Muon gathers each matrix to an owner rank and steps as
one GPU does (each rank orthogonalising its own rows does not); Adafactor sums its column and
matrix results across the ranks and steps as one GPU does (a shard along dimension 1 is refused);
AdamMini sums the parts of a block cut across the ranks and steps as one GPU does;
checkpoints saved through
torch.distributed.checkpoint on two ranks load on two, on one rank, and (but Prodigy's) into one
process's plain tensors, AdamW's and AdamMini's 8-bit states among them (bit for bit on two ranks,
requantised in the blocks of another layout within ranks_worker.RESHARD_8BIT_ATOL). Each backend is skipped without its GPUs."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

WORKER = os.path.join(os.path.dirname(__file__), "ranks_worker.py")


def _need(backend):
    import torch
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < (2 if backend == "nccl" else 1):
        pytest.skip(f"{backend} needs {'two CUDA GPUs' if backend == 'nccl' else 'a CUDA GPU'} ({gpus} here)")


def _run(*args, ranks=2, backend="nccl"):
    """ranks_worker.py's JSON lines, under torchrun with `ranks` processes (0: one plain process)."""
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ranks}"]
    command = (launcher if ranks else [sys.executable]) + [WORKER, *args] + (["--backend", backend] if ranks else [])
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr[-6000:]}"
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


BACKENDS = pytest.mark.parametrize("backend", ["nccl", "gloo"])


@BACKENDS
def test_shards_step_as_whole_tensors(backend):
    _need(backend)
    results = {r["case"]: r for r in _run("trajectories", backend=backend)}
    trajectories = {case: r for case, r in results.items() if r["check"] == "trajectory"}
    assert len(trajectories) == (13 if backend == "nccl" else 10), results  # nccl: CUDA graphs too
    for case, r in trajectories.items():
        assert r["violation"] <= 1.0, (case, r)
        if "clipped" in case and "graph" not in case:
            assert r["grad_norm_rel"] <= 1e-6, (case, r)
        if case in ("prodigy", "dadapt_adam"):  # D moved from d0, so the sums it reads were checked
            assert r["d"] > 1e-6, (case, r)
    error = results["adafactor_shard1"]["error"]
    assert error and "Shard(1)" in error and "rows" in error, error
    error = results["adam_mini_cut_head"]["error"]
    assert error and "cuts a block" in error and "whole number of heads" in error, error


@BACKENDS
def test_the_check_fails_without_the_all_reduce(backend):
    _need(backend)
    results = [r for r in _run("trajectories", "--no-reduce", backend=backend) if r["check"] == "trajectory"]
    failed = {r["case"] for r in results if r["violation"] > 1.0}
    # Every case that reduces reads one rank's shards' norms and sums without the hook; plain AdamW does not.
    reducing = {"adamw_clipped", "lamb", "lamb_clipped", "lars", "prodigy", "dadapt_adam", "cautious_adamw",
                "adafactor", "adam_mini"}
    graphs = {"lamb_clipped_graph", "adafactor_graph", "adam_mini_graph"} if backend == "nccl" else set()
    assert failed >= reducing | graphs, results
    assert "adamw" not in failed, results


@BACKENDS
def test_muon_gathers_each_matrix_to_its_owner(backend):
    _need(backend)
    results = {r["case"]: r for r in _run("muon", backend=backend)}
    assert set(results) == ({"muon", "muon_f32", "muon_graph"} if backend == "nccl" else {"muon", "muon_f32"}), results
    for case, r in results.items():
        assert r["violation"] <= 1.0, (case, r)
    # Each rank orthogonalising its own rows steps otherwise: the check can fail.
    alone = _run("muon", "--no-gather", backend=backend)
    assert len(alone) == 1 and alone[0]["violation"] > 1.0, alone


@BACKENDS
def test_checkpoint_saved_on_two_ranks_loads_on_two_and_one(tmp_path, backend):
    _need(backend)
    assert len(_run("save", str(tmp_path), backend=backend)) == 7
    for ranks in (2, 1, 0):  # 0: one process, plain tensors
        loaded = {r["case"]: r for r in _run("load", str(tmp_path), ranks=ranks, backend=backend)}
        assert len(loaded) == 7, loaded
        for case, r in loaded.items():
            if ranks == 0 and case == "prodigy":  # flat s and p0 in plain tensors, shaped in DTensors
                assert "Size mismatch" in r["error"], r
            else:
                assert r["violation"] <= 1.0, r
