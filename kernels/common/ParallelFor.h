// parallelFor: a blocking parallel loop over an index range on a process-wide pool of threads.
#pragma once

#include <cstdint>
#include <functional>

namespace glm::kernels {

/// Calls fn(begin, end) over disjoint ranges that cover [0, count), each at most `grain` long, on
/// the calling thread and the pool's workers, and returns when all are done. Each index is visited
/// by exactly one call, so a kernel that writes only its own indices gives the same bits for any
/// thread count. A call from inside fn runs inline (no nested parallelism, no deadlock).
void parallelFor(int64_t count, int64_t grain, const std::function<void(int64_t, int64_t)> &fn);

/// Threads that share a parallelFor, the caller included: GLM_CPU_THREADS if set, else the
/// hardware concurrency.
int parallelThreads();

} // namespace glm::kernels
