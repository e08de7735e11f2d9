// glm-kernel-bench's framework: the device, its measured ceilings, event timing, the model whose
// dimensions the kernels run at, and the table each family of kernels (one *Bench.cpp per family)
// adds rows to.
#pragma once

#include "kernels/common/Launch.h"
#include "kernels/common/Nvrtc.h"
#include "models/glm53/Config.h"
#include "runtime/cuda/CudaContext.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace glm::bench {

struct Row {
  std::string kernel; // template instance, short: "linear<bf16,bf16> gemv"
  std::string shape;  // "[1x4096]·[4096x8192]"
  double medianUs = 0;
  double spreadUs = 0; // (p90 - p10) / 2
  double bytes = 0; // fewest bytes the kernel must move: each input read once, output written once
  double flops = 0;
  /// What the row is judged by: "bw" (achieved bytes/s over the copy ceiling) or "mma" (FLOP/s
  /// over the matrix ceiling).
  std::string bound = "bw";
  std::string note;
};

/// The MLA query's width after q_b_proj: every attention head's q.
inline int64_t mlaQueryDim(const glm53::Glm53Config &m) {
  return m.numAttentionHeads * m.qkHeadDim();
}
/// Positions a sparse-attention row attends to: the index_topk tokens of the pools the indexer
/// selects, plus the kpool - 1 tokens of the pool still open.
inline int64_t mlaSelectionWidth(const glm53::Glm53Config &m) {
  return m.indexTopk + m.indexKpool - 1;
}

/// "sizes: hidden 4096, vocab 154880, ...": every model dimension the families read from `m`
/// (derived ones included), printed at start so that a run says what it measured.
std::string sizesLine(const glm53::Glm53Config &m);
/// "constants: rms_norm_eps 1e-05, ...": the config's scalars the kernels take as arguments.
std::string constantsLine(const glm53::Glm53Config &m);

class Suite {
public:
  /// `model` is the checkpoint config every family takes its dimensions from; it outlives the
  /// suite.
  Suite(cuda::CudaContext &ctx, const glm53::Glm53Config &model) : ctx_(ctx), model_(model) {}

  cuda::CudaContext &ctx() { return ctx_; }
  const glm53::Glm53Config &model() const { return model_; }
  /// Compiles `source` for this device and loads `names`.
  Expected<std::unique_ptr<cuda::Module>> compile(const std::string &source,
                                                  const std::vector<std::string> &names);
  /// Device memory of `bytes` filled with small random values of `element` ("f32" or "bf16").
  Expected<cuda::DeviceMemory> random(size_t count, bool bf16, float scale = 1.0f);

  /// Median and spread of one call of `launch` (which enqueues work on ctx().stream()) over
  /// `reps` timed calls after warm-up; each call timed with a pair of events.
  Status time(const std::function<Status()> &launch, Row &row, int reps = 100);
  /// time() whatever setOnly keeps: for the ceilings that every row is judged against.
  Status timeCeiling(const std::function<Status()> &launch, Row &row, int reps = 100);
  /// Captures `count` calls of `launch(i)` into a CUDA graph and times its replays like time(): the
  /// launches then run back to back without host launch gaps, as the engine's captured programs
  /// run them. The row's time is the whole graph's.
  Status timeGraph(int count, const std::function<Status(int)> &launch, Row &row, int reps = 100);

  /// Rows kept to those whose "kernel shape" text contains `only` (empty: every row); the others
  /// are neither timed nor listed, so that a profiler attached to the run sees one row's launches.
  void setOnly(std::string only) { only_ = std::move(only); }
  bool wanted(const Row &row) const {
    return only_.empty() || (row.kernel + " " + row.shape).find(only_) != std::string::npos;
  }
  void add(Row row) {
    if (wanted(row)) {
      rows_.push_back(std::move(row));
    }
  }
  const std::vector<Row> &rows() const { return rows_; }

  // Ceilings measured at start: device-to-device copy (bytes read + written per second), and the
  // bf16 matrix rate (from the linear family's reference GEMM when it runs, else 0).
  double copyBytesPerS = 0;
  double matrixFlopsPerS = 0;

private:
  cuda::CudaContext &ctx_;
  const glm53::Glm53Config &model_;
  std::vector<Row> rows_;
  std::string only_;
};

// One per family; each adds its kernels' rows at the dimensions of suite.model().
Status addLinearBenches(Suite &suite);
/// Q4-group and fp8-block weights (LinearBench.cpp).
Status addLinearQuantBenches(Suite &suite);
Status addKdaBenches(Suite &suite);
Status addSparseAttentionBenches(Suite &suite);
Status addElementwiseBenches(Suite &suite);
Status addMoeBenches(Suite &suite);
Status addExl3MoeBenches(Suite &suite);

} // namespace glm::bench
