"""Muon's step on gpt2's 12 attention projections as transformers' Conv1D stores them (768 x 2304,
in x out): each whole, in column thirds (a param group's splits=3, split_dim=1: Q, K and V
orthogonalised apart), and as 36 separate 768 x 768 matrices, the same work without the moves in
and out of the thirds. Eager, CUDA events over 50 steps after 5, two rounds.

    OPTGEN_LIBRARY=build-run/liboptgen.so PYTHONPATH=python python3 bench/muon_column_splits.py
"""
import torch

import optgen.torch as ot


def timed(opt, params, reps=50):
    for p in params:
        p.grad = torch.randn_like(p)
    for _ in range(5):
        opt.step()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        opt.step()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps * 1000


def main():
    torch.manual_seed(0)
    whole = [torch.nn.Parameter(torch.randn(768, 2304, device="cuda")) for _ in range(12)]
    split = [torch.nn.Parameter(w.detach().clone()) for w in whole]
    apart = [torch.nn.Parameter(torch.randn(768, 768, device="cuda")) for _ in range(36)]
    print(torch.cuda.get_device_name())
    for _ in range(2):
        print("whole 768x2304 x12: %.1f us" % timed(ot.Muon(whole, lr=0.02), whole))
        print("column thirds x12:  %.1f us" % timed(ot.Muon([dict(params=split, splits=3, split_dim=1)], lr=0.02),
                                                    split))
        print("36 x 768x768 apart: %.1f us" % timed(ot.Muon(apart, lr=0.02), apart))


if __name__ == "__main__":
    main()
