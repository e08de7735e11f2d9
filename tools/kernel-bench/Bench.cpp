// Event timing, random device data and the ceilings for glm-kernel-bench.
#include "tools/kernel-bench/Bench.h"

#include "base/Random.h"
#include "kernels/common/FloatFormats.h"
#include "runtime/cuda/Ceilings.h"

#include <algorithm>

namespace glm::bench {

std::string sizesLine(const glm53::Glm53Config &m) {
  return strCat("sizes: hidden ", m.hiddenSize, ", vocab ", m.vocabSize, ", hc ", m.hcMult,
                ", hc mix ", m.hcMixDim(), ", dense inter ", m.intermediateSize, ", expert inter ",
                m.moeIntermediateSize, ", experts ", m.nRoutedExperts, ", top-k ",
                m.numExpertsPerTok, ", kda heads ", m.linearNumHeads, ", kda head dim ",
                m.linearHeadDim, ", kda proj ", m.kdaProjDim(), ", conv ", m.linearConvKernelDim,
                ", q lora rank ", m.qLoraRank, ", kv lora rank ", m.kvLoraRank, ", mla heads ",
                m.numAttentionHeads, ", qk head dim ", m.qkHeadDim(), ", v head dim ", m.vHeadDim,
                ", q_b out ", mlaQueryDim(m), ", index heads ", m.indexNHeads, ", index head dim ",
                m.indexHeadDim, ", kpool ", m.indexKpool, ", index topk ", m.indexTopk,
                ", selection width ", mlaSelectionWidth(m));
}

std::string constantsLine(const glm53::Glm53Config &m) {
  return strCat("constants: rms_norm_eps ", m.rmsNormEps, ", hc_eps ", m.hcEps,
                ", hc_sinkhorn_iters ", m.hcSinkhornIters, ", swiglu_limit ", m.swigluLimit,
                ", linear_lower_bound ", m.linearLowerBound, ", n_group ", m.nGroup,
                ", topk_group ", m.topkGroup, ", norm_topk_prob ", m.normTopkProb,
                ", routed_scaling_factor ", m.routedScalingFactor);
}

Expected<std::unique_ptr<cuda::Module>> Suite::compile(const std::string &source,
                                                       const std::vector<std::string> &names) {
  GLM_ASSIGN_OR_RETURN(kernels::CompiledModule module,
                       kernels::compileKernels(source, names, ctx_.info().arch));
  return ctx_.load(module.cubin, module.entries);
}

Expected<cuda::DeviceMemory> Suite::random(size_t count, bool bf16, float scale) {
  SplitMix64 rng(count * 2654435761u + (bf16 ? 1 : 0));
  const size_t bytes = count * (bf16 ? 2 : 4);
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory m, ctx_.allocate(bytes));
  // Fill in chunks so that multi-GB buffers do not need a host copy of their size.
  const size_t chunk = 1 << 22;
  std::vector<uint8_t> host(std::min(bytes, chunk * (bf16 ? 2 : 4)));
  for (size_t done = 0; done < count; done += chunk) {
    const size_t n = std::min(chunk, count - done);
    for (size_t i = 0; i < n; ++i) {
      const float v = rng.normal() * scale;
      if (bf16) {
        reinterpret_cast<uint16_t *>(host.data())[i] = kernels::floatToBf16(v);
      } else {
        reinterpret_cast<float *>(host.data())[i] = v;
      }
    }
    GLM_RETURN_IF_ERROR(
        ctx_.upload(m.ptr() + done * (bf16 ? 2 : 4), host.data(), n * (bf16 ? 2 : 4)));
  }
  return m;
}

Status Suite::time(const std::function<Status()> &launch, Row &row, int reps) {
  if (!wanted(row)) {
    return Status::success();
  }
  return timeCeiling(launch, row, reps);
}

Status Suite::timeCeiling(const std::function<Status()> &launch, Row &row, int reps) {
  GLM_ASSIGN_OR_RETURN(cuda::EventTiming t, cuda::timeOnStream(ctx_, launch, reps, 5));
  row.medianUs = t.medianUs;
  row.spreadUs = (t.p90Us - t.p10Us) / 2;
  return Status::success();
}

Status Suite::timeGraph(int count, const std::function<Status(int)> &launch, Row &row, int reps) {
  if (!wanted(row)) {
    return Status::success();
  }
  const cuda::CudaDriver &d = ctx_.driver();
  const cuda::CUstream stream = ctx_.stream();
  GLM_CU(&d, cuStreamBeginCapture(stream, cuda::kCaptureModeThreadLocal));
  Status captured = Status::success();
  for (int i = 0; i < count && captured.ok(); ++i) {
    captured = launch(i);
  }
  cuda::CUgraph graph = nullptr;
  const Status ended = cuda::check(d.cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
  GLM_RETURN_IF_ERROR(captured);
  GLM_RETURN_IF_ERROR(ended);
  cuda::CUgraphExec exec = nullptr;
  const Status made =
      cuda::check(d.cuGraphInstantiateWithFlags(&exec, graph, 0), "cuGraphInstantiateWithFlags");
  d.cuGraphDestroy(graph);
  GLM_RETURN_IF_ERROR(made);
  const Status timed =
      time([&] { return cuda::check(d.cuGraphLaunch(exec, stream), "cuGraphLaunch"); }, row, reps);
  d.cuGraphExecDestroy(exec);
  return timed;
}

} // namespace glm::bench
