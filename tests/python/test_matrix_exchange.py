"""optgen._matrix_exchange, the plan by which ranks holding rows of sharded matrices bring each whole
matrix to its owner and hand the results back (optgen.torch's RankMatrices): simulated here with
plain lists for one to five ranks, no torch, no GPU (CI runs these)."""

import random

import pytest

from optgen._matrix_exchange import ExchangePlan, owners, row_shards


def test_row_shards_are_torch_chunks_with_empty_ones_past_the_end():
    assert row_shards(37, 2) == [19, 18]
    assert row_shards(1, 2) == [1, 0]
    assert row_shards(5, 4) == [2, 2, 1, 0]
    assert row_shards(0, 3) == [0, 0, 0]


def test_owners_take_the_costliest_first_each_to_the_least_loaded_rank():
    # 2048x2048 costs 2048^3, 256x2048 256^2 * 2048 (64 times less).
    assert owners([(256, 2048), (2048, 2048), (2048, 2048), (256, 2048)], 2) == [0, 0, 1, 1]
    assert owners([(4, 4)] * 3, 1) == [0, 0, 0]


def all_to_all(buffers, splits):
    """What each rank receives: from every rank in order, the part of its buffer meant for it."""
    ranks = len(buffers)
    parts = []
    for r in range(ranks):
        at, cut = 0, []
        for n in splits[r]:
            cut.append(buffers[r][at:at + n])
            at += n
        assert at == len(buffers[r])
        parts.append(cut)
    return [[x for s in range(ranks) for x in parts[s][d]] for d in range(ranks)]


SHAPES = [
    [(37, 19), (5, 37), (3, 4), (4, 12), (1, 6)],  # ranks_worker.py's, one shard empty on two ranks
    [(2048, 2048), (256, 2048), (256, 2048), (2048, 2048), (5632, 2048), (2048, 5632), (5632, 2048)],
]


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("case", range(len(SHAPES) + 2))
def test_every_owner_gets_its_whole_matrices_and_every_rank_its_rows_of_the_results(ranks, case):
    rng = random.Random(case * 10 + ranks)
    shapes = SHAPES[case] if case < len(SHAPES) else [(rng.randint(1, 9), rng.randint(1, 7)) for _ in range(12)]
    if case == 1:  # llama-like shapes, scaled down: only the plan's arithmetic matters
        shapes = [(r // 256, c // 256) for r, c in shapes]
    plans = [ExchangePlan(shapes, ranks, r) for r in range(ranks)]
    # Every rank reaches the same owners, and what one sends another is what that one expects.
    assert all(p.owner == plans[0].owner for p in plans)
    for a in range(ranks):
        for b in range(ranks):
            assert plans[a].send_splits[b] == plans[b].recv_splits[a]
    whole = [[(i, e) for e in range(rows * cols)] for i, (rows, cols) in enumerate(shapes)]

    def rows_of(i, r):  # rank r's rows of matrix i
        shards = row_shards(shapes[i][0], ranks)
        return whole[i][sum(shards[:r]) * shapes[i][1]:sum(shards[:r + 1]) * shapes[i][1]]

    # The gather: each rank sends its rows of the matrices in `sent`; each owner assembles them.
    sent = [[x for i in p.sent for x in rows_of(i, r)] for r, p in enumerate(plans)]
    received = all_to_all(sent, [p.send_splits for p in plans])
    owned = set()
    for r, p in enumerate(plans):
        assert len(received[r]) == sum(p.recv_splits)
        for i in p.owned:
            pieces = sorted((x for x in p.gathered if x.matrix == i), key=lambda x: x.rank)
            assert [v for x in pieces for v in received[r][x.at:x.at + x.length]] == whole[i]
            owned.add(i)
    assert owned == set(range(len(shapes)))  # each matrix owned once
    # The scatter: each owner sends every rank its rows of the results (here the matrices negated).
    results = {i: [(-a, e) for a, e in whole[i]] for i in owned}
    back = [[v for x in p.scattered for v in results[x.matrix][x.first:x.first + x.length]] for p in plans]
    returned = all_to_all(back, [p.recv_splits for p in plans])
    for r, p in enumerate(plans):
        expected = [(-a, e) for i in p.sent for a, e in rows_of(i, r)]
        assert returned[r] == expected
        # A rank sends rows of every matrix it holds rows of, and of no other.
        assert sorted(p.sent) == [i for i in range(len(shapes)) if rows_of(i, r)]
