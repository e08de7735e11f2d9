// The kda family's benchmarks: KDA's recurrence, short conv and gated norm at the model's shapes
// (linear_num_heads heads of linear_head_dim, conv kernel linear_conv_kernel_dim; GLM-5.3-Flash:
// 64 heads of 128, conv kernel 4), decode at batch 1 and 4, prefill chunks of 2048.
#include "kernels/gated_rms_norm/gated_rms_norm_gpu.h"
#include "kernels/kda/kda_gpu.h"
#include "kernels/short_conv/short_conv_gpu.h"
#include "tools/kernel-bench/Bench.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace glm::bench {
namespace {

/// Distinct bytes the rotation cycles through: three times the 60 MB L2, so that a call finds
/// none of its data in the cache.
constexpr double kRotateBytes = 192e6;

int copiesFor(double bytesPerCall) {
  return static_cast<int>(std::clamp(std::ceil(kRotateBytes / bytesPerCall), 1.0, 4096.0));
}

/// Positions 100.. for each of `batch` sequences of `rows` rows, and slots 0..batch-1.
struct Context {
  cuda::DeviceMemory positions, slots;
  kernels::StepContext ctx{};
};

Expected<Context> makeContext(Suite &suite, int batch, int rows) {
  std::vector<int32_t> positions, slots;
  for (int b = 0; b < batch; ++b) {
    slots.push_back(b);
    for (int r = 0; r < rows; ++r) {
      positions.push_back(100 + r);
    }
  }
  Context c;
  GLM_ASSIGN_OR_RETURN(c.positions, suite.ctx().allocate(positions.size() * 4));
  GLM_ASSIGN_OR_RETURN(c.slots, suite.ctx().allocate(slots.size() * 4));
  GLM_RETURN_IF_ERROR(
      suite.ctx().upload(c.positions.ptr(), positions.data(), positions.size() * 4));
  GLM_RETURN_IF_ERROR(suite.ctx().upload(c.slots.ptr(), slots.data(), slots.size() * 4));
  c.ctx = {c.positions.as<const int32_t>(), c.slots.as<const int32_t>(), nullptr, rows, 0};
  return c;
}

const char *tName(bool bf16) { return bf16 ? "bf16" : "f32"; }

/// Times `launch(i)` (i: which copy of the data to use, cycling through `copies`): one launch per
/// timed call, or with `graph` a graph of one launch per copy (8 to 64 launches; a kernel so small
/// that 64 copies fit in L2 then finds its data there, as it would after the step that wrote it),
/// whose row counts the bytes and FLOPs of all its launches.
Status timeRotating(Suite &suite, int copies, bool graph, const std::function<Status(int)> &launch,
                    Row &row, int reps) {
  if (graph) {
    const int count = std::clamp(copies, 8, 64);
    row.bytes *= count;
    row.flops *= count;
    row.note = strCat("graph of ", count, " launches", row.note.empty() ? "" : "; ", row.note);
    return suite.timeGraph(count, [&](int i) { return launch(i % copies); }, row, reps);
  }
  int next = 0;
  return suite.time(
      [&] {
        const int i = next;
        next = (next + 1) % copies;
        return launch(i);
      },
      row, reps);
}

/// kda<T, f32> at `batch` sequences of `rows` rows, each launch on the next copy of the state; with
/// `norm` (bf16 decode), kdaDecodeNormKernel: the gated output norm folded in (plan-fuse-kda-norm).
Status benchKda(Suite &suite, cuda::Module &module, bool decode, bool bf16, int batch, int rows,
                bool graph, bool norm = false) {
  const glm53::Glm53Config &m = suite.model();
  const int64_t heads = m.linearNumHeads, dim = m.linearHeadDim, proj = m.kdaProjDim();
  const int64_t n = static_cast<int64_t>(batch) * rows;
  const int act = bf16 ? 2 : 4;
  const double stateBytes = static_cast<double>(batch) * heads * dim * dim * 4;
  // State read and written; q, k, v, f and b read; o written; A_log and dt_bias read.
  // With the norm: the gate read, the norm written (o is read back from L2), its weight read.
  const double bytes = 2 * stateBytes + n * (4.0 * proj + heads) * act + n * proj * act +
                       (heads + proj) * 4.0 + (norm ? 2.0 * n * proj * act + dim * 2.0 : 0.0);
  const int copies = copiesFor(bytes);
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory q, suite.random(n * proj, bf16));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory k, suite.random(n * proj, bf16));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory v, suite.random(n * proj, bf16));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory f, suite.random(n * proj, bf16, 2.0f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory b, suite.random(n * heads, bf16));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory aLog, suite.random(heads, false, 0.5f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dtBias, suite.random(proj, false, 0.5f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory out, suite.ctx().allocate(n * proj * act));
  const size_t unit = heads * dim * dim * 4;
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory state,
                       suite.random(static_cast<size_t>(copies) * batch * unit / 4, false, 0.1f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory gate, suite.random(norm ? n * proj : 1, bf16));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory normWeight, suite.random(norm ? dim : 1, bf16));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory normed, suite.ctx().allocate(n * proj * act));
  GLM_ASSIGN_OR_RETURN(Context c, makeContext(suite, batch, rows));
  kernels::KdaGpuArgs args{q.as<const void>(),
                           k.as<const void>(),
                           v.as<const void>(),
                           f.as<const void>(),
                           b.as<const void>(),
                           aLog.as<const void>(),
                           dtBias.as<const void>(),
                           out.as<void>(),
                           {state.as<uint8_t>(), static_cast<int64_t>(unit)},
                           c.ctx,
                           static_cast<int32_t>(heads),
                           static_cast<int32_t>(dim),
                           static_cast<int32_t>(dim),
                           static_cast<float>(m.linearLowerBound),
                           1e-6f};
  if (norm) {
    args.gate = gate.as<const void>();
    args.normWeight = normWeight.as<const void>();
    args.normed = normed.as<void>();
    args.normEps = static_cast<float>(m.rmsNormEps);
  }
  const kernels::LaunchDims d = kernels::kdaLaunch(decode, heads, dim, batch);
  const cuda::CUfunction fn = module.function(norm ? 4 : (decode ? 0 : 2) + (bf16 ? 1 : 0));
  Row row;
  row.kernel = norm ? "kda+gated_norm<bf16,f32,bf16> decode"
                    : strCat("kda<", tName(bf16), ",f32> ", decode ? "decode" : "prefill");
  row.shape = strCat("B", batch, "xR", rows, " [", heads, "x", dim, "x", dim, "]");
  row.bytes = bytes;
  row.flops = 7.0 * n * heads * dim * dim; // decay, m, write, read: 7 per state element
  row.note = rows > 4 ? "per-token recurrence; chunked (WY) form not yet" : "";
  GLM_RETURN_IF_ERROR(timeRotating(
      suite, copies, graph,
      [&](int i) {
        args.state.base = state.as<uint8_t>() + static_cast<size_t>(i) * batch * unit;
        return suite.ctx().launch(fn, d.grid, d.block, d.sharedMemory, args);
      },
      row, rows > 64 ? 20 : 100));
  suite.add(row);
  return Status::success();
}

/// short_conv<bf16, f32> over `parts` of KDA's q/k/v projections in one launch (each heads × head
/// dim channels; 8192 for Flash): 1, or a KDA layer's three as plan-group-short-convs puts them.
Status benchShortConv(Suite &suite, cuda::Module &module, int batch, int rows, bool graph,
                      int parts = 1) {
  const int64_t proj = suite.model().kdaProjDim(), conv = suite.model().linearConvKernelDim;
  const int64_t n = static_cast<int64_t>(batch) * rows;
  // Each copy holds the parts one after another.
  const size_t xBytes = n * proj * 2, wBytes = proj * conv * 4;
  const size_t stateUnit = proj * (conv - 1) * 2;
  const double bytes = parts * (2.0 * xBytes + wBytes + 2.0 * batch * stateUnit);
  const int copies = copiesFor(bytes);
  const size_t slots = static_cast<size_t>(copies) * parts;
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory x, suite.random(slots * xBytes / 2, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory w, suite.random(slots * wBytes / 4, false, 0.5f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory state, suite.random(slots * batch * stateUnit / 2, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory out, suite.ctx().allocate(slots * xBytes));
  GLM_ASSIGN_OR_RETURN(Context c, makeContext(suite, batch, rows));
  kernels::ShortConvGpuArgs args{};
  for (int p = 0; p < parts; ++p) {
    args.part[p].channels = proj;
    args.part[p].blockEnd = kernels::shortConvPartEnd(p == 0 ? 0 : args.part[p - 1].blockEnd, proj);
  }
  args.parts = parts;
  args.ctx = c.ctx;
  args.kernelSize = static_cast<int32_t>(conv);
  args.silu = 1;
  const kernels::LaunchDims d = kernels::shortConvLaunch(args, batch);
  Row row;
  row.kernel = parts == 1 ? "short_conv<bf16,f32>" : strCat("short_conv<bf16,f32> x", parts);
  row.shape = strCat("B", batch, "xR", rows, " [", proj, "] k", conv);
  row.bytes = bytes;
  row.flops = 2.0 * parts * n * proj * conv;
  GLM_RETURN_IF_ERROR(timeRotating(
      suite, copies, graph,
      [&](int i) {
        for (int p = 0; p < parts; ++p) {
          const size_t k = static_cast<size_t>(i) * parts + p;
          kernels::ShortConvPart &part = args.part[p];
          part.x = x.as<const uint8_t>() + k * xBytes;
          part.weight = w.as<const uint8_t>() + k * wBytes;
          part.out = out.as<uint8_t>() + k * xBytes;
          part.state = {state.as<uint8_t>() + k * batch * stateUnit,
                        static_cast<int64_t>(stateUnit)};
        }
        return suite.ctx().launch(module.function(0), d.grid, d.block, d.sharedMemory, args);
      },
      row, 100));
  suite.add(row);
  return Status::success();
}

/// gated_rms_norm<bf16, bf16> over `tokens` tokens of KDA's heads.
Status benchGatedNorm(Suite &suite, cuda::Module &module, int tokens, bool graph) {
  const glm53::Glm53Config &m = suite.model();
  const int64_t heads = m.linearNumHeads, dim = m.linearHeadDim;
  const int64_t rows = static_cast<int64_t>(tokens) * heads;
  const size_t xBytes = rows * dim * 2, wBytes = dim * 2;
  const double bytes = 3.0 * xBytes + wBytes;
  const int copies = copiesFor(bytes);
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory x, suite.random(copies * xBytes / 2, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory gate, suite.random(copies * xBytes / 2, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory w, suite.random(copies * wBytes / 2, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory out, suite.ctx().allocate(copies * xBytes));
  kernels::GatedRmsNormGpuArgs args{
      nullptr, nullptr, nullptr, nullptr, rows, dim, static_cast<float>(m.rmsNormEps)};
  const kernels::LaunchDims d = kernels::gatedRmsNormLaunch(rows);
  Row row;
  row.kernel = "gated_rms_norm<bf16,bf16>";
  row.shape = strCat("[", tokens, "x", heads, "x", dim, "]");
  row.bytes = bytes;
  row.flops = 6.0 * rows * dim;
  GLM_RETURN_IF_ERROR(timeRotating(
      suite, copies, graph,
      [&](int i) {
        args.x = x.as<const uint8_t>() + i * xBytes;
        args.gate = gate.as<const uint8_t>() + i * xBytes;
        args.weight = w.as<const uint8_t>() + i * wBytes;
        args.out = out.as<uint8_t>() + i * xBytes;
        return suite.ctx().launch(module.function(0), d.grid, d.block, d.sharedMemory, args);
      },
      row, 100));
  suite.add(row);
  return Status::success();
}

} // namespace

Status addKdaBenches(Suite &suite) {
  GLM_ASSIGN_OR_RETURN(
      std::unique_ptr<cuda::Module> kda,
      suite.compile(R"(#include "kernels/kda/kda.cuh")",
                    {"glm::kernels::kdaDecodeKernel<float, float>",
                     "glm::kernels::kdaDecodeKernel<glm::kernels::Bf16, float>",
                     "glm::kernels::kdaPrefillKernel<float, float>",
                     "glm::kernels::kdaPrefillKernel<glm::kernels::Bf16, float>",
                     strCat("glm::kernels::kdaDecodeNormKernel<glm::kernels::Bf16, float, "
                            "glm::kernels::Bf16, ",
                            kernels::kdaNormCluster(suite.model().linearHeadDim), ">")}));
  // Decode: one launch per timed call (host launch gaps included), then a graph of one launch per
  // state copy (back to back, as the engine's captured programs run layers).
  for (int batch : {1, 4}) {
    for (bool graph : {false, true}) {
      GLM_RETURN_IF_ERROR(benchKda(suite, *kda, true, true, batch, 1, graph));
    }
  }
  GLM_RETURN_IF_ERROR(benchKda(suite, *kda, true, false, 1, 1, true));
  // The decode kernel with the gated output norm folded in, against the kda and gated_rms_norm
  // rows of the same batch (graphs).
  for (int batch : {1, 4}) {
    GLM_RETURN_IF_ERROR(benchKda(suite, *kda, true, true, batch, 1, true, true));
  }
  // Both kernels at decode shapes and at prefill's: what kdaUsesDecodeKernel's split rests on.
  GLM_RETURN_IF_ERROR(benchKda(suite, *kda, false, true, 1, 1, true));
  GLM_RETURN_IF_ERROR(benchKda(suite, *kda, true, true, 1, 4, true));
  GLM_RETURN_IF_ERROR(benchKda(suite, *kda, false, true, 1, 4, true));
  GLM_RETURN_IF_ERROR(benchKda(suite, *kda, false, true, 1, 2048, false));
  GLM_RETURN_IF_ERROR(benchKda(suite, *kda, true, true, 1, 2048, false));

  GLM_ASSIGN_OR_RETURN(std::unique_ptr<cuda::Module> conv,
                       suite.compile(R"(#include "kernels/short_conv/short_conv.cuh")",
                                     {"glm::kernels::shortConvKernel<glm::kernels::Bf16, float>"}));
  for (auto [batch, rows] : {std::pair{1, 1}, {4, 1}, {1, 2048}}) {
    GLM_RETURN_IF_ERROR(benchShortConv(suite, *conv, batch, rows, false));
  }
  GLM_RETURN_IF_ERROR(benchShortConv(suite, *conv, 1, 1, true));
  // A KDA layer's three convs in one launch, against three of the row above.
  GLM_RETURN_IF_ERROR(benchShortConv(suite, *conv, 1, 1, true, 3));
  GLM_RETURN_IF_ERROR(benchShortConv(suite, *conv, 4, 1, true, 3));

  GLM_ASSIGN_OR_RETURN(
      std::unique_ptr<cuda::Module> norm,
      suite.compile(R"(#include "kernels/gated_rms_norm/gated_rms_norm.cuh")",
                    {"glm::kernels::gatedRmsNormKernel<glm::kernels::Bf16, glm::kernels::Bf16>"}));
  for (int tokens : {1, 4, 8, 2048}) {
    GLM_RETURN_IF_ERROR(benchGatedNorm(suite, *norm, tokens, false));
  }
  for (int tokens : {1, 4, 8}) {
    GLM_RETURN_IF_ERROR(benchGatedNorm(suite, *norm, tokens, true));
  }
  return Status::success();
}

} // namespace glm::bench
