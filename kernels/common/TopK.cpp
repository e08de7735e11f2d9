// topkIndices: lower-index tie breaking, and a replay of torch's CPU topk selection for golden
// comparisons.
#include "kernels/common/TopK.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace glm::kernels {

namespace {

using Entry = std::pair<double, int64_t>;

/// torch's comparator for largest = true (NaN handling dropped: scores are never NaN here).
bool greaterValue(const Entry &x, const Entry &y) { return x.first > y.first; }

std::vector<int64_t> torchCpuTopk(std::span<const double> values, int64_t k) {
  const int64_t n = static_cast<int64_t>(values.size());
  std::vector<Entry> queue;
  queue.reserve(n);
  for (int64_t j = 0; j < n; ++j) {
    queue.emplace_back(values[j], j);
  }
  if (k * 64 <= n) {
    std::partial_sort(queue.begin(), queue.begin() + k, queue.end(), greaterValue);
  } else {
    std::nth_element(queue.begin(), queue.begin() + (k - 1), queue.end(), greaterValue);
    std::sort(queue.begin(), queue.begin() + (k - 1), greaterValue);
  }
  std::vector<int64_t> out(k);
  for (int64_t j = 0; j < k; ++j) {
    out[j] = queue[j].second;
  }
  return out;
}

} // namespace

std::vector<int64_t> topkIndices(std::span<const double> values, int64_t k, TopkTieRule rule) {
  k = std::min<int64_t>(k, static_cast<int64_t>(values.size()));
  if (k <= 0) {
    return {};
  }
  if (rule == TopkTieRule::TorchCpu) {
    return torchCpuTopk(values, k);
  }
  std::vector<int64_t> order(values.size());
  std::iota(order.begin(), order.end(), int64_t(0));
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  });
  order.resize(k);
  return order;
}

} // namespace glm::kernels
