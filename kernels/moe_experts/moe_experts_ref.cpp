// moe_experts: CPU reference of the weighted sum of routed clamped-SwiGLU experts plus the shared
// expert, one expert at a time over the tokens routed to it.
#include "kernels/moe_experts/moe_experts.h"

#include "kernels/swiglu/swiglu.h"

#include <algorithm>
#include <vector>

namespace glm::kernels {

Status moeExpertsRef(const MoeExpertsArgs &a) {
  const int64_t hidden = a.hidden;
  if (a.tokens < 0 || hidden <= 0 || a.numExperts <= 0 || a.topK <= 0 || a.intermediate <= 0) {
    return invalidArgument("moe_experts: tokens >= 0 and hidden, experts, top_k, intermediate > 0 "
                           "are required");
  }
  if (a.experts == nullptr && !a.resolveExpert) {
    return invalidArgument("moe_experts: no expert weights");
  }
  for (int64_t i = 0; i < a.tokens * a.topK; ++i) {
    if (a.expertIds[i] < 0 || a.expertIds[i] >= a.numExperts) {
      return invalidArgument("moe_experts: expert id ", a.expertIds[i], " is outside [0, ",
                             a.numExperts, ")");
    }
  }

  std::vector<double> acc(a.tokens * hidden, 0.0);
  std::vector<int64_t> rows;
  std::vector<float> weights;
  std::vector<float> xs;
  std::vector<float> ys;
  for (int64_t e = 0; e < a.numExperts; ++e) {
    rows.clear();
    weights.clear();
    for (int64_t t = 0; t < a.tokens; ++t) {
      for (int64_t k = 0; k < a.topK; ++k) {
        if (a.expertIds[t * a.topK + k] == e) {
          rows.push_back(t);
          weights.push_back(a.expertWeights[t * a.topK + k]);
        }
      }
    }
    if (rows.empty()) {
      continue;
    }
    const int64_t n = static_cast<int64_t>(rows.size());
    xs.resize(n * hidden);
    ys.resize(n * hidden);
    for (int64_t i = 0; i < n; ++i) {
      std::copy(a.x + rows[i] * hidden, a.x + (rows[i] + 1) * hidden, xs.data() + i * hidden);
    }
    ExpertWeights w = a.experts != nullptr ? a.experts[e] : ExpertWeights{};
    if (a.resolveExpert) {
      GLM_RETURN_IF_ERROR(a.resolveExpert(e, w));
    }
    GLM_RETURN_IF_ERROR(swigluRef({.x = xs.data(),
                                   .gate = w.gate,
                                   .up = w.up,
                                   .down = w.down,
                                   .out = ys.data(),
                                   .tokens = n,
                                   .hidden = hidden,
                                   .intermediate = a.intermediate,
                                   .limit = a.swigluLimit})
                            .withContext(strCat("expert ", e)));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t d = 0; d < hidden; ++d) {
        acc[rows[i] * hidden + d] += static_cast<double>(weights[i]) * ys[i * hidden + d];
      }
    }
  }

  if (a.shared != nullptr) {
    ys.resize(a.tokens * hidden);
    GLM_RETURN_IF_ERROR(swigluRef({.x = a.x,
                                   .gate = a.shared->gate,
                                   .up = a.shared->up,
                                   .down = a.shared->down,
                                   .out = ys.data(),
                                   .tokens = a.tokens,
                                   .hidden = hidden,
                                   .intermediate = a.sharedIntermediate,
                                   .limit = a.swigluLimit})
                            .withContext("shared expert"));
    for (int64_t i = 0; i < a.tokens * hidden; ++i) {
      acc[i] += ys[i];
    }
  }
  for (int64_t i = 0; i < a.tokens * hidden; ++i) {
    a.out[i] = static_cast<float>(acc[i]);
  }
  return Status::success();
}

Status exl3MoeExpertsRef(const Exl3MoeExpertsArgs &args) {
  // moeExpertsRef itself, with each routed expert's EXL3 matrices reconstructed (to bf16, as
  // `glmc dequantize` writes them) just before its tokens run: the same loop and the same double
  // accumulation order, so the result is that of the dequantized checkpoint bit for bit.
  if (args.moe.experts == nullptr &&
      (args.exl3Gate == nullptr || args.exl3Up == nullptr || args.exl3Down == nullptr)) {
    return invalidArgument("exl3 moe_experts: projections not in EXL3 need dense views");
  }
  std::vector<uint16_t> gate, up, down;
  MoeExpertsArgs moe = args.moe;
  moe.resolveExpert = [&](int64_t e, ExpertWeights &w) -> Status {
    auto resolve = [&](const Exl3MatrixView *matrices, std::vector<uint16_t> &dense,
                       WeightView &view, const char *what) -> Status {
      if (matrices == nullptr) {
        return Status::success();
      }
      const Exl3MatrixView &m = matrices[e];
      dense.resize(static_cast<size_t>(m.out * m.in));
      GLM_RETURN_IF_ERROR(
          exl3ReconstructBf16Ref(m, dense.data()).withContext(strCat("expert ", e, " ", what)));
      view = WeightView::raw(dense.data(), DType::BF16, {m.out, m.in});
      return Status::success();
    };
    GLM_RETURN_IF_ERROR(resolve(args.exl3Gate, gate, w.gate, "gate_proj"));
    GLM_RETURN_IF_ERROR(resolve(args.exl3Up, up, w.up, "up_proj"));
    return resolve(args.exl3Down, down, w.down, "down_proj");
  };
  return moeExpertsRef(moe);
}

} // namespace glm::kernels
