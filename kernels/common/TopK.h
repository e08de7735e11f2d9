// topkIndices: the k largest entries of a score vector, with a choice of how ties are resolved.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace glm::kernels {

/// Which of several equal scores a top-k keeps when they straddle the k-th place.
enum class TopkTieRule {
  /// Equal scores go to the lower index: the contract serving kernels implement (a sort on
  /// (score desc, index asc)).
  LowerIndex,
  /// Exactly the entries torch.topk keeps on CPU, which HF's reference run used: torch (2.11)
  /// copies the row into (value, index) pairs and runs libstdc++'s std::partial_sort(k) over all
  /// of them when k·64 ≤ n, else std::nth_element(k − 1), both with a strict "greater"
  /// comparator, so which of several equal values survives depends on the algorithms' element
  /// moves. This repeats those calls on the same pairs. (Later torch versions stream the row
  /// through a k-entry heap instead, which resolves ties differently.)
  TorchCpu,
};

/// Indices of the k largest values (k ≤ values.size()), in descending value order; equal values
/// are placed by `rule`. NaN is not expected.
std::vector<int64_t> topkIndices(std::span<const double> values, int64_t k, TopkTieRule rule);

} // namespace glm::kernels
