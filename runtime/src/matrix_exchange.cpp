#include "matrix_exchange.h"

#include <algorithm>
#include <numeric>

namespace optgen {

double matrix_cost(std::int64_t rows, std::int64_t cols) {
  const double small = static_cast<double>(std::min(rows, cols)), large = static_cast<double>(std::max(rows, cols));
  return small * small * large;
}

std::vector<int> matrix_owners(const std::vector<std::int64_t>& rows, const std::vector<std::int64_t>& cols,
                               int ranks) {
  std::vector<std::size_t> order(rows.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return matrix_cost(rows[a], cols[a]) > matrix_cost(rows[b], cols[b]);
  });
  std::vector<double> load(static_cast<std::size_t>(ranks), 0.0);
  std::vector<int> owner(rows.size(), 0);
  for (std::size_t i : order) {
    const auto least = std::min_element(load.begin(), load.end());  // the first of equals: the lowest rank
    owner[i] = static_cast<int>(least - load.begin());
    *least += matrix_cost(rows[i], cols[i]);
  }
  return owner;
}

MatrixExchange plan_matrix_exchange(const std::vector<std::vector<std::int64_t>>& shards,
                                    const std::vector<std::int64_t>& cols, int ranks, int rank) {
  MatrixExchange plan;
  for (const auto& shard : shards) {
    std::vector<std::int64_t> first(static_cast<std::size_t>(ranks), 0);
    std::int64_t rows = 0;
    for (int r = 0; r < ranks; ++r) {
      first[static_cast<std::size_t>(r)] = rows;
      rows += shard[static_cast<std::size_t>(r)];
    }
    plan.first.push_back(first);
    plan.rows.push_back(rows);
  }
  plan.owner = matrix_owners(plan.rows, cols, ranks);
  for (std::size_t i = 0; i < shards.size(); ++i)
    if (plan.owner[i] == rank) plan.owned.push_back(static_cast<int>(i));
  return plan;
}

}  // namespace optgen
