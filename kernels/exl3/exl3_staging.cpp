// EXL3 staging: the workspace layout of a step's reconstructed weights and the launches that fill
// it.
#include "kernels/exl3/exl3_staging.h"

#include "kernels/common/StepArgs.h"
#include "kernels/exl3/exl3_gpu.h"

namespace glm::kernels {
namespace {

uint64_t align256(uint64_t v) { return (v + 255) / 256 * 256; }

} // namespace

const Exl3Staging::Weight *Exl3Staging::find(size_t index) const {
  for (const Weight &w : weights) {
    if (w.index == index) {
      return &w;
    }
  }
  return nullptr;
}

Exl3Staging exl3StagingOf(const OpStep &step, uint64_t opScratch, bool routed) {
  Exl3Staging s;
  s.end = opScratch;
  for (size_t i = 0; i < step.weightCount(); ++i) {
    const WeightInfo w = step.weight(i);
    if (!w.exl3) {
      continue;
    }
    const Exl3Geometry &g = w.exl3Geometry;
    if (s.weights.empty() && routed) {
      s.routed = true;
      s.maskOffset = align256(s.end);
      s.end = s.maskOffset + static_cast<uint64_t>(g.matrices) * 4;
    }
    const uint64_t offset = align256(s.end);
    s.end = offset + static_cast<uint64_t>(g.matrices * g.out * g.in) * 2;
    s.weights.push_back({i, g, offset});
  }
  return s;
}

std::vector<GpuLaunch> exl3StagingLaunches(const OpStep &step, const Exl3Staging &staging) {
  const char *header = "kernels/exl3/exl3.cuh";
  std::vector<GpuLaunch> out;
  if (staging.routed) {
    const int64_t experts = staging.weights.front().geometry.matrices;
    ArgPack<Exl3SelectGpuArgs> p;
    p.bind(p.args.expertIds, ArgSource::Operand, 1, "expertIds");
    p.set(p.args.slots, step.rows() * step.operandDim(1, 1), "slots");
    if (step.intParam("expert_shards", 1) > 1) {
      p.rankTimes(p.args.firstExpert, experts, "firstExpert");
    } else {
      p.set(p.args.firstExpert, 0, "firstExpert");
    }
    p.set(p.args.experts, experts, "experts");
    p.bind(p.args.mask, ArgSource::Workspace, 0, "mask", staging.maskOffset);
    out.push_back(p.launch(header, "glm::kernels::exl3SelectKernel", exl3SelectLaunch()));
  }
  for (const Exl3Staging::Weight &w : staging.weights) {
    ArgPack<Exl3ReconstructGpuArgs> p;
    packExl3Weights(p, p.args.weights, w.geometry, w.index, "weights");
    if (staging.routed) {
      p.bind(p.args.mask, ArgSource::Workspace, 0, "mask", staging.maskOffset);
    }
    p.bind(p.args.out, ArgSource::Workspace, 0, "out", w.offset);
    out.push_back(p.launch(header, "glm::kernels::exl3ReconstructKernel",
                           exl3ReconstructLaunch(w.geometry.matrices, w.geometry.k, w.geometry.n)));
  }
  return out;
}

} // namespace glm::kernels
