// The kernel rules per op (from kernels/<op>/<op>_gpu.h) and the plan's kernel table.
#include "runtime/cuda/KernelSelection.h"

#include "kernels/add/add_gpu.h"
#include "kernels/common/Nvrtc.h"
#include "kernels/concat/concat_gpu.h"
#include "kernels/convert/convert_gpu.h"
#include "kernels/dsa_indexer/dsa_indexer_gpu.h"
#include "kernels/embedding/embedding_gpu.h"
#include "kernels/exl3/exl3_gpu.h"
#include "kernels/exl3_moe/exl3_moe_gpu.h"
#include "kernels/exl3_moe/exl3_moe_prefill_gpu.h"
#include "kernels/expand_streams/expand_streams_gpu.h"
#include "kernels/gated_rms_norm/gated_rms_norm_gpu.h"
#include "kernels/kda/kda_gpu.h"
#include "kernels/layer_norm/layer_norm_gpu.h"
#include "kernels/linear/linear_gpu.h"
#include "kernels/mhc_post/mhc_post_gpu.h"
#include "kernels/mhc_pre/mhc_pre_gpu.h"
#include "kernels/mla_sparse_attention/mla_sparse_attention_gpu.h"
#include "kernels/moe_experts/moe_experts_gpu.h"
#include "kernels/moe_router/moe_router_gpu.h"
#include "kernels/rms_norm/rms_norm_gpu.h"
#include "kernels/sample/sample_gpu.h"
#include "kernels/short_conv/short_conv_gpu.h"
#include "kernels/stream_mean/stream_mean_gpu.h"
#include "kernels/swiglu/swiglu_gpu.h"
#include "runtime/cuda/StepArgs.h"
#include "runtime/plan/StepView.h"

#include <algorithm>
#include <atomic>
#include <map>
#include <thread>

namespace glm::cuda {
namespace {

const char *typeName(plan::ElementType e) {
  switch (e) {
  case plan::ElementType::BF16:
    return "glm::kernels::Bf16";
  case plan::ElementType::F8E4M3:
    return "glm::kernels::Fp8E4m3";
  default:
    return "float";
  }
}

/// The template instance `kernel<args...>` of namespace glm::kernels.
std::string instance(const char *kernel, std::initializer_list<std::string> args) {
  std::string name = strCat("glm::kernels::", kernel, "<");
  bool first = true;
  for (const std::string &a : args) {
    name += (first ? "" : ", ") + a;
    first = false;
  }
  return name + ">";
}

/// The op's own kernels, reading EXL3 weights as their bf16 reconstructions.
Expected<std::vector<SelectedLaunch>> selectOpKernels(const plan::Plan &plan,
                                                      const runtime::StepView &v) {
  using runtime::StepView;
  const plan::Step &step = v.step();
  const std::string t = typeName(v.activationType());
  // The element type of weight i, as a template argument (the activation type when absent).
  auto w = [&](size_t i) { return v.hasWeight(i) ? typeName(denseElement(v.weight(i))) : t; };
  auto one = [](const char *header, std::string name,
                kernels::LaunchDims dims) -> Expected<std::vector<SelectedLaunch>> {
    return std::vector<SelectedLaunch>{{header, std::move(name), dims}};
  };
  const int64_t rows = v.rows();
  switch (step.op()) {
  case plan::OpKind::AllGather:
  case plan::OpKind::AllReduce:
    return std::vector<SelectedLaunch>{};
  case plan::OpKind::Embedding:
    return one("kernels/embedding/embedding.cuh", instance("embeddingKernel", {t, w(0)}),
               kernels::embeddingLaunch(rows, StepView::dim(v.result(0), 1)));
  case plan::OpKind::ExpandStreams:
    return one("kernels/expand_streams/expand_streams.cuh", instance("expandStreamsKernel", {t}),
               kernels::expandStreamsLaunch(rows, StepView::dim(v.result(0), 2)));
  case plan::OpKind::StreamMean:
    return one("kernels/stream_mean/stream_mean.cuh", instance("streamMeanKernel", {t}),
               kernels::streamMeanLaunch(rows, StepView::dim(v.operand(0), 2)));
  case plan::OpKind::RmsNorm: {
    const int64_t width = StepView::dim(v.operand(0), 1);
    const int64_t group = v.intAttr("group", width);
    return one("kernels/rms_norm/rms_norm.cuh", instance("rmsNormKernel", {t, w(0)}),
               kernels::rmsNormLaunch(rows * (width / group)));
  }
  case plan::OpKind::LayerNorm:
    return one("kernels/layer_norm/layer_norm.cuh", instance("layerNormKernel", {t, w(0)}),
               kernels::layerNormLaunch(rows));
  case plan::OpKind::MhcPre: {
    // fn, base and scale are read as one type.
    for (size_t i = 1; i < 3; ++i) {
      if (v.weight(i).element() != v.weight(0).element()) {
        return invalidArgument("step ", v.name(), ": mHC weights of different dtypes");
      }
    }
    const std::string hc = std::to_string(StepView::dim(v.operand(0), 1));
    const bool prefill = kernels::mhcPreUsesPrefill(rows);
    return one("kernels/mhc_pre/mhc_pre.cuh",
               instance(prefill ? "mhcPrePrefillKernel" : "mhcPreDecodeKernel", {t, w(0), hc}),
               kernels::mhcPreLaunch(rows, prefill));
  }
  case plan::OpKind::MhcPost:
    return one("kernels/mhc_post/mhc_post.cuh",
               instance("mhcPostKernel", {t, std::to_string(StepView::dim(v.operand(3), 1))}),
               kernels::mhcPostLaunch(rows, StepView::dim(v.operand(3), 2)));
  case plan::OpKind::SwiGlu:
    return one("kernels/swiglu/swiglu.cuh", instance("swigluKernel", {t}),
               kernels::swigluLaunch(rows, StepView::dim(v.operand(0), 1)));
  case plan::OpKind::Add:
    return one("kernels/add/add.cuh", instance("addKernel", {t}),
               kernels::addLaunch(
                   rows * (v.operand(0).shape()->size() > 1 ? StepView::dim(v.operand(0), 1) : 1)));
  case plan::OpKind::Concat: {
    if (v.operandCount() > static_cast<size_t>(kernels::kConcatMaxInputs)) {
      return invalidArgument("step ", v.name(), ": concat of ", v.operandCount(),
                             " inputs (the kernel takes ", kernels::kConcatMaxInputs, ")");
    }
    int64_t widest = 0;
    for (size_t i = 0; i < v.operandCount(); ++i) {
      widest = std::max(widest, StepView::dim(v.operand(i), 1));
    }
    return one("kernels/concat/concat.cuh", instance("concatKernel", {t}),
               kernels::concatLaunch(rows, widest, static_cast<int>(v.operandCount())));
  }
  case plan::OpKind::ShortConv:
    return one(
        "kernels/short_conv/short_conv.cuh", instance("shortConvKernel", {t, w(0)}),
        kernels::shortConvLaunch(StepView::dim(v.operand(0), 1), v.rowsPerSequence(), v.batch()));
  case plan::OpKind::Kda: {
    const bool decode = kernels::kdaUsesDecodeKernel(v.rowsPerSequence());
    if (v.intAttr("head_dim") > kernels::kKdaMaxKeyDim) {
      return invalidArgument("step ", v.name(), ": KDA head_dim ", v.intAttr("head_dim"),
                             " exceeds the kernel's ", kernels::kKdaMaxKeyDim);
    }
    return one(
        "kernels/kda/kda.cuh", instance(decode ? "kdaDecodeKernel" : "kdaPrefillKernel", {t, w(0)}),
        kernels::kdaLaunch(decode, v.intAttr("num_heads"), v.intAttr("head_dim"), v.batch()));
  }
  case plan::OpKind::GatedNorm: {
    const int64_t width = StepView::dim(v.operand(0), 1);
    const int64_t group = v.intAttr("group", width);
    return one("kernels/gated_rms_norm/gated_rms_norm.cuh",
               instance("gatedRmsNormKernel", {t, w(0)}),
               kernels::gatedRmsNormLaunch(rows * (width / group)));
  }
  case plan::OpKind::Linear: {
    if (v.weight(0).element() == plan::ElementType::F8E4M3) {
      return unimplemented("step ", v.name(),
                           ": fp8 weights on the GPU need their block scales "
                           "bound into the plan, which the compiler does not do yet");
    }
    const bool mma = v.activationType() == plan::ElementType::BF16 &&
                     denseElement(v.weight(0)) == plan::ElementType::BF16;
    const int64_t in = StepView::dim(v.operand(0), 1), out = StepView::dim(v.result(0), 1);
    const int sms = static_cast<int>(plan.target()->sm_count());
    const kernels::LinearKernel kernel =
        kernels::linearKernelFor(mma, rows, out, plan.target()->name()->str(), sms);
    return one("kernels/linear/linear.cuh", kernels::linearKernelName(kernel, t, w(0)),
               kernels::linearLaunch(kernel, rows, in, out, sms));
  }
  case plan::OpKind::MoeRouter: {
    const kernels::MoeRouterScores scores = kernels::moeRouterScoresKernelFor(rows);
    const int64_t experts = v.weight(0).rank_shape()->Get(0);
    return std::vector<SelectedLaunch>{
        {"kernels/moe_router/moe_router.cuh", kernels::moeRouterScoresName(scores, t, w(0)),
         kernels::moeRouterScoresLaunch(scores, rows, experts)},
        {"kernels/moe_router/moe_router.cuh", instance("moeRouterSelectKernel", {t}),
         kernels::moeRouterSelectLaunch(rows)}};
  }
  case plan::OpKind::MoeExperts: {
    const MoeShape m = moeShapeOf(v);
    std::vector<SelectedLaunch> out;
    if (m.exl3 == Exl3MoePath::FusedDecode) {
      for (const kernels::NamedLaunch &l : kernels::exl3MoeLaunches(
               m.exl3Bits, m.exl3Codebook, rows, m.hidden, m.inter, m.experts, m.topK)) {
        out.push_back({"kernels/exl3_moe/exl3_moe.cuh", l.name, l.dims});
      }
      return out;
    }
    if (m.exl3 == Exl3MoePath::FusedPrefill) {
      // The route and combine launches are moe_experts' kernels; the header includes both.
      for (const kernels::NamedLaunch &l : kernels::exl3MoePrefillLaunches(
               m.exl3Bits, m.exl3Codebook, rows, m.hidden, m.inter, m.experts, m.topK)) {
        out.push_back({"kernels/exl3_moe/exl3_moe_prefill.cuh", l.name, l.dims});
      }
      return out;
    }
    for (const kernels::NamedLaunch &l :
         kernels::moeExpertsLaunches(m.path, t, w(0), rows, m.hidden, m.inter, m.experts, m.topK)) {
      out.push_back({"kernels/moe_experts/moe_experts.cuh", l.name, l.dims});
    }
    return out;
  }
  case plan::OpKind::Sample:
    return one("kernels/sample/sample.cuh", "glm::kernels::sampleKernel",
               kernels::sampleLaunch(rows));
  case plan::OpKind::DsaIndexer: {
    const std::string state = typeName(v.state(0).element());
    const int64_t maxPools = maxPoolsOf(v);
    const char *header = "kernels/dsa_indexer/dsa_indexer.cuh";
    return std::vector<SelectedLaunch>{
        {header, instance("dsaIndexerAppendKernel", {t, state, w(0)}),
         kernels::dsaIndexerAppendLaunch(rows)},
        {header, instance("dsaIndexerScoreKernel", {t, state}),
         kernels::dsaIndexerScoreLaunch(rows, maxPools, v.intAttr("num_heads"),
                                        v.intAttr("head_dim"), plan.target()->sm_count())},
        {header, "glm::kernels::dsaIndexerFilterKernel",
         kernels::dsaIndexerFilterLaunch(rows, maxPools)},
        {header, "glm::kernels::dsaIndexerSelectKernel", kernels::dsaIndexerSelectLaunch(rows)}};
  }
  case plan::OpKind::MlaSparseAttention: {
    const MlaShape m = mlaShapeOf(v);
    const std::string state = typeName(v.state(0).element());
    const char *header = "kernels/mla_sparse_attention/mla_sparse_attention.cuh";
    return std::vector<SelectedLaunch>{
        {header, instance("mlaAbsorbKernel", {t, state, w(0)}),
         kernels::mlaAbsorbLaunch(rows, m.heads, m.rank)},
        {header, instance(m.mma ? "mlaAttendMmaKernel" : "mlaAttendKernel", {t, state}),
         kernels::mlaAttendLaunch(rows, m.heads, m.rank, m.chunks, m.mma)},
        {header, instance("mlaOutputKernel", {t, w(0)}),
         kernels::mlaOutputLaunch(rows, m.heads, v.intAttr("v_head_dim"))}};
  }
  case plan::OpKind::Convert:
    return one("kernels/convert/convert.cuh", "glm::kernels::convertBf16ToF32Kernel",
               kernels::convertLaunch(rows * StepView::dim(v.operand(0), 1)));
  default:
    break;
  }
  return unimplemented("no CUDA kernel for op ", plan::EnumNameOpKind(step.op()), " yet (step ",
                       v.name(), ")");
}

} // namespace

Expected<std::vector<SelectedLaunch>>
selectStepKernels(const plan::Plan &plan, const plan::Program &program, const plan::Step &step) {
  const runtime::StepView v(plan, program, step);
  GLM_ASSIGN_OR_RETURN(Exl3Staging staging, exl3StagingOf(v));
  GLM_ASSIGN_OR_RETURN(std::vector<SelectedLaunch> op, selectOpKernels(plan, v));
  if (staging.weights.empty()) {
    return op;
  }
  // buildStepArgs gives these launches their arguments in this order.
  const char *header = "kernels/exl3/exl3.cuh";
  std::vector<SelectedLaunch> out;
  if (staging.routed) {
    out.push_back({header, "glm::kernels::exl3SelectKernel", kernels::exl3SelectLaunch()});
  }
  for (const Exl3Staging::Weight &w : staging.weights) {
    out.push_back({header, "glm::kernels::exl3ReconstructKernel",
                   kernels::exl3ReconstructLaunch(w.layout.matrices, w.layout.k, w.layout.n)});
  }
  out.insert(out.end(), op.begin(), op.end());
  return out;
}

Expected<PlanKernels> buildPlanKernels(const plan::Plan &plan, const std::string &arch) {
  PlanKernels out;
  std::map<std::string, uint32_t> index; // name -> kernel
  for (const plan::Program *program : *plan.programs()) {
    auto &programLaunches = out.launches.emplace_back();
    for (const plan::Step *step : *program->steps()) {
      Expected<std::vector<SelectedLaunch>> chosen = selectStepKernels(plan, *program, *step);
      auto &stepLaunches = programLaunches.emplace_back();
      if (!chosen.ok() && chosen.status().code() == StatusCode::Unimplemented) {
        // The plan is still written (its partition, memory and IR are valid) with this step
        // launching nothing; inspect shows it and the engine refuses the plan by name.
        out.missing.push_back(chosen.status().message());
        continue;
      }
      GLM_ASSIGN_OR_RETURN(std::vector<SelectedLaunch> selected, std::move(chosen));
      GLM_ASSIGN_OR_RETURN(uint64_t workspace,
                           stepWorkspaceBytes(runtime::StepView(plan, *program, *step)));
      out.workspaceBytes = std::max(out.workspaceBytes, workspace);
      for (SelectedLaunch &s : selected) {
        auto [it, inserted] = index.try_emplace(s.name, static_cast<uint32_t>(out.kernels.size()));
        if (inserted) {
          out.kernels.push_back({s.name, s.header, "", {}, ""});
        }
        stepLaunches.push_back({it->second, s.dims});
      }
    }
  }
  // One NVRTC program per instance, compiled on every core: instances are independent, and a
  // cubin per kernel keeps each small and separately cached.
  std::atomic<size_t> next{0};
  std::vector<Status> errors(out.kernels.size(), Status::success());
  auto work = [&] {
    for (size_t i = next++; i < out.kernels.size(); i = next++) {
      PlanKernels::Instance &k = out.kernels[i];
      Expected<kernels::CompiledModule> m =
          kernels::compileKernels(strCat("#include \"", k.header, "\"\n"), {k.name}, arch);
      if (!m.ok()) {
        errors[i] = m.status().withContext(k.name);
        continue;
      }
      k.entry = m->entries[0];
      k.cubin = std::move(m->cubin);
      k.hash = m->hash;
    }
  };
  std::vector<std::thread> threads;
  const unsigned n = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                                     static_cast<unsigned>(out.kernels.size())));
  for (unsigned i = 0; i < n; ++i) {
    threads.emplace_back(work);
  }
  for (std::thread &th : threads) {
    th.join();
  }
  for (const Status &s : errors) {
    GLM_RETURN_IF_ERROR(s);
  }
  return out;
}

} // namespace glm::cuda
