// The elementwise family of glm-kernel-bench: mHC (mhc_pre, mhc_post, expand_streams,
// stream_mean), norms (rms_norm, layer_norm), swiglu, add, concat and embedding, in bf16 at
// GLM-5.3-Flash's decode (batch 1 and 4; rms_norm also 8) and prefill (2048 rows) shapes.
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
#include "runtime/common/Random.h"
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
};

// GLM-5.3-Flash.
constexpr int64_t kHidden = 4096, kHc = 4, kMix = (2 + kHc) * kHc, kVocab = 154880;
constexpr int64_t kDenseInter = 12288, kExpertInter = 2048, kIndexHeadDim = 128;
constexpr int64_t kQLoraRank = 1536, kKvLoraRank = 512;
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
  Row alone;
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
  GLM_ASSIGN_OR_RETURN(
      std::unique_ptr<cuda::Module> module,
      suite.compile(
          kSource,
          {
              "glm::kernels::mhcPreDecodeKernel<glm::kernels::Bf16, glm::kernels::Bf16, 4>",
              "glm::kernels::mhcPrePrefillKernel<glm::kernels::Bf16, glm::kernels::Bf16, "
              "4>",
              "glm::kernels::mhcPreDecodeKernel<float, float, 4>",
              "glm::kernels::mhcPostKernel<glm::kernels::Bf16, 4>",
              "glm::kernels::expandStreamsKernel<glm::kernels::Bf16>",
              "glm::kernels::streamMeanKernel<glm::kernels::Bf16>",
              "glm::kernels::rmsNormKernel<glm::kernels::Bf16, glm::kernels::Bf16>",
              "glm::kernels::layerNormKernel<glm::kernels::Bf16, glm::kernels::Bf16>",
              "glm::kernels::swigluKernel<glm::kernels::Bf16>",
              "glm::kernels::addKernel<glm::kernels::Bf16>",
              "glm::kernels::concatKernel<glm::kernels::Bf16>",
              "glm::kernels::embeddingKernel<glm::kernels::Bf16, glm::kernels::Bf16>",
          }));
  cuda::CudaContext &ctx = suite.ctx();
  auto launch = [&](Kernel k, const kernels::LaunchDims &d, const auto &args) {
    return ctx.launch(module->function(k), d.grid, d.block, d.sharedMemory, args);
  };
  // Activations of the largest shape, reused by every row (they are read from wherever the previous
  // kernel left them in a real step; only weights rotate).
  const int64_t maxRows = 2048;
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory streams, suite.random(maxRows * kHc * kHidden, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory streamsF32, suite.random(16 * kHc * kHidden, false));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory streamsOut, ctx.allocate(maxRows * kHc * kHidden * 4));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory rowsA, suite.random(maxRows * kDenseInter * 2, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory rowsB, suite.random(maxRows * kDenseInter, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory rowsOut, ctx.allocate(maxRows * kDenseInter * 4));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory mixOut, ctx.allocate(maxRows * kHc * kHc * 4 * 3));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory post, suite.random(maxRows * kHc, false, 0.5f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory comb, suite.random(maxRows * kHc * kHc, false, 0.25f));

  // mhc_pre's fn [24, 16384] (786 KB bf16) fits in L2 many times: rotate through enough copies
  // that each launch reads its own from HBM, as each of the 90 mixers of a decode step does.
  const size_t fnBytes = kMix * kHc * kHidden * 2, fnStride = (fnBytes + 255) / 256 * 256;
  const size_t fnCopies = kL2Spill / fnStride + 1;
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory fn, suite.random(fnCopies * fnStride / 2, true, 0.02f));
  const size_t fnF32Stride = 2 * fnStride, fnF32Copies = kL2Spill / fnF32Stride + 1;
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory fnF32,
                       suite.random(fnF32Copies * fnF32Stride / 4, false, 0.02f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory mixParams, suite.random(128, true, 0.5f));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory mixParamsF32, suite.random(128, false, 0.5f));

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
    row.kernel = std::string(f32 ? "mhc_pre<f32,f32,4>" : "mhc_pre<bf16,bf16,4>") +
                 (prefill ? " prefill" : " decode");
    row.shape = dims({rows, kHc, kHidden}) + "·" + dims({kMix, kHc * kHidden});
    const double act = f32 ? 4 : 2;
    row.bytes = rows * kHc * kHidden * act + (f32 ? 2 : 1) * fnBytes + rows * kHidden * act +
                rows * (kHc + kHc * kHc) * 4.0;
    row.flops = 2.0 * rows * kHc * kHidden * (kMix + 2);
    row.note = "fn rotates over " + std::to_string(f32 ? fnF32Copies : fnCopies) + " copies";
    GLM_RETURN_IF_ERROR(timeBurst(
        suite,
        [&] {
          const size_t copy = turn++ % (f32 ? fnF32Copies : fnCopies);
          const kernels::MhcPreGpuArgs args{
              at(f32 ? streamsF32 : streams),
              at(f32 ? fnF32 : fn, copy * (f32 ? fnF32Stride : fnStride)),
              at(f32 ? mixParamsF32 : mixParams),
              at(f32 ? mixParamsF32 : mixParams, 128),
              nullptr,
              at(mixOut),
              at(mixOut, maxRows * kHc * 4),
              at(rowsOut),
              rows,
              kHidden,
              20,
              1e-5f,
              1e-6f};
          return launch(f32 ? kMhcPreDecodeF32 : (prefill ? kMhcPrePrefill : kMhcPreDecode),
                        kernels::mhcPreLaunch(rows, prefill), args);
        },
        row));
    suite.add(row);
  }

  for (const int64_t rows : kRows) {
    Row row;
    row.kernel = "mhc_post<bf16,4>";
    row.shape = dims({rows, kHc, kHidden});
    row.bytes = rows * kHidden * 2.0 * (1 + 2 * kHc) + rows * (kHc + kHc * kHc) * 4.0;
    row.flops = 2.0 * rows * kHc * kHidden * (kHc + 1);
    GLM_RETURN_IF_ERROR(timeBurst(
        suite,
        [&] {
          const kernels::MhcPostGpuArgs args{at(rowsA),      at(streams), at(post), at(comb),
                                             at(streamsOut), rows,        kHidden};
          return launch(kMhcPost, kernels::mhcPostLaunch(rows, kHidden), args);
        },
        row));
    suite.add(row);
  }

  // The hidden-state norms (attn_norm, ffn_norm, the head's) at decode batches and a prefill
  // chunk, and MLA's q_a_norm and kv_a_norm at batch 1; in a graph, as a replayed step runs them.
  struct NormCase {
    int64_t rows, dim;
  };
  const NormCase normCases[] = {{1, kHidden},    {4, kHidden},    {8, kHidden},
                                {2048, kHidden}, {1, kQLoraRank}, {1, kKvLoraRank}};
  for (const NormCase &c : normCases) {
    Row row;
    row.kernel = "rms_norm<bf16,bf16>";
    row.shape = dims({c.rows, c.dim});
    row.bytes = c.rows * c.dim * 4.0 + c.dim * 2.0;
    row.flops = 4.0 * c.rows * c.dim;
    GLM_RETURN_IF_ERROR(timeBurst(
        suite,
        [&] {
          const kernels::RmsNormGpuArgs args{at(rowsA), at(rowsB), at(rowsOut),
                                             c.rows,    c.dim,     1e-5f};
          return launch(kRmsNorm, kernels::rmsNormLaunch(c.rows), args);
        },
        row, true));
    suite.add(row);
  }

  for (const int64_t rows : kRows) {
    Row row;
    row.kernel = "layer_norm<bf16,bf16> (k_norm)";
    row.shape = dims({rows, kIndexHeadDim});
    row.bytes = rows * kIndexHeadDim * 4.0 + kIndexHeadDim * 4.0;
    row.flops = 7.0 * rows * kIndexHeadDim;
    GLM_RETURN_IF_ERROR(timeBurst(
        suite,
        [&] {
          const kernels::LayerNormGpuArgs args{
              at(rowsA), at(rowsB), at(rowsB, 512), at(rowsOut), rows, kIndexHeadDim, 1e-6f};
          return launch(kLayerNorm, kernels::layerNormLaunch(rows), args);
        },
        row));
    suite.add(row);
  }

  for (const int64_t inter : {kDenseInter, kExpertInter}) {
    for (const int64_t rows : kRows) {
      Row row;
      row.kernel = "swiglu<bf16>";
      row.shape = dims({rows, inter}) + (inter == kDenseInter ? " dense" : " expert");
      row.bytes = rows * inter * 6.0;
      row.flops = 6.0 * rows * inter;
      GLM_RETURN_IF_ERROR(timeBurst(
          suite,
          [&] {
            const kernels::SwigluGpuArgs args{at(rowsA), at(rowsB), at(rowsOut), rows,
                                              inter,     inter,     10.0f};
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
        {"expand_streams<bf16>", kExpand, rows * kHidden * 2.0 * (1 + kHc)},
        {"stream_mean<bf16>", kMean, rows * kHidden * 2.0 * (1 + kHc)},
        {"add<bf16>", kAdd, rows * kHidden * 6.0},
        {"concat<bf16> (MTP [e, h])", kConcat, rows * kHidden * 8.0},
    };
    for (const Simple &s : simple) {
      Row row;
      row.kernel = s.kernel;
      row.shape = dims({rows, kHidden});
      row.bytes = s.bytes;
      GLM_RETURN_IF_ERROR(timeBurst(
          suite,
          [&] {
            switch (s.k) {
            case kExpand:
              return launch(
                  kExpand, kernels::expandStreamsLaunch(rows, kHidden),
                  kernels::ExpandStreamsGpuArgs{at(rowsA), at(streamsOut), rows, kHc, kHidden});
            case kMean:
              return launch(
                  kMean, kernels::streamMeanLaunch(rows, kHidden),
                  kernels::StreamMeanGpuArgs{at(streams), at(rowsOut), rows, kHc, kHidden});
            case kAdd:
              return launch(kAdd, kernels::addLaunch(rows * kHidden),
                            kernels::AddGpuArgs{at(rowsA), at(rowsB), at(rowsOut), rows * kHidden});
            default: {
              kernels::ConcatGpuArgs args{};
              args.inputs[0] = at(rowsA);
              args.inputs[1] = at(rowsB);
              args.widths[0] = args.widths[1] = kHidden;
              args.out = at(rowsOut);
              args.rows = rows;
              args.count = 2;
              return launch(kConcat, kernels::concatLaunch(rows, kHidden, 2), args);
            }
            }
          },
          row));
      suite.add(row);
    }
  }

  // The embedding table (1.27 GB bf16) is far larger than L2; random ids read rows from HBM.
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory table, suite.random(kVocab * kHidden, true));
  std::vector<int32_t> ids(maxRows);
  SplitMix64 rng(7);
  for (int32_t &id : ids) {
    id = static_cast<int32_t>(rng.below(kVocab));
  }
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory dids, ctx.allocate(ids.size() * 4));
  GLM_RETURN_IF_ERROR(ctx.upload(dids.ptr(), ids.data(), ids.size() * 4));
  for (const int64_t rows : kRows) {
    Row row;
    row.kernel = "embedding<bf16,bf16>";
    row.shape = dims({rows}) + "·" + dims({kVocab, kHidden});
    row.bytes = rows * (4.0 + kHidden * 4.0);
    size_t turn = 0;
    GLM_RETURN_IF_ERROR(timeBurst(
        suite,
        [&] {
          // A different window of ids each call, so rows do not stay in L2.
          const size_t first = (turn++ * 97) % (maxRows - rows + 1);
          return launch(kEmbedding, kernels::embeddingLaunch(rows, kHidden),
                        kernels::EmbeddingGpuArgs{at(dids, first * 4), at(table), at(rowsOut), rows,
                                                  kVocab, kHidden, 1});
        },
        row));
    suite.add(row);
  }
  return Status::success();
}

} // namespace glm::bench
