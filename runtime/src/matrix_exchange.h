#pragma once
/// Where the rows of sharded matrices go for a matrix function (Muon's Newton-Schulz), which needs
/// each whole matrix: the plan of optgen::nccl::matrix_hook, host arithmetic only (tested without
/// GPUs). optgen.torch's RankMatrices follows the same rules (python/optgen/_matrix_exchange.py).
///
/// Each rank holds some consecutive rows of every matrix (rank 0 the first ones), `shards[i][r]`
/// of matrix i on rank r, any of them none. Each matrix gets an owner rank, the costliest matrix
/// first, each to the least loaded rank (the lowest of equals); every rank sends its rows of each
/// matrix to the owner, which applies the function to its whole matrices and sends every rank its
/// rows back. Every rank computes the same plan from the same shards.

#include <cstdint>
#include <vector>

namespace optgen {

/// Newton-Schulz's work on a rows x cols matrix, up to a constant: m * m * n for m <= n.
double matrix_cost(std::int64_t rows, std::int64_t cols);

/// Each matrix's owner among `ranks`, for matrices of `rows` x `cols` (whole).
std::vector<int> matrix_owners(const std::vector<std::int64_t>& rows, const std::vector<std::int64_t>& cols, int ranks);

/// The plan of rank `rank` for matrices of `cols` columns whose rows the ranks hold as
/// `shards[i][r]`: the owners, and for each matrix where rank r's rows start in it.
struct MatrixExchange {
  std::vector<int> owner;                        ///< [matrix]
  std::vector<std::vector<std::int64_t>> first;  ///< [matrix][rank]: rank's first row
  std::vector<std::int64_t> rows;                ///< [matrix]: the whole matrix's
  std::vector<int> owned;                        ///< the matrices `rank` owns, in order
};
MatrixExchange plan_matrix_exchange(const std::vector<std::vector<std::int64_t>>& shards,
                                    const std::vector<std::int64_t>& cols, int ranks, int rank);

}  // namespace optgen
