// The elementwise family of glm-kernel-bench: mHC (mhc_pre, mhc_post, expand_streams,
// stream_mean), norms (rms_norm, layer_norm), swiglu, add, concat and embedding, in bf16 at the
// model's decode (batch 1 and 4; rms_norm also 8) and prefill (2048 rows) shapes.
#include "base/Random.h"
#include "kernels/add/add_gpu.h"
#include "kernels/concat/concat_gpu.h"
#include "kernels/embedding/embedding_gpu.h"
#include "kernels/expand_streams/expand_streams_gpu.h"
#include "kernels/layer_norm/layer_norm_gpu.h"
#include "kernels/mhc_post/mhc_post_gpu.h"
#include "kernels/mhc_pre/mhc_pre_gpu.h"
#include "kernels/rms_norm/rms_norm_gpu.h"
#include "kernels/stream_mean/stream_mean_gpu.h"
#include "kernels/swiglu/swiglu_gpu.h"
#include "tools/kernel-bench/Bench.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

namespace glm::bench {
namespace {

const char *kSource = R"(#include "kernels/add/add.cuh"
#include "kernels/concat/concat.cuh"
#include "kernels/embedding/embedding.cuh"
#include "kernels/expand_streams/expand_streams.cuh"
#include "kernels/layer_norm/layer_norm.cuh"
#include "kernels/mhc_post/mhc_post.cuh"
#include "kernels/mhc_pre/mhc_pre.cuh"
#include "kernels/rms_norm/rms_norm.cuh"
#include "kernels/stream_mean/stream_mean.cuh"
#include "kernels/swiglu/swiglu.cuh")";

enum Kernel : size_t {
  kMhcPreDecode,
  kMhcPrePrefill,
  kMhcPreDecodeF32,
  kMhcPost,
  kExpand,
  kMean,
  kRmsNorm,
  kLayerNorm,
  kSwiglu,
  kAdd,
  kConcat,
  kEmbedding,
  kMhcPostPreDecode,
  kMhcPostPreNormDecode,
};

constexpr size_t kL2Spill = size_t{128} << 20; // twice H200's 60 MB L2
const int64_t kRows[] = {1, 4, 2048};

void *at(const cuda::DeviceMemory &m, size_t bytes = 0) {
  return reinterpret_cast<void *>(m.ptr() + bytes);
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string s = "[";
  for (int64_t v : d) {
    if (s.size() > 1) {
      s += 'x';
    }
    s += std::to_string(v);
  }
  return s + "]";
}

/// Launches per timed burst. These kernels take a few microseconds at decode, less than the host
/// needs to submit one, so a lone launch between two events mostly times the submission. A burst
/// of back-to-back launches comes closer to what a replayed CUDA graph pays per kernel, though on
/// the H200 it measured, trivial kernels still come out near 4.5 us a launch (the driver's
/// submission rate), so treat that as the floor. The row reports the burst's per-launch time and
/// notes the lone launch's.
/// With `graph` the burst is captured as a CUDA graph, which removes the submission floor: that is
/// the per-kernel cost of a replayed step, and the only way to see a kernel that takes less.
constexpr int kBurst = 20;

Status timeBurst(Suite &suite, const std::function<Status()> &launch, Row &row,
                 bool graph = false) {
  Row alone = row; // named as the row, which --only matches
  GLM_RETURN_IF_ERROR(suite.time(launch, alone, 50));
  if (graph) {
    GLM_RETURN_IF_ERROR(suite.timeGraph(kBurst, [&](int) { return launch(); }, row, 20));
  } else {
    GLM_RETURN_IF_ERROR(suite.time(
        [&] {
          for (int i = 0; i < kBurst; ++i) {
            GLM_RETURN_IF_ERROR(launch());
          }
          return Status::success();
        },
        row, 20));
  }
  row.medianUs /= kBurst;
  row.spreadUs /= kBurst;
  char note[64];
  if (graph) {
    std::snprintf(note, sizeof note, "(graph of %d; alone %.1f us)", kBurst, alone.medianUs);
  } else {
    std::snprintf(note, sizeof note, "(alone %.1f us)", alone.medianUs);
  }
  row.note = row.note.empty() ? note : row.note + " " + note;
  return Status::success();
}

} // namespace

Status addElementwiseBenches(Suite &suite) {
  const glm53::Glm53Config &m = suite.model();
  const int64_t hidden = m.hiddenSize, hc = m.hcMult, mix = m.hcMixDim(), vocab = m.vocabSize;
  const int64_t denseInter = m.intermediateSize, expertInter = m.moeIntermediateSize;
  const int64_t indexHeadDim = m.indexHeadDim, qLoraRank = m.qLoraRank, kvLoraRank = m.kvLoraRank;
  // The row buffers hold the widest row any kernel below reads or writes (the dense MLP's for
  // GLM-5.3).
  const int64_t wide =
      std::max({denseInter, expertInter, hidden, qLoraRank, kvLoraRank, indexHeadDim});
  const std::string hcArg = std::to_string(hc); // mhc kernels take hc as a template argument
  GLM_ASSIGN_OR_RETURN(
      std::unique_ptr<cuda::Module> module,
      suite.compile(
          kSource,
          {
              "glm::kernels::mhcPreDecodeKernel<glm::kernels::Bf16, glm::kernels::Bf16, " + hcArg +
                  ">",
              "glm::kernels::mhcPrePrefillKernel<glm::kernels::Bf16, glm::kernels::Bf16, " + hcArg +
                  ">",
              "glm::kernels::mhcPreDecodeKernel<float, float, " + hcArg + ">",
              "glm::kernels::mhcPostKernel<glm::kernels::Bf16, " + hcArg + ">",
              "glm::kernels::expandStreamsKernel<glm::kernels::Bf16>",
              "glm::kernels::streamMeanKernel<glm::kernels::Bf16>",
              "glm::kernels::rmsNormKernel<glm::kernels::Bf16, glm::kernels::Bf16>",
              "glm::kernels::layerNormKernel<glm::kernels::Bf16, glm::kernels::Bf16>",
              "glm::kernels::swigluKernel<glm::kernels::Bf16>",
              "glm::kernels::addKernel<glm::kernels::Bf16>",
              "glm::kernels::concatKernel<glm::kernels::Bf16>",
              "glm::kernels::embeddingKernel<glm::kernels::Bf16, glm::kernels::Bf16>",
              "glm::kernels::mhcPostPreDecodeKernel<glm::kernels::Bf16, glm::kernels::Bf16, " +
                  hcArg + ">",
              "glm::kernels::mhcPostPreNormDecodeKernel<glm::kernels::Bf16, glm::kernels::Bf16, " +
                  hcArg + ", glm::kernels::Bf16>",
          }));
  cuda::CudaContext &ctx = suite.ctx();
  auto launch = [&](Kernel k, const kernels::LaunchDims &d, const auto &args) {
    return ctx.launch(module->function(k), d.grid, d.block, d.sharedMemory, args);
  };
  // Activations of the largest shape, reused by every row (they are read from wherever the previous
  // kernel left them in a real step; only weights rotate).
  const int64_t maxRows = 2048;
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory streams, suite.random(maxRows * hc * hidden, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory streamsF32, suite.random(16 * hc * hidden, false));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory streamsOut, ctx.allocate(maxRows * hc * hidden * 4));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory rowsA, suite.random(maxRows * wide * 2, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory rowsB, suite.random(maxRows * wide, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory rowsOut, ctx.allocate(maxRows * wide * 4));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory mixOut, ctx.allocate(maxRows * hc * hc * 4 * 3));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory post, suite.random(maxRows * hc, false, 0.5f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory comb, suite.random(maxRows * hc * hc, false, 0.25f));

  // mhc_pre's fn [(2 + hc)·hc, hc·hidden] (Flash: [24, 16384], 786 KB bf16) fits in L2 many times:
  // rotate through enough copies that each launch reads its own from HBM, as each of a decode
  // step's mixers (two a layer: Flash's 90) does.
  const size_t fnBytes = mix * hc * hidden * 2, fnStride = (fnBytes + 255) / 256 * 256;
  const size_t fnCopies = kL2Spill / fnStride + 1;
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory fn, suite.random(fnCopies * fnStride / 2, true, 0.02f));
  const size_t fnF32Stride = 2 * fnStride, fnF32Copies = kL2Spill / fnF32Stride + 1;
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory fnF32,
                       suite.random(fnF32Copies * fnF32Stride / 4, false, 0.02f));
  // base [(2 + hc)·hc] at the start, scale [3] at byte scaleAt, in one buffer of at least 128
  // elements (Flash's 24 f32 of base fit below 128 bytes).
  const size_t scaleAt = (mix * 4 + 127) / 128 * 128;
  const size_t mixCount = std::max<size_t>(128, scaleAt / 2 + 32);
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory mixParams, suite.random(mixCount, true, 0.5f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory mixParamsF32, suite.random(mixCount, false, 0.5f));

  // Decode batches either side of the kernel switch (64), and a prefill chunk; f32 at batch 1.
  struct MhcPreCase {
    int64_t rows;
    bool prefill, f32;
  };
  const MhcPreCase mhcPreCases[] = {{1, false, false},  {1, false, true},   {4, false, false},
                                    {16, false, false}, {64, false, false}, {64, true, false},
                                    {2048, true, false}};
  for (const MhcPreCase &c : mhcPreCases) {
    const int64_t rows = c.rows;
    const bool f32 = c.f32, prefill = c.prefill;
    size_t turn = 0;
    Row row;
    row.kernel = std::string(f32 ? "mhc_pre<f32,f32," : "mhc_pre<bf16,bf16,") + hcArg + ">" +
                 (prefill ? " prefill" : " decode");
    row.shape = dims({rows, hc, hidden}) + "·" + dims({mix, hc * hidden});
    const double act = f32 ? 4 : 2;
    row.bytes = rows * hc * hidden * act + (f32 ? 2 : 1) * fnBytes + rows * hidden * act +
                rows * (hc + hc * hc) * 4.0;
    row.flops = 2.0 * rows * hc * hidden * (mix + 2);
    row.note = "fn rotates over " + std::to_string(f32 ? fnF32Copies : fnCopies) + " copies";
    GLM_RETURN_IF_ERROR(timeBurst(
        suite,
        [&] {
          const size_t copy = turn++ % (f32 ? fnF32Copies : fnCopies);
          const kernels::MhcPreGpuArgs args{
              at(f32 ? streamsF32 : streams),
              at(f32 ? fnF32 : fn, copy * (f32 ? fnF32Stride : fnStride)),
              at(f32 ? mixParamsF32 : mixParams),
              at(f32 ? mixParamsF32 : mixParams, scaleAt),
              nullptr,
              at(mixOut),
              at(mixOut, maxRows * hc * 4),
              at(rowsOut),
              rows,
              hidden,
              static_cast<int32_t>(m.hcSinkhornIters),
              static_cast<float>(m.rmsNormEps),
              static_cast<float>(m.hcEps)};
          return launch(f32 ? kMhcPreDecodeF32 : (prefill ? kMhcPrePrefill : kMhcPreDecode),
                        kernels::mhcPreLaunch(rows, prefill), args);
        },
        row));
    suite.add(row);
  }

  // mhc_post folded into the next mixer (plan-fuse-mhc) at decode batches, and with it the
  // sub-block's input norm (plan-fuse-mhc-norm): against the mhc_pre decode rows above plus the
  // mhc_post and rms_norm rows below, the launches they save.
  for (const bool norm : {false, true}) {
    for (const int64_t rows : {int64_t{1}, int64_t{4}, int64_t{16}}) {
      size_t turn = 0;
      Row row;
      row.kernel = "mhc_post+mhc_pre" + std::string(norm ? "+rms_norm" : "") + "<bf16,bf16," +
                   hcArg + "> decode";
      row.shape = dims({rows, hc, hidden}) + "·" + dims({mix, hc * hidden});
      // y, the residual and the new streams, x; fn; post and comb read and written; with the norm,
      // x read back, the norm weight and the normalised x.
      row.bytes = rows * hidden * 2.0 * (2 + 2 * hc) + fnBytes + 2 * rows * (hc + hc * hc) * 4.0 +
                  (norm ? rows * hidden * 4.0 + hidden * 2.0 : 0.0);
      row.flops = 2.0 * rows * hc * hidden * (mix + 2) + 2.0 * rows * hc * hidden * (hc + 1) +
                  (norm ? 4.0 * rows * hidden : 0.0);
      row.note = "fn rotates over " + std::to_string(fnCopies) + " copies";
      GLM_RETURN_IF_ERROR(timeBurst(
          suite,
          [&] {
            const size_t copy = turn++ % fnCopies;
            kernels::MhcPreGpuArgs args{};
            args.fn = at(fn, copy * fnStride);
            args.base = at(mixParams);
            args.scale = at(mixParams, scaleAt);
            args.post = at(mixOut);
            args.comb = at(mixOut, maxRows * hc * 4);
            args.x = at(rowsOut);
            args.tokens = rows;
            args.hidden = hidden;
            args.sinkhornIters = static_cast<int32_t>(m.hcSinkhornIters);
            args.normEps = static_cast<float>(m.rmsNormEps);
            args.hcEps = static_cast<float>(m.hcEps);
            args.y = at(rowsA);
            args.residual = at(streams);
            args.lastPost = at(post);
            args.lastComb = at(comb);
            args.newStreams = at(streamsOut);
            if (norm) {
              args.inputNormWeight = at(rowsB);
              args.normed = at(rowsA, maxRows * hidden * 2); // past y's rows
              args.inputNormEps = static_cast<float>(m.rmsNormEps);
            }
            return launch(norm ? kMhcPostPreNormDecode : kMhcPostPreDecode,
                          kernels::mhcPreLaunch(rows, false), args);
          },
          row));
      suite.add(row);
    }
  }

  for (const int64_t rows : kRows) {
    Row row;
    row.kernel = "mhc_post<bf16," + hcArg + ">";
    row.shape = dims({rows, hc, hidden});
    row.bytes = rows * hidden * 2.0 * (1 + 2 * hc) + rows * (hc + hc * hc) * 4.0;
    row.flops = 2.0 * rows * hc * hidden * (hc + 1);
    GLM_RETURN_IF_ERROR(timeBurst(
        suite,
        [&] {
          const kernels::MhcPostGpuArgs args{at(rowsA),      at(streams), at(post), at(comb),
                                             at(streamsOut), rows,        hidden};
          return launch(kMhcPost, kernels::mhcPostLaunch(rows, hidden), args);
        },
        row));
    suite.add(row);
  }

  // The hidden-state norms (attn_norm, ffn_norm, the head's) at decode batches and a prefill
  // chunk, and MLA's q_a_norm and kv_a_norm at batch 1; in a graph, as a replayed step runs them.
  struct NormCase {
    int64_t rows, dim;
  };
  const NormCase normCases[] = {{1, hidden},    {4, hidden},    {8, hidden},
                                {2048, hidden}, {1, qLoraRank}, {1, kvLoraRank}};
  for (const NormCase &c : normCases) {
    Row row;
    row.kernel = "rms_norm<bf16,bf16>";
    row.shape = dims({c.rows, c.dim});
    row.bytes = c.rows * c.dim * 4.0 + c.dim * 2.0;
    row.flops = 4.0 * c.rows * c.dim;
    GLM_RETURN_IF_ERROR(timeBurst(
        suite,
        [&] {
          const kernels::RmsNormGpuArgs args{
              at(rowsA), at(rowsB), at(rowsOut), c.rows, c.dim, static_cast<float>(m.rmsNormEps)};
          return launch(kRmsNorm, kernels::rmsNormLaunch(c.rows), args);
        },
        row, true));
    suite.add(row);
  }

  // k_norm's bias after its weight, on a 256-byte boundary (at 512 for Flash's 128-wide keys).
  const size_t biasAt = std::max<size_t>(512, (indexHeadDim * 2 + 255) / 256 * 256);
  for (const int64_t rows : kRows) {
    Row row;
    row.kernel = "layer_norm<bf16,bf16> (k_norm)";
    row.shape = dims({rows, indexHeadDim});
    row.bytes = rows * indexHeadDim * 4.0 + indexHeadDim * 4.0;
    row.flops = 7.0 * rows * indexHeadDim;
    GLM_RETURN_IF_ERROR(timeBurst(
        suite,
        [&] {
          const kernels::LayerNormGpuArgs args{
              at(rowsA), at(rowsB), at(rowsB, biasAt), at(rowsOut), rows, indexHeadDim, 1e-6f};
          return launch(kLayerNorm, kernels::layerNormLaunch(rows), args);
        },
        row));
    suite.add(row);
  }

  struct Mlp {
    int64_t inter;
    const char *label;
  };
  for (const Mlp &mlp : {Mlp{denseInter, " dense"}, Mlp{expertInter, " expert"}}) {
    const int64_t inter = mlp.inter;
    for (const int64_t rows : kRows) {
      Row row;
      row.kernel = "swiglu<bf16>";
      row.shape = dims({rows, inter}) + mlp.label;
      row.bytes = rows * inter * 6.0;
      row.flops = 6.0 * rows * inter;
      GLM_RETURN_IF_ERROR(timeBurst(
          suite,
          [&] {
            const kernels::SwigluGpuArgs args{at(rowsA),
                                              at(rowsB),
                                              at(rowsOut),
                                              rows,
                                              inter,
                                              inter,
                                              static_cast<float>(m.swigluLimit)};
            return launch(kSwiglu, kernels::swigluLaunch(rows, inter), args);
          },
          row));
      suite.add(row);
    }
  }

  for (const int64_t rows : kRows) {
    struct Simple {
      const char *kernel;
      Kernel k;
      double bytes;
    } simple[] = {
        {"expand_streams<bf16>", kExpand, rows * hidden * 2.0 * (1 + hc)},
        {"stream_mean<bf16>", kMean, rows * hidden * 2.0 * (1 + hc)},
        {"add<bf16>", kAdd, rows * hidden * 6.0},
        {"concat<bf16> (MTP [e, h])", kConcat, rows * hidden * 8.0},
    };
    for (const Simple &s : simple) {
      Row row;
      row.kernel = s.kernel;
      row.shape = dims({rows, hidden});
      row.bytes = s.bytes;
      GLM_RETURN_IF_ERROR(timeBurst(
          suite,
          [&] {
            switch (s.k) {
            case kExpand:
              return launch(
                  kExpand, kernels::expandStreamsLaunch(rows, hidden),
                  kernels::ExpandStreamsGpuArgs{at(rowsA), at(streamsOut), rows, hc, hidden});
            case kMean:
              return launch(kMean, kernels::streamMeanLaunch(rows, hidden),
                            kernels::StreamMeanGpuArgs{at(streams), at(rowsOut), rows, hc, hidden});
            case kAdd:
              return launch(kAdd, kernels::addLaunch(rows * hidden),
                            kernels::AddGpuArgs{at(rowsA), at(rowsB), at(rowsOut), rows * hidden});
            default: {
              kernels::ConcatGpuArgs args{};
              args.inputs[0] = at(rowsA);
              args.inputs[1] = at(rowsB);
              args.widths[0] = args.widths[1] = hidden;
              args.out = at(rowsOut);
              args.rows = rows;
              args.count = 2;
              return launch(kConcat, kernels::concatLaunch(rows, hidden, 2), args);
            }
            }
          },
          row));
      suite.add(row);
    }
  }

  // The embedding table (Flash: 1.27 GB bf16) is far larger than L2; random ids read rows from HBM.
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory table, suite.random(vocab * hidden, true));
  std::vector<int32_t> ids(maxRows);
  SplitMix64 rng(7);
  for (int32_t &id : ids) {
    id = static_cast<int32_t>(rng.below(vocab));
  }
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dids, ctx.allocate(ids.size() * 4));
  GLM_RETURN_IF_ERROR(ctx.upload(dids.ptr(), ids.data(), ids.size() * 4));
  for (const int64_t rows : kRows) {
    Row row;
    row.kernel = "embedding<bf16,bf16>";
    row.shape = dims({rows}) + "·" + dims({vocab, hidden});
    row.bytes = rows * (4.0 + hidden * 4.0);
    size_t turn = 0;
    GLM_RETURN_IF_ERROR(timeBurst(
        suite,
        [&] {
          // A different window of ids each call, so rows do not stay in L2.
          const size_t first = (turn++ * 97) % (maxRows - rows + 1);
          return launch(kEmbedding, kernels::embeddingLaunch(rows, hidden),
                        kernels::EmbeddingGpuArgs{at(dids, first * 4), at(table), at(rowsOut), rows,
                                                  vocab, hidden, 1});
        },
        row));
    suite.add(row);
  }
  return Status::success();
}

} // namespace glm::bench
