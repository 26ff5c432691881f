"""Where the rows of sharded matrices go for a matrix function (Muon's Newton-Schulz), which needs
each whole matrix: the plan of optgen.torch's RankMatrices, in plain Python (no torch), so that it is
checked without GPUs.

Each rank holds some rows of every matrix, as torch.chunk splits them along the first dimension
(DTensor's Shard(0), FSDP2's fully_shard). Each matrix gets an owner rank; one all-to-all sends every
rank's rows of each matrix to its owner, the owner applies the function to its whole matrices, and a
second all-to-all hands every rank its rows of the results back. A buffer of an all-to-all holds, for
each rank in order, that rank's part: the gather's send buffer the rows of the matrices each rank
owns (destination-major, then in matrix order), its receive buffer every rank's rows of this rank's
matrices (source-major); the scatter's buffers the same reversed. Every rank computes the same plan
from the same list of matrices, so the sizes its all-to-alls send are those the others expect.
"""

from dataclasses import dataclass
from typing import List, Sequence, Tuple


def row_shards(rows: int, ranks: int) -> List[int]:
    """The rows of each rank's shard of a tensor of `rows` rows sharded along its first dimension
    (torch.chunk's: ceil(rows / ranks) each, the last ones fewer or none)."""
    chunk = -(-rows // ranks) if ranks else 0
    return [max(0, min(chunk, rows - r * chunk)) for r in range(ranks)]


def cost(rows: int, cols: int) -> float:
    """Newton-Schulz's work on a rows x cols matrix, up to a constant: m * m * n for m <= n."""
    small, large = min(rows, cols), max(rows, cols)
    return float(small) * small * large


def owners(shapes: Sequence[Tuple[int, int]], ranks: int) -> List[int]:
    """Each matrix's owner: the costliest first, each to the least loaded rank (the lowest of equals)."""
    load = [0.0] * ranks
    owner = [0] * len(shapes)
    for i in sorted(range(len(shapes)), key=lambda i: (-cost(*shapes[i]), i)):
        owner[i] = min(range(ranks), key=lambda r: (load[r], r))
        load[owner[i]] += cost(*shapes[i])
    return owner


@dataclass(frozen=True)
class Piece:
    """`length` elements of matrix `matrix` from element `first` of the whole matrix (rows of rank
    `rank`), at `at` in an all-to-all buffer."""
    matrix: int
    rank: int
    first: int
    length: int
    at: int


class ExchangePlan:
    """The plan of rank `rank` of `ranks` for whole matrices of `shapes` (rows, columns), every rank
    holding its row_shards of each:

    - send_splits[d]: the elements this rank sends rank d in the gather (its rows of d's matrices),
      and receives from d in the scatter; recv_splits[s]: those it receives from rank s in the
      gather (s's rows of this rank's matrices) and sends s in the scatter.
    - sent: the matrices whose rows this rank sends in the gather, in send-buffer order (those of
      which it holds rows); the scatter returns them in the same order.
    - owned: the matrices this rank owns, in order.
    - gathered: the pieces of the gather's receive buffer, in buffer order; assembled matrix by
      matrix (owned order, each by rank) they are the owned whole matrices.
    - scattered: the pieces of the scatter's send buffer (cut from the owned whole matrices), in
      buffer order."""

    def __init__(self, shapes: Sequence[Tuple[int, int]], ranks: int, rank: int):
        self.shards = [row_shards(rows, ranks) for rows, _ in shapes]
        self.owner = owners(shapes, ranks)
        owned_by = [[i for i, o in enumerate(self.owner) if o == r] for r in range(ranks)]
        self.owned = owned_by[rank]
        cols = [c for _, c in shapes]

        def elements(i: int, r: int) -> int:  # rank r's rows of matrix i, in elements
            return self.shards[i][r] * cols[i]

        def first(i: int, r: int) -> int:  # where rank r's rows start in matrix i
            return sum(self.shards[i][:r]) * cols[i]

        self.send_splits = [sum(elements(i, rank) for i in owned_by[d]) for d in range(ranks)]
        self.recv_splits = [sum(elements(i, s) for i in self.owned) for s in range(ranks)]
        self.sent = [i for d in range(ranks) for i in owned_by[d] if elements(i, rank)]
        self.gathered, self.scattered = [], []
        for pieces, order in ((self.gathered, [(s, i) for s in range(ranks) for i in self.owned]),
                              (self.scattered, [(d, i) for d in range(ranks) for i in self.owned])):
            at = 0
            for r, i in order:
                if elements(i, r):
                    pieces.append(Piece(i, r, first(i, r), elements(i, r), at))
                    at += elements(i, r)
