// mla_sparse_attention's CUDA kernels against the CPU reference: outputs, and the latent rows
// appended to paged state (f32, bf16 and fp8 e4m3), at GLM-5.3-Flash's dimensions and the tiny
// model's, with kv_b plain or encoded (Q4 groups, fp8 blocks: random valid bytes, which the
// reference reads through WeightView::encoded).
#include "kernels/mla_sparse_attention/mla_sparse_attention.h"
#include "kernels/mla_sparse_attention/mla_sparse_attention_gpu.h"
#include "tests/gpu/support/GpuTest.h"
#include "tests/gpu/support/PagedSequences.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

namespace glm::testing {
namespace {

const char *kSource = R"(#include "kernels/mla_sparse_attention/mla_sparse_attention.cuh")";

// config.json: num_attention_heads, qk_nope_head_dim, v_head_dim, kv_lora_rank, and the indexer's
// row width index_topk + index_kpool - 1.
struct Dims {
  int64_t heads, qkHeadDim, vHeadDim, rank, width;
  const char *name;
};
const Dims kFlash{64, 256, 256, 512, 2051, "flash"};
const Dims kTiny{4, 32, 32, 32, 19, "tiny"};
// The tiny model's heads with a rank Q4 groups can split (a multiple of 64), under one fp8 block.
const Dims kSmall{4, 32, 32, 64, 19, "small"};

/// (activations, latent state): an f32 plan, a bf16 plan, a bf16 plan with --kv fp8.
enum class Kind { F32, Bf16, Fp8 };
/// How kv_b is held: the activations' type, Q4 groups or fp8 blocks
/// (kernels/common/DenseFormats.h).
enum class KvB { Plain, Q4, Fp8 };

std::string activationType(Kind k) { return k == Kind::F32 ? "float" : "glm::kernels::Bf16"; }
std::string stateType(Kind k) {
  return k == Kind::F32    ? "float"
         : k == Kind::Bf16 ? "glm::kernels::Bf16"
                           : "glm::kernels::Fp8E4m3";
}
std::string weightType(Kind k, KvB w) {
  return w == KvB::Q4    ? "glm::kernels::MlaQ4Groups"
         : w == KvB::Fp8 ? "glm::kernels::Fp8E4m3"
                         : activationType(k);
}
std::string absorbName(Kind k, KvB w) {
  return "glm::kernels::mlaAbsorbKernel<" + activationType(k) + ", " + stateType(k) + ", " +
         weightType(k, w) + ">";
}
std::string attendName(Kind k, bool mma) {
  return std::string(mma ? "glm::kernels::mlaAttendMmaKernel<" : "glm::kernels::mlaAttendKernel<") +
         activationType(k) + ", " + stateType(k) + ">";
}
std::string outputName(Kind k, KvB w) {
  return "glm::kernels::mlaOutputKernel<" + activationType(k) + ", " + weightType(k, w) + ">";
}

/// Every instance the tests launch, in the module's order.
const std::vector<std::string> &kernelNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    for (Kind k : {Kind::F32, Kind::Bf16, Kind::Fp8}) {
      for (KvB w : {KvB::Plain, KvB::Q4, KvB::Fp8}) {
        n.push_back(absorbName(k, w));
        n.push_back(outputName(k, w));
      }
      n.push_back(attendName(k, false));
      if (k != Kind::F32) {
        n.push_back(attendName(k, true));
      }
    }
    std::vector<std::string> distinct;
    for (const std::string &name : n) {
      if (std::find(distinct.begin(), distinct.end(), name) == distinct.end()) {
        distinct.push_back(name);
      }
    }
    return distinct;
  }();
  return names;
}
int fn(const std::string &name) {
  const std::vector<std::string> &names = kernelNames();
  return static_cast<int>(std::find(names.begin(), names.end(), name) - names.begin());
}

/// A GPU MLA layer with paged latents for several sequences, and the CPU reference of each
/// sequence beside it; every step is checked as it runs.
class Mla {
public:
  Mla(cuda::Module &module, Dims dims, Kind kind, int maxSeqs, int64_t maxContext,
      int64_t pageTokens, KvB kvb = KvB::Plain)
      : module_(module), dims_(dims), kind_(kind), kvb_(kvb) {
    // Other layers' rows sit before and after this layer's in every page, 256 bytes apart.
    paged_ = PagedSequences(maxSeqs, maxContext, pageTokens, pageTokens, dims.rank * stateBytes(),
                            256, 77);
    // Weights of std 2 / sqrt(rank) give scores of std about 2: a softmax neither flat nor one-hot.
    SplitMix64 wrng(3);
    kvB_.resize(static_cast<size_t>(dims.heads * (dims.qkHeadDim + dims.vHeadDim) * dims.rank));
    for (float &v : kvB_) {
      v = round(2.0f / std::sqrt(static_cast<float>(dims.rank)) * wrng.normal());
    }
    if (kvb != KvB::Plain) {
      encodeRandom(wrng);
    }
    refs_.resize(static_cast<size_t>(maxSeqs));
    for (Ref &ref : refs_) {
      ref.latents.assign(static_cast<size_t>(maxContext * dims.rank), 0.0f);
    }
    maxContext_ = maxContext;
  }

  void init() {
    GLM_ASSERT_OK(paged_.allocate());
    if (kvb_ == KvB::Plain) {
      GLM_ASSERT_OK_AND_ASSIGN(dKvB_, upload(kvB_));
    } else {
      GLM_ASSERT_OK_AND_ASSIGN(dKvB_, toDevice(kvBytes_));
    }
  }

  /// One step: `seqs` with `rowsPerSeq` rows each. Rows select nothing unless their position is
  /// a multiple of `denseEvery` (the reference's cost is in the selected rows).
  void step(const std::vector<PagedSeq> &seqs, int64_t rowsPerSeq, int64_t denseEvery = 1) {
    const int64_t B = static_cast<int64_t>(seqs.size()), R = rowsPerSeq, rows = B * R;
    const int64_t H = dims_.heads, dqk = dims_.qkHeadDim, dv = dims_.vHeadDim, rank = dims_.rank;
    const int64_t width = dims_.width;
    std::vector<int32_t> selected(static_cast<size_t>(rows * width), -1);
    std::vector<float> q(static_cast<size_t>(rows * H * dqk)),
        latent(static_cast<size_t>(rows * rank));
    StepRows batch = paged_.layOut(
        seqs, R, [this](int slot) { return length(slot); }, 0xBEEFull,
        [&](int64_t r, int64_t pos, SplitMix64 &rng) {
          for (int64_t j = 0; j < H * dqk; ++j) {
            q[r * H * dqk + j] = round(rng.normal());
          }
          for (int64_t j = 0; j < rank; ++j) {
            latent[r * rank + j] = round(rng.normal());
          }
          int32_t *sel = selected.data() + r * width;
          if (pos < 0) {
            // Padding rows carry positions of the sequence: the kernels must still ignore them.
            for (int64_t j = 0; j < width; ++j) {
              sel[j] = static_cast<int32_t>(j % 7);
            }
          } else if (pos % denseEvery == 0 && rng.below(8) != 0) {
            choose(rng, pos, sel);
          }
        });
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dq, upload(q));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dlat, upload(latent));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dsel, toDevice(selected));
    GLM_ASSERT_OK(batch.upload());
    // Flash's bf16 and fp8 states take the tensor-core attend, the tiny model's (4 heads) and
    // f32 the FMA one.
    const bool mma = kernels::mlaAttendUsesMma(kind_ != Kind::F32, stateBytes(), H, rank);
    const int32_t chunks = kernels::mlaSparseAttentionChunks(rows, H, width, mma);
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout,
                             poisoned(static_cast<size_t>(rows * H * dv * activationBytes())));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dws,
                             poisoned(static_cast<size_t>(kernels::mlaSparseAttentionWorkspaceBytes(
                                 rows, H, rank, chunks))));
    kernels::MlaSparseAttentionGpuArgs args{};
    args.q = reinterpret_cast<const void *>(dq.ptr());
    args.latent = reinterpret_cast<const void *>(dlat.ptr());
    args.kvB = reinterpret_cast<const void *>(dKvB_.ptr());
    args.selected = reinterpret_cast<const int32_t *>(dsel.ptr());
    args.out = reinterpret_cast<void *>(dout.ptr());
    args.workspace = reinterpret_cast<void *>(dws.ptr());
    args.ctx = batch.context();
    args.latents = paged_.state();
    args.rows = static_cast<int32_t>(rows);
    args.heads = static_cast<int32_t>(H);
    args.qkHeadDim = static_cast<int32_t>(dqk);
    args.vHeadDim = static_cast<int32_t>(dv);
    args.rank = static_cast<int32_t>(rank);
    args.width = static_cast<int32_t>(width);
    args.chunks = chunks;
    args.scale = 1.0f / std::sqrt(static_cast<float>(dqk));
    // The sections after the codes, where the plan binds them.
    const int64_t kvRows = H * (dqk + dv);
    if (kvb_ == KvB::Q4) {
      args.kvBGroups = reinterpret_cast<const uint32_t *>(
          dKvB_.ptr() + static_cast<uint64_t>(kernels::q4GroupsOffset(1, kvRows, rank)));
    } else if (kvb_ == KvB::Fp8) {
      args.kvBScaleInv = reinterpret_cast<const float *>(
          dKvB_.ptr() + static_cast<uint64_t>(kernels::fp8ScalesOffset(1, kvRows, rank)));
    }
    const kernels::LaunchDims absorb = kernels::mlaAbsorbLaunch(rows, H, rank);
    const kernels::LaunchDims attend = kernels::mlaAttendLaunch(rows, H, rank, chunks, mma);
    const kernels::LaunchDims output = kernels::mlaOutputLaunch(rows, H, dv);
    GLM_ASSERT_OK(gpu()->launch(module_.function(fn(absorbName(kind_, kvb_))), absorb.grid,
                                absorb.block, 0, args));
    GLM_ASSERT_OK(gpu()->launch(module_.function(fn(attendName(kind_, mma))), attend.grid,
                                attend.block, attend.sharedMemory, args));
    GLM_ASSERT_OK(launchAndWait(module_.function(fn(outputName(kind_, kvb_))), output, args));
    std::vector<float> out;
    if (kind_ == Kind::F32) {
      GLM_ASSERT_OK_AND_ASSIGN(out, fromDevice<float>(dout, static_cast<size_t>(rows * H * dv)));
    } else {
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> bits,
                               fromDevice<uint16_t>(dout, static_cast<size_t>(rows * H * dv)));
      out = widen(bits);
    }
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> poolBytes, paged_.download());

    for (int64_t b = 0; b < B; ++b) {
      const PagedSeq &s = seqs[static_cast<size_t>(b)];
      if (s.real == 0) {
        continue;
      }
      Ref &ref = refs_[static_cast<size_t>(s.slot)];
      // The reference attends over the latents as the state holds them.
      std::vector<float> stored(latent.begin() + b * R * rank,
                                latent.begin() + (b * R + s.real) * rank);
      for (float &v : stored) {
        v = stateValue(v);
      }
      kernels::MlaLatentCache cache{ref.latents.data(), maxContext_, ref.length};
      std::vector<float> want(static_cast<size_t>(s.real * H * dv));
      GLM_ASSERT_OK(kernels::mlaSparseAttentionRef(
          {.q = q.data() + b * R * H * dqk,
           .latent = stored.data(),
           .kvB = kvb_ == KvB::Plain
                      ? kernels::WeightView::f32(kvB_.data(), {H * (dqk + dv), rank})
                      : kernels::WeightView::encoded(kvBytes_.data(), encoding(), DType::F32,
                                                     H * (dqk + dv), rank),
           .selected = selected.data() + b * R * width,
           .cache = &cache,
           .out = want.data(),
           .tokens = s.real,
           .heads = H,
           .qkHeadDim = dqk,
           .vHeadDim = dv,
           .kvLoraRank = rank,
           .selectedWidth = width,
           .scale = args.scale}));
      const std::vector<float> got(out.begin() + b * R * H * dv,
                                   out.begin() + (b * R + s.real) * H * dv);
      // f32: f64 reference vs f32 sums. bf16 output: one rounding (unit roundoff 2^-8) of each
      // element of an f32 result, so the L2 error is at most 2^-8 of the norm, plus f32 noise;
      // fp8 latents are in both sides' inputs (the reference reads the same rounded values).
      const double tolerance = kind_ == Kind::F32 ? 1e-5 : 1.0 / 256 + 1e-5;
      EXPECT_LE(relativeError(got, want), tolerance)
          << dims_.name << " slot " << s.slot << " positions " << ref.length << "..+" << s.real
          << (s.real == 1 ? "" : " (prefill)");
      for (int64_t i = 0; i < s.real; ++i) {
        ref.gpuOut[ref.length + i].assign(got.begin() + i * H * dv, got.begin() + (i + 1) * H * dv);
      }
      ref.length = cache.length;
    }
    // The pages hold exactly the appended latents in the state's format; every other byte is
    // still poison.
    for (int slot = 0; slot < static_cast<int>(refs_.size()); ++slot) {
      const Ref &ref = refs_[static_cast<size_t>(slot)];
      for (int64_t j = 0; j < ref.length; ++j) {
        const int64_t at = paged_.rowOffset(slot, j);
        for (int64_t c = 0; c < rank; ++c) {
          ASSERT_EQ(encoded(poolBytes.data() + at + c * stateBytes()),
                    encoded(ref.latents[j * rank + c]))
              << dims_.name << " latent " << j << " channel " << c << " slot " << slot;
        }
      }
    }
    paged_.expectOnlyRowsWritten(poolBytes, [this](int slot) { return length(slot); });
  }

  const std::vector<float> &gpuOut(int slot, int64_t position) {
    return refs_[static_cast<size_t>(slot)].gpuOut[position];
  }
  int64_t length(int slot) const { return refs_[static_cast<size_t>(slot)].length; }

private:
  struct Ref {
    std::vector<float> latents; // as stored
    int64_t length = 0;
    std::map<int64_t, std::vector<float>> gpuOut;
  };

  /// Distinct positions in [0, pos] in random slots of the row (up to the row's width).
  void choose(SplitMix64 &rng, int64_t pos, int32_t *sel) const {
    const int64_t width = dims_.width;
    const int64_t n = std::min<int64_t>(pos + 1, width - static_cast<int64_t>(rng.below(4)));
    std::vector<int64_t> slotOrder(static_cast<size_t>(width));
    std::iota(slotOrder.begin(), slotOrder.end(), 0);
    for (size_t i = slotOrder.size(); i > 1; --i) {
      std::swap(slotOrder[i - 1], slotOrder[rng.below(i)]);
    }
    std::vector<char> taken(static_cast<size_t>(pos + 1), 0);
    for (int64_t i = 0; i < n; ++i) {
      int64_t j;
      do {
        j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(pos + 1)));
      } while (taken[static_cast<size_t>(j)]);
      taken[static_cast<size_t>(j)] = 1;
      sel[slotOrder[static_cast<size_t>(i)]] = static_cast<int32_t>(j);
    }
  }

  kernels::DenseEncoding encoding() const {
    return kvb_ == KvB::Q4 ? kernels::DenseEncoding::Q4 : kernels::DenseEncoding::Fp8;
  }

  /// Random valid bytes of kv_b in the encoding, of about the plain weights' spread (std
  /// 2 / sqrt(rank)). Q4: codes of any nibble, f16 scales of either sign and minimums near
  /// -7.5 scales. fp8: values rounded from normals of std 32 (the range a checkpoint's blocks use),
  /// one in 16 any finite code (subnormals and ±448 included), positive f32 scaleInv.
  void encodeRandom(SplitMix64 &rng) {
    const int64_t rows = dims_.heads * (dims_.qkHeadDim + dims_.vHeadDim), cols = dims_.rank;
    const double spread = 2.0 / std::sqrt(static_cast<double>(cols));
    if (kvb_ == KvB::Q4) {
      kvBytes_.assign(static_cast<size_t>(kernels::q4Bytes(1, rows, cols)), 0);
      for (int64_t i = 0; i < rows * cols / 2; ++i) {
        kvBytes_[static_cast<size_t>(i)] = static_cast<uint8_t>(rng.below(256));
      }
      uint8_t *groups = kvBytes_.data() + kernels::q4GroupsOffset(1, rows, cols);
      for (int64_t g = 0; g < rows * (cols / kernels::kQ4Group); ++g) {
        // Codes are uniform in 0..15 (std 4.6).
        const double scale = spread / 4.6 * (0.5 + rng.uniform()) * (rng.below(8) == 0 ? -1 : 1);
        const uint16_t pair[2] = {kernels::doubleToF16(scale),
                                  kernels::doubleToF16(-7.5 * scale + 0.3 * scale * rng.normal())};
        std::memcpy(groups + 4 * g, pair, 4);
      }
    } else {
      kvBytes_.assign(static_cast<size_t>(kernels::fp8Bytes(1, rows, cols)), 0);
      for (int64_t i = 0; i < rows * cols; ++i) {
        uint8_t v = kernels::floatToFp8E4m3(32.0f * rng.normal());
        if (rng.below(16) == 0) {
          do {
            v = static_cast<uint8_t>(rng.below(256));
          } while ((v & 0x7Fu) == 0x7Fu); // NaN is no weight
        }
        kvBytes_[static_cast<size_t>(i)] = v;
      }
      uint8_t *scales = kvBytes_.data() + kernels::fp8ScalesOffset(1, rows, cols);
      for (int64_t b = 0; b < kernels::fp8BlocksOf(rows) * kernels::fp8BlocksOf(cols); ++b) {
        const float scaleInv = static_cast<float>(spread / 32.0 * (0.5 + rng.uniform()));
        std::memcpy(scales + 4 * b, &scaleInv, 4);
      }
    }
  }

  int64_t stateBytes() const { return kind_ == Kind::F32 ? 4 : (kind_ == Kind::Bf16 ? 2 : 1); }
  int64_t activationBytes() const { return kind_ == Kind::F32 ? 4 : 2; }
  float round(float v) const { return kind_ == Kind::F32 ? v : kernels::roundToBf16(v); }
  float stateValue(float v) const {
    return kind_ == Kind::Fp8 ? kernels::fp8E4m3ToFloat(kernels::floatToFp8E4m3(v)) : v;
  }
  /// The state's bytes of a value (as a number, for comparisons).
  uint32_t encoded(float v) const {
    switch (kind_) {
    case Kind::F32: {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      return u;
    }
    case Kind::Bf16:
      return kernels::floatToBf16(v);
    case Kind::Fp8:
      return kernels::floatToFp8E4m3(v);
    }
    return 0;
  }
  uint32_t encoded(const uint8_t *p) const {
    uint32_t u = 0;
    std::memcpy(&u, p, static_cast<size_t>(stateBytes()));
    return u;
  }

  Expected<cuda::DeviceMemory> upload(const std::vector<float> &v) const {
    if (kind_ == Kind::F32) {
      return toDevice(v);
    }
    std::vector<uint16_t> bits(v.size());
    std::transform(v.begin(), v.end(), bits.begin(), kernels::floatToBf16);
    return toDevice(bits);
  }

  cuda::Module &module_;
  Dims dims_;
  Kind kind_;
  KvB kvb_;
  int64_t maxContext_ = 0;
  PagedSequences paged_;
  std::vector<float> kvB_;
  std::vector<uint8_t> kvBytes_; // kv_b encoded (not Plain)
  std::vector<Ref> refs_;
  cuda::DeviceMemory dKvB_;
};

class MlaSparseAttentionGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    GLM_ASSERT_OK_AND_ASSIGN(module_, compileForGpu(kSource, kernelNames()));
  }

  /// Prefill in chunks of `chunk` rows (the last one padded), a second sequence's prompt, then
  /// decode steps of both with a padding sequence between them.
  void prefillThenDecode(Dims dims, Kind kind, int64_t chunk, int64_t prompt, int64_t decodes,
                         int64_t denseEvery, KvB kvb = KvB::Plain) {
    Mla mla(*module_, dims, kind, 3, prompt + decodes + 64, 64, kvb);
    mla.init();
    for (int64_t done = 0; done < prompt && !HasFatalFailure(); done += chunk) {
      SCOPED_TRACE(::testing::Message() << dims.name << " prefill at " << done);
      mla.step({{0, 1, std::min(chunk, prompt - done)}}, chunk, denseEvery);
    }
    const int64_t second = prompt / 2 + 3;
    mla.step({{2, 2, second}}, second, denseEvery);
    for (int64_t i = 0; i < decodes && !HasFatalFailure(); ++i) {
      SCOPED_TRACE(::testing::Message() << dims.name << " decode " << i);
      mla.step({{0, 1, 1}, {1, 9, 0}, {2, 2, 1}}, 1);
    }
    // A decode step of several rows per sequence (16 rows: the most a decode step has).
    SCOPED_TRACE(::testing::Message() << dims.name << " 2x8-row decode");
    mla.step({{0, 1, 5}, {2, 2, 8}}, 8);
  }

  std::unique_ptr<cuda::Module> module_;
};

TEST_F(MlaSparseAttentionGpu, F32MatchesReferenceTiny) {
  prefillThenDecode(kTiny, Kind::F32, 32, 90, 9, 1);
}

// Flash: a 3,000-token prompt, so decode rows select 2,051 of the positions.
TEST_F(MlaSparseAttentionGpu, F32MatchesReferenceFlash) {
  prefillThenDecode(kFlash, Kind::F32, 1024, 3000, 4, 97);
}

TEST_F(MlaSparseAttentionGpu, Bf16MatchesReferenceTiny) {
  prefillThenDecode(kTiny, Kind::Bf16, 32, 90, 9, 1);
}

TEST_F(MlaSparseAttentionGpu, Bf16MatchesReferenceFlash) {
  prefillThenDecode(kFlash, Kind::Bf16, 1024, 3000, 4, 97);
}

TEST_F(MlaSparseAttentionGpu, Fp8LatentsMatchReferenceTiny) {
  prefillThenDecode(kTiny, Kind::Fp8, 32, 90, 9, 1);
}

TEST_F(MlaSparseAttentionGpu, Fp8LatentsMatchReferenceFlash) {
  prefillThenDecode(kFlash, Kind::Fp8, 1024, 3000, 4, 97);
}

// kv_b in Q4 groups and fp8 blocks: the kernels widen each weight exactly as the reference does,
// so the bounds are the plain weights'.
TEST_F(MlaSparseAttentionGpu, Q4KvBMatchesReferenceSmall) {
  for (Kind kind : {Kind::F32, Kind::Bf16, Kind::Fp8}) {
    SCOPED_TRACE(static_cast<int>(kind));
    prefillThenDecode(kSmall, kind, 32, 90, 9, 1, KvB::Q4);
  }
}

TEST_F(MlaSparseAttentionGpu, Fp8KvBMatchesReferenceSmall) {
  for (Kind kind : {Kind::F32, Kind::Bf16, Kind::Fp8}) {
    SCOPED_TRACE(static_cast<int>(kind));
    prefillThenDecode(kSmall, kind, 32, 90, 9, 1, KvB::Fp8);
  }
}

TEST_F(MlaSparseAttentionGpu, Fp8KvBMatchesReferenceTiny) {
  prefillThenDecode(kTiny, Kind::F32, 32, 90, 9, 1, KvB::Fp8); // rank 32: a quarter of a block
}

TEST_F(MlaSparseAttentionGpu, Q4KvBMatchesReferenceF32Flash) {
  prefillThenDecode(kFlash, Kind::F32, 1024, 3000, 4, 97, KvB::Q4);
}

TEST_F(MlaSparseAttentionGpu, Q4KvBMatchesReferenceBf16Flash) {
  prefillThenDecode(kFlash, Kind::Bf16, 1024, 3000, 4, 97, KvB::Q4);
}

TEST_F(MlaSparseAttentionGpu, Q4KvBFp8LatentsMatchReferenceFlash) {
  prefillThenDecode(kFlash, Kind::Fp8, 1024, 3000, 4, 97, KvB::Q4);
}

TEST_F(MlaSparseAttentionGpu, Fp8KvBMatchesReferenceF32Flash) {
  prefillThenDecode(kFlash, Kind::F32, 1024, 3000, 4, 97, KvB::Fp8);
}

TEST_F(MlaSparseAttentionGpu, Fp8KvBMatchesReferenceBf16Flash) {
  prefillThenDecode(kFlash, Kind::Bf16, 1024, 3000, 4, 97, KvB::Fp8);
}

// The same tokens in one pass (slot 0) and in two chunks plus decode steps (slot 1): the same
// state bytes, and outputs equal up to the order of f32 sums (and, in bf16, one output rounding).
TEST_F(MlaSparseAttentionGpu, ChunksEqualOnePass) {
  for (Kind kind : {Kind::F32, Kind::Bf16}) {
    for (const Dims &dims : {kTiny, kFlash}) {
      const int64_t total = dims.heads == kTiny.heads ? 60 : 2200;
      const int64_t every = dims.heads == kTiny.heads ? 1 : 37;
      Mla mla(*module_, dims, kind, 2, total + 64, 64);
      mla.init();
      mla.step({{0, 4, total}}, total, every);
      const int64_t first = total / 3, second = total - first - 4;
      mla.step({{1, 4, first}}, first + 5, every);
      mla.step({{1, 4, second}}, second, every);
      for (int i = 0; i < 4; ++i) {
        mla.step({{1, 4, 1}}, 1, every);
      }
      ASSERT_FALSE(HasFatalFailure());
      ASSERT_EQ(mla.length(1), total);
      const double tolerance = kind == Kind::F32 ? 2e-5 : 2.0 / 256;
      for (int64_t t = 0; t < total; ++t) {
        EXPECT_LE(relativeError(mla.gpuOut(1, t), mla.gpuOut(0, t)), tolerance)
            << dims.name << " position " << t;
      }
    }
  }
}

} // namespace
} // namespace glm::testing
