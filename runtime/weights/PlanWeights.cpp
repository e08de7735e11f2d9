// Rank slices of checkpoint tensors into the weights arena.
#include "runtime/weights/PlanWeights.h"

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace glm {
namespace {

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return s + "]";
}

/// Copies the slice [start, start + count) along `dim` of a dense row-major tensor of `shape`.
void copySlice(const uint8_t *src, uint8_t *dst, const std::vector<int64_t> &shape, size_t dim,
               int64_t start, int64_t count, size_t elementSize) {
  uint64_t outer = 1, inner = elementSize;
  for (size_t d = 0; d < dim; ++d) {
    outer *= static_cast<uint64_t>(shape[d]);
  }
  for (size_t d = dim + 1; d < shape.size(); ++d) {
    inner *= static_cast<uint64_t>(shape[d]);
  }
  const uint64_t run = static_cast<uint64_t>(count) * inner;
  for (uint64_t o = 0; o < outer; ++o) {
    std::memcpy(
        dst + o * run,
        src + (o * static_cast<uint64_t>(shape[dim]) + static_cast<uint64_t>(start)) * inner, run);
  }
}

/// One tensor to copy: where it comes from and where its slice goes.
struct CopyJob {
  const TensorView *tensor;
  std::vector<int64_t> shape; // the tensor's (global) shape
  size_t dim;                 // slicing dimension, ignored when count covers it all
  int64_t start, count;
  uint8_t *dst;
};

} // namespace

Expected<DType> dtypeOfElement(plan::ElementType element) {
  switch (element) {
  case plan::ElementType::F32:
    return DType::F32;
  case plan::ElementType::BF16:
    return DType::BF16;
  case plan::ElementType::F16:
    return DType::F16;
  case plan::ElementType::F8E4M3:
    return DType::F8_E4M3;
  case plan::ElementType::I32:
    return DType::I32;
  case plan::ElementType::I64:
    return DType::I64;
  case plan::ElementType::I16:
    return DType::I16;
  case plan::ElementType::U8:
    return DType::U8;
  }
  return invalidArgument("unknown plan element type");
}

Status loadPlanWeights(const plan::Plan &plan, const Checkpoint &checkpoint, uint32_t rank,
                       std::span<uint8_t> arena, ProgressReporter *progress) {
  if (rank >= plan.tp()) {
    return invalidArgument("rank ", rank, " of a TP ", plan.tp(), " plan");
  }
  if (plan.weights() == nullptr) {
    return Status::success();
  }
  std::vector<CopyJob> jobs;
  for (const plan::WeightBinding *w : *plan.weights()) {
    const std::string name = w->name()->str();
    const std::string pattern = w->checkpoint()->str();
    if (w->format() == plan::WeightFormat::FP8 || w->format() == plan::WeightFormat::EXL3) {
      return unimplemented("weight ", name, " (", pattern, "): loading ",
                           plan::EnumNameWeightFormat(w->format()),
                           " tensors comes with their kernels");
    }
    GLM_ASSIGN_OR_RETURN(DType dtype, dtypeOfElement(w->element()));
    std::vector<int64_t> global(w->global_shape()->begin(), w->global_shape()->end());
    std::vector<int64_t> local(w->rank_shape()->begin(), w->rank_shape()->end());
    if (global.empty() || local.size() != global.size()) {
      return invalidArgument("weight ", name, ": needs matching, non-empty global and rank shapes");
    }
    const plan::Slice *slice = w->slice();
    if (slice->offset() > arena.size() || slice->size() > arena.size() - slice->offset()) {
      return invalidArgument("weight ", name, ": slice overruns the weights arena");
    }
    uint8_t *dst = arena.data() + slice->offset();
    const size_t dim = w->shard() == plan::ShardKind::Replicated ? 0 : w->shard_dim();
    const int64_t count = local[dim];
    const int64_t start =
        static_cast<int64_t>(rank) * (w->shard() == plan::ShardKind::Replicated ? 0 : count);

    auto find = [&](const std::string &tensorName,
                    const std::vector<int64_t> &shape) -> Expected<const TensorView *> {
      const TensorView *t = checkpoint.find(tensorName);
      if (t == nullptr) {
        return notFound("weight ", name, ": checkpoint tensor '", tensorName, "' is missing");
      }
      if (t->shape != shape) {
        return invalidArgument("weight ", name, ": tensor '", tensorName, "' in ",
                               t->file->filename().string(), " has shape ", shapeText(t->shape),
                               ", the plan expects ", shapeText(shape));
      }
      if (t->dtype != dtype) {
        return invalidArgument("weight ", name, ": tensor '", tensorName, "' in ",
                               t->file->filename().string(), " is ", dtypeName(t->dtype),
                               ", the plan expects ", dtypeName(dtype),
                               " (recompile the plan for this checkpoint)");
      }
      return t;
    };

    if (w->experts() == 0) {
      GLM_ASSIGN_OR_RETURN(const TensorView *t, find(pattern, global));
      jobs.push_back({t, global, dim, start, count, dst});
      continue;
    }
    // Stacked experts: dimension 0 of the binding counts experts, each its own tensor.
    const size_t brace = pattern.find("{e}");
    if (brace == std::string::npos || global.size() < 2) {
      return invalidArgument("weight ", name, ": stacked experts need '{e}' in '", pattern, "'");
    }
    const std::vector<int64_t> perExpert(global.begin() + 1, global.end());
    uint64_t expertBytes = dtypeSize(dtype);
    for (int64_t d : perExpert) {
      expertBytes *= static_cast<uint64_t>(d);
    }
    const bool splitByExpert = w->shard() == plan::ShardKind::Expert;
    const int64_t first = splitByExpert ? start : 0;
    const int64_t experts = splitByExpert ? count : global[0];
    for (int64_t e = 0; e < experts; ++e) {
      std::string tensorName = pattern;
      tensorName.replace(brace, 3, std::to_string(first + e));
      GLM_ASSIGN_OR_RETURN(const TensorView *t, find(tensorName, perExpert));
      // Within an expert, a split other than by expert slices dimension dim - 1.
      const size_t innerDim = splitByExpert || dim == 0 ? 0 : dim - 1;
      const int64_t innerCount =
          splitByExpert || w->shard() == plan::ShardKind::Replicated ? perExpert[0] : count;
      const int64_t innerStart =
          splitByExpert || w->shard() == plan::ShardKind::Replicated ? 0 : start;
      const uint64_t localBytes = expertBytes / static_cast<uint64_t>(perExpert[innerDim]) *
                                  static_cast<uint64_t>(innerCount);
      jobs.push_back({t, perExpert, innerDim, innerStart, innerCount,
                      dst + static_cast<uint64_t>(e) * localBytes});
    }
  }

  // Copy on all cores; each job writes its own bytes.
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < jobs.size(); i = next++) {
      const CopyJob &job = jobs[i];
      copySlice(job.tensor->data, job.dst, job.shape, job.dim, job.start, job.count,
                dtypeSize(job.tensor->dtype));
      if (progress != nullptr) {
        const uint64_t full = static_cast<uint64_t>(job.shape.empty() ? 1 : job.shape[job.dim]);
        progress->advance(job.tensor->byteSize / std::max<uint64_t>(full, 1) *
                          static_cast<uint64_t>(job.count));
      }
    }
  };
  const size_t workers =
      std::min<size_t>(jobs.size(), std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers; ++t) {
    threads.emplace_back(worker);
  }
  worker();
  for (std::thread &t : threads) {
    t.join();
  }
  return Status::success();
}

} // namespace glm
