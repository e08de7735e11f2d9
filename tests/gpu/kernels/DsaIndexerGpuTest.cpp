// dsa_indexer's CUDA kernels against the CPU reference: selected rows, pooled keys in paged state
// and the open pool's tail slot, at GLM-5.3-Flash's indexer dimensions and the tiny model's.
#include "kernels/common/ParallelFor.h"
#include "kernels/dsa_indexer/dsa_indexer.h"
#include "kernels/dsa_indexer/dsa_indexer_gpu.h"
#include "tests/gpu/support/GpuTest.h"
#include "tests/gpu/support/PagedSequences.h"

#include <map>

namespace glm::testing {
namespace {

const char *kSource = R"(#include "kernels/dsa_indexer/dsa_indexer.cuh")";

// config.json: index_n_heads, index_head_dim, index_kpool, index_topk.
struct Dims {
  int64_t heads, headDim, kpool, topk;
  const char *name;
};
const Dims kFlash{32, 128, 4, 2048, "flash"};
const Dims kTiny{4, 32, 4, 16, "tiny"};

// Functions of the module, in the order compiled.
enum Fn { kAppendF32, kScoreF32, kAppendBf16, kScoreBf16, kFilter, kSelect };

/// A GPU indexer layer with paged state for several sequences, and the CPU reference of each
/// sequence beside it. Every step is checked against the reference as it runs.
class Indexer {
public:
  Indexer(cuda::Module &module, Dims dims, bool bf16, int maxSeqs, int64_t maxContext,
          int64_t pageTokens)
      : module_(module), dims_(dims), bf16_(bf16), maxSeqs_(maxSeqs) {
    width_ = kernels::dsaIndexerWidth(dims.topk, dims.kpool, true);
    const int64_t poolsPerPage = pageTokens / dims.kpool;
    unitBytes_ = dims.headDim * elementBytes();
    // Other layers' rows sit before and after this layer's in every page, 64 bytes apart.
    paged_ = PagedSequences(maxSeqs, maxContext, pageTokens, poolsPerPage, unitBytes_, 64, 99);
    maxPools_ = paged_.maxPages() * poolsPerPage;
    tailBytes_ = (dims.kpool - 1) * 2 * dims.headDim * elementBytes();
    SplitMix64 apeRng(5);
    ape_.resize(static_cast<size_t>(dims.kpool * dims.headDim));
    for (float &v : ape_) {
      v = round(0.5f * apeRng.normal());
    }
    refs_.resize(static_cast<size_t>(maxSeqs));
    for (Ref &ref : refs_) {
      ref.poolKeys.assign(static_cast<size_t>(maxPools_ * dims.headDim), 0.0f);
      ref.openKeys.assign(static_cast<size_t>(dims.kpool * dims.headDim), 0.0f);
      ref.openGates = ref.openKeys;
    }
  }

  /// Allocates the (poisoned) state and uploads the weight; call once before step().
  void init() {
    GLM_ASSERT_OK(paged_.allocate());
    GLM_ASSERT_OK_AND_ASSIGN(tail_, poisoned(static_cast<size_t>(maxSeqs_ * tailBytes_)));
    GLM_ASSERT_OK_AND_ASSIGN(dApe_, upload(ape_));
  }

  /// A query whose q is all zeros scores every pool 0: ties everywhere.
  void setZeroQueryPosition(int64_t position) { zeroQueryPosition_ = position; }

  /// Runs one step of `seqs` with `rowsPerSeq` rows each and checks it against the reference.
  void step(const std::vector<PagedSeq> &seqs, int64_t rowsPerSeq) {
    const int64_t B = static_cast<int64_t>(seqs.size()), R = rowsPerSeq, rows = B * R;
    const int64_t H = dims_.heads, d = dims_.headDim, kp = dims_.kpool;
    std::vector<float> q(static_cast<size_t>(rows * H * d)), k(static_cast<size_t>(rows * d)),
        gate(k.size()), w(static_cast<size_t>(rows * H));
    StepRows batch = paged_.layOut(
        seqs, R, [this](int slot) { return length(slot); }, 0xDEADull,
        [&](int64_t r, int64_t pos, SplitMix64 &rng) {
          const bool zeroQuery = pos >= 0 && pos == zeroQueryPosition_;
          for (int64_t j = 0; j < H * d; ++j) {
            q[r * H * d + j] = zeroQuery ? 0.0f : round(rng.normal());
          }
          for (int64_t j = 0; j < d; ++j) {
            k[r * d + j] = round(rng.normal());
            gate[r * d + j] = round(rng.normal());
          }
          for (int64_t j = 0; j < H; ++j) {
            w[r * H + j] = round(rng.normal());
          }
        });
    std::vector<uint8_t> tailBefore;
    GLM_ASSERT_OK_AND_ASSIGN(tailBefore, fromDevice<uint8_t>(tail_, tail_.bytes()));

    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dq, upload(q));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dk, upload(k));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dg, upload(gate));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dw, upload(w));
    GLM_ASSERT_OK(batch.upload());
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dsel,
                             poisoned(static_cast<size_t>(rows * width_ * 4)));
    // The workspace starts as garbage: the kernels must not rely on its contents.
    GLM_ASSERT_OK_AND_ASSIGN(
        cuda::DeviceMemory dws,
        poisoned(static_cast<size_t>(kernels::dsaIndexerWorkspaceBytes(rows, maxPools_))));
    kernels::DsaIndexerGpuArgs args{};
    args.q = reinterpret_cast<const void *>(dq.ptr());
    args.k = reinterpret_cast<const void *>(dk.ptr());
    args.gate = reinterpret_cast<const void *>(dg.ptr());
    args.headWeights = reinterpret_cast<const void *>(dw.ptr());
    args.ape = reinterpret_cast<const void *>(dApe_.ptr());
    args.selected = reinterpret_cast<int32_t *>(dsel.ptr());
    args.workspace = reinterpret_cast<void *>(dws.ptr());
    args.ctx = batch.context();
    args.keys = paged_.state();
    args.tail = {reinterpret_cast<uint8_t *>(tail_.ptr()), tailBytes_};
    args.rows = static_cast<int32_t>(rows);
    args.heads = static_cast<int32_t>(H);
    args.headDim = static_cast<int32_t>(d);
    args.kpool = static_cast<int32_t>(kp);
    args.topk = static_cast<int32_t>(dims_.topk);
    args.width = static_cast<int32_t>(width_);
    args.maxPools = static_cast<int32_t>(maxPools_);
    const kernels::LaunchDims append = kernels::dsaIndexerAppendLaunch(rows);
    GLM_ASSERT_OK(gpu()->launch(module_.function(bf16_ ? kAppendBf16 : kAppendF32), append.grid,
                                append.block, 0, args));
    const kernels::LaunchDims score = kernels::dsaIndexerScoreLaunch(rows, maxPools_, H, d);
    GLM_ASSERT_OK(gpu()->launch(module_.function(bf16_ ? kScoreBf16 : kScoreF32), score.grid,
                                score.block, score.sharedMemory, args));
    GLM_ASSERT_OK(launchAndWait(module_.function(kFilter),
                                kernels::dsaIndexerFilterLaunch(rows, maxPools_), args));
    GLM_ASSERT_OK(
        launchAndWait(module_.function(kSelect), kernels::dsaIndexerSelectLaunch(rows), args));
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<int32_t> selected,
                             fromDevice<int32_t>(dsel, static_cast<size_t>(rows * width_)));
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> poolBytes, paged_.download());
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> tailBytes,
                             fromDevice<uint8_t>(tail_, tail_.bytes()));

    for (int64_t b = 0; b < B; ++b) {
      const PagedSeq &s = seqs[static_cast<size_t>(b)];
      const int32_t *gpuRows = selected.data() + b * R * width_;
      for (int64_t i = s.real; i < R; ++i) {
        for (int64_t j = 0; j < width_; ++j) {
          ASSERT_EQ(gpuRows[i * width_ + j], -1) << "padding row " << i << " slot " << j;
        }
      }
      if (s.real == 0) {
        continue;
      }
      Ref &ref = refs_[static_cast<size_t>(s.slot)];
      const int64_t start = ref.length;
      // Keep the sequence's raw rows: the bf16 bound on pooled keys needs them.
      ref.keys.insert(ref.keys.end(), k.begin() + b * R * d, k.begin() + (b * R + s.real) * d);
      ref.gates.insert(ref.gates.end(), gate.begin() + b * R * d,
                       gate.begin() + (b * R + s.real) * d);
      kernels::DsaIndexerCache cache{ref.poolKeys.data(), maxPools_, ref.openKeys.data(),
                                     ref.openGates.data(), ref.length};
      std::vector<int32_t> refSel(static_cast<size_t>(s.real * width_));
      std::vector<float> refScores(static_cast<size_t>(s.real * maxPools_));
      GLM_ASSERT_OK(kernels::dsaIndexerRef({.q = q.data() + b * R * H * d,
                                            .k = k.data() + b * R * d,
                                            .gate = gate.data() + b * R * d,
                                            .headWeights = w.data() + b * R * H,
                                            .ape = kernels::WeightView::f32(ape_.data(), {kp, d}),
                                            .cache = &cache,
                                            .selected = refSel.data(),
                                            .poolScores = refScores.data(),
                                            .poolScoresStride = maxPools_,
                                            .tokens = s.real,
                                            .heads = H,
                                            .headDim = d,
                                            .topk = dims_.topk,
                                            .kpool = kp,
                                            .alwaysSelectTail = true,
                                            .tieRule = kernels::TopkTieRule::LowerIndex}));
      ref.length = cache.length;
      const std::vector<float> gpuKeys = pooledKeys(poolBytes, s.slot, ref.length / kp);
      checkPooledKeys(gpuKeys, ref, s.slot);

      // bf16: the GPU's keys are rounded as HF rounds them, so its choice is judged by scores of
      // its own keys (f64 here); f32: by the reference's scores.
      std::vector<std::vector<double>> scores(static_cast<size_t>(s.real));
      kernels::parallelFor(s.real, 8, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t candidates = (start + i + 1) / kp;
          std::vector<double> &sc = scores[static_cast<size_t>(i)];
          sc.resize(static_cast<size_t>(candidates));
          const int64_t r = b * R + i;
          for (int64_t p = 0; p < candidates; ++p) {
            if (!bf16_) {
              sc[static_cast<size_t>(p)] = refScores[static_cast<size_t>(i * maxPools_ + p)];
              continue;
            }
            double sum = 0.0;
            for (int64_t h = 0; h < H; ++h) {
              double dot = 0.0;
              for (int64_t c = 0; c < d; ++c) {
                dot += static_cast<double>(q[(r * H + h) * d + c]) * gpuKeys[p * d + c];
              }
              sum += w[r * H + h] / std::sqrt(static_cast<double>(H)) *
                     std::max(dot / std::sqrt(static_cast<double>(d)), 0.0);
            }
            sc[static_cast<size_t>(p)] = sum;
          }
        }
      });
      for (int64_t i = 0; i < s.real; ++i) {
        const int64_t t = start + i;
        const int32_t *row = gpuRows + i * width_;
        checkRow(row, refSel.data() + i * width_, scores[static_cast<size_t>(i)], t);
        if (t == zeroQueryPosition_ && (t + 1) / kp > dims_.topk / kp) {
          // Every score is 0: the lower pool indices win.
          for (int64_t j = 0; j < dims_.topk; ++j) {
            ASSERT_EQ(row[j], j) << "all-tied query at " << t;
          }
        }
        ref.gpuRows[t].assign(row, row + width_);
      }
      // The open pool's raw rows, exactly as given.
      for (int64_t j = 0; j < ref.length % kp; ++j) {
        for (int64_t c = 0; c < d; ++c) {
          ASSERT_EQ(tailValue(tailBytes, s.slot, j * 2 * d + c), ref.openKeys[j * d + c])
              << "tail key row " << j << " of slot " << s.slot;
          ASSERT_EQ(tailValue(tailBytes, s.slot, j * 2 * d + d + c), ref.openGates[j * d + c])
              << "tail gate row " << j << " of slot " << s.slot;
        }
      }
    }
    // Slots outside the step keep their tails.
    for (int slot = 0; slot < maxSeqs_; ++slot) {
      bool inStep = false;
      for (const PagedSeq &s : seqs) {
        inStep |= s.real > 0 && s.slot == slot;
      }
      if (!inStep) {
        ASSERT_TRUE(std::equal(tailBefore.begin() + slot * tailBytes_,
                               tailBefore.begin() + (slot + 1) * tailBytes_,
                               tailBytes.begin() + slot * tailBytes_))
            << "the tail of slot " << slot << " changed";
      }
    }
    // Every pool byte outside the sequences' closed pools is still poison.
    paged_.expectOnlyRowsWritten(poolBytes, [&](int slot) { return length(slot) / kp; });
  }

  /// The GPU's selected row for token `position` of `slot`.
  const std::vector<int32_t> &gpuRow(int slot, int64_t position) {
    return refs_[static_cast<size_t>(slot)].gpuRows[position];
  }
  int64_t length(int slot) const { return refs_[static_cast<size_t>(slot)].length; }
  /// The state bytes of slot's closed pools and of its open pool's rows.
  std::vector<uint8_t> stateBytes(int slot) {
    std::vector<uint8_t> out;
    auto pb = paged_.download();
    auto tb = fromDevice<uint8_t>(tail_, tail_.bytes());
    EXPECT_TRUE(pb.ok() && tb.ok());
    if (!pb.ok() || !tb.ok()) {
      return out;
    }
    const Ref &ref = refs_[static_cast<size_t>(slot)];
    for (int64_t p = 0; p < ref.length / dims_.kpool; ++p) {
      const int64_t at = paged_.rowOffset(slot, p);
      out.insert(out.end(), pb->begin() + at, pb->begin() + at + unitBytes_);
    }
    const int64_t open = (ref.length % dims_.kpool) * 2 * dims_.headDim * elementBytes();
    out.insert(out.end(), tb->begin() + slot * tailBytes_, tb->begin() + slot * tailBytes_ + open);
    return out;
  }

private:
  struct Ref {
    std::vector<float> poolKeys, openKeys, openGates;
    int64_t length = 0;
    std::vector<float> keys, gates; // every row appended so far
    std::map<int64_t, std::vector<int32_t>> gpuRows;
  };

  int64_t elementBytes() const { return bf16_ ? 2 : 4; }
  float round(float v) const { return bf16_ ? kernels::roundToBf16(v) : v; }

  Expected<cuda::DeviceMemory> upload(const std::vector<float> &v) const {
    if (!bf16_) {
      return toDevice(v);
    }
    std::vector<uint16_t> bits(v.size());
    std::transform(v.begin(), v.end(), bits.begin(), kernels::floatToBf16);
    return toDevice(bits);
  }

  float element(const uint8_t *p) const {
    if (bf16_) {
      uint16_t bits;
      std::memcpy(&bits, p, 2);
      return kernels::bf16ToFloat(bits);
    }
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }

  float tailValue(const std::vector<uint8_t> &bytes, int slot, int64_t index) const {
    return element(bytes.data() + slot * tailBytes_ + index * elementBytes());
  }

  std::vector<float> pooledKeys(const std::vector<uint8_t> &bytes, int slot, int64_t pools) const {
    std::vector<float> out(static_cast<size_t>(pools * dims_.headDim));
    for (int64_t p = 0; p < pools; ++p) {
      for (int64_t c = 0; c < dims_.headDim; ++c) {
        out[p * dims_.headDim + c] =
            element(bytes.data() + paged_.rowOffset(slot, p) + c * elementBytes());
      }
    }
    return out;
  }

  // f32: the pooled keys agree with the f64 reference to f32 rounding (relative 1e-5).
  // bf16: HF rounds the softmax weight, each product and the sum to bf16 (unit roundoff
  // u = 2^-8), so each channel of a pooled key may move from the exact value by at most
  // (2u + u + O(u^2)) * sum_r prob_r |k_r| <= 3.1 * 2^-8 * sum_r prob_r |k_r|, plus f32 noise.
  void checkPooledKeys(const std::vector<float> &gpu, const Ref &ref, int slot) const {
    const int64_t d = dims_.headDim, kp = dims_.kpool, pools = ref.length / kp;
    const std::vector<float> want(ref.poolKeys.begin(), ref.poolKeys.begin() + pools * d);
    if (!bf16_) {
      EXPECT_LE(relativeError(gpu, want), 1e-5) << dims_.name << " pooled keys, slot " << slot;
      return;
    }
    for (int64_t p = 0; p < pools; ++p) {
      for (int64_t c = 0; c < d; ++c) {
        double peak = -INFINITY;
        for (int64_t r = 0; r < kp; ++r) {
          peak = std::max(peak,
                          static_cast<double>(ref.gates[(p * kp + r) * d + c]) + ape_[r * d + c]);
        }
        double sum = 0.0, weighted = 0.0;
        for (int64_t r = 0; r < kp; ++r) {
          const double e = std::exp(static_cast<double>(ref.gates[(p * kp + r) * d + c]) +
                                    ape_[r * d + c] - peak);
          sum += e;
          weighted += e * std::fabs(ref.keys[(p * kp + r) * d + c]);
        }
        const double bound = 3.1 / 256.0 * weighted / sum + 1e-6;
        ASSERT_LE(std::fabs(gpu[p * d + c] - want[p * d + c]), bound)
            << dims_.name << " pooled key " << p << " channel " << c << " slot " << slot;
      }
    }
  }

  /// A row's layout, and its chosen pools against the scores: equal sets, or a swap of pools
  /// whose scores are within 1e-5 of the row's largest |score| (f32 sums in another order may
  /// reorder near-ties; the CPU golden test uses the same rule).
  void checkRow(const int32_t *row, const int32_t *refRow, const std::vector<double> &scores,
                int64_t t) const {
    const int64_t kp = dims_.kpool, maxChosen = dims_.topk / kp;
    const int64_t candidates = (t + 1) / kp, chosen = std::min(candidates, maxChosen);
    std::vector<char> in(static_cast<size_t>(candidates), 0);
    for (int64_t c = 0; c < chosen; ++c) {
      const int64_t p = row[c * kp] / kp;
      ASSERT_TRUE(row[c * kp] >= 0 && row[c * kp] % kp == 0 && p < candidates && !in[p])
          << dims_.name << " position " << t << " slot " << c * kp << ": " << row[c * kp];
      in[static_cast<size_t>(p)] = 1;
      for (int64_t e = 1; e < kp; ++e) {
        ASSERT_EQ(row[c * kp + e], p * kp + e) << dims_.name << " position " << t;
      }
    }
    for (int64_t j = chosen * kp; j < dims_.topk; ++j) {
      ASSERT_EQ(row[j], -1) << dims_.name << " position " << t << " slot " << j;
    }
    for (int64_t j = 0; j < kp - 1; ++j) {
      const int64_t pos = candidates * kp + j;
      ASSERT_EQ(row[dims_.topk + j], pos <= t ? pos : -1) << dims_.name << " tail, position " << t;
    }
    if (candidates <= maxChosen) {
      return; // every candidate, checked above
    }
    double minIn = INFINITY, maxOut = -INFINITY, largest = 0.0;
    for (int64_t p = 0; p < candidates; ++p) {
      const double score = scores[static_cast<size_t>(p)];
      largest = std::max(largest, std::fabs(score));
      if (in[static_cast<size_t>(p)]) {
        minIn = std::min(minIn, score);
      } else {
        maxOut = std::max(maxOut, score);
      }
    }
    ASSERT_GE(minIn, maxOut - 1e-5 * largest)
        << dims_.name << " position " << t << ": a pool scoring " << maxOut
        << " was left out while one scoring " << minIn << " was chosen";
    if (!bf16_ && refRow[0] >= 0) {
      // The reference lists its pools by descending score; it chose the same number.
      ASSERT_EQ(refRow[(maxChosen - 1) * kp] >= 0, true) << dims_.name << " position " << t;
    }
  }

  cuda::Module &module_;
  Dims dims_;
  bool bf16_;
  int maxSeqs_;
  int64_t width_ = 0, maxPools_ = 0, unitBytes_ = 0, tailBytes_ = 0;
  int64_t zeroQueryPosition_ = -1;
  PagedSequences paged_;
  std::vector<float> ape_;
  std::vector<Ref> refs_;
  cuda::DeviceMemory tail_, dApe_;
};

class DsaIndexerGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    GLM_ASSERT_OK_AND_ASSIGN(
        module_,
        compileForGpu(kSource, {
                                   "glm::kernels::dsaIndexerAppendKernel<float, float, float>",
                                   "glm::kernels::dsaIndexerScoreKernel<float, float>",
                                   "glm::kernels::dsaIndexerAppendKernel<glm::kernels::Bf16, "
                                   "glm::kernels::Bf16, glm::kernels::Bf16>",
                                   "glm::kernels::dsaIndexerScoreKernel<glm::kernels::Bf16, "
                                   "glm::kernels::Bf16>",
                                   "glm::kernels::dsaIndexerFilterKernel",
                                   "glm::kernels::dsaIndexerSelectKernel",
                               }));
  }

  /// Prefill in chunks of `chunk` rows (the last one padded), then decode steps of two
  /// sequences at once, the second one started with a shorter prompt.
  void prefillThenDecode(Dims dims, bool bf16, int64_t chunk, int64_t prompt, int64_t decodes) {
    Indexer ix(*module_, dims, bf16, 3, prompt + decodes + 64, 64);
    ix.init();
    ix.setZeroQueryPosition(prompt - 3);
    for (int64_t done = 0; done < prompt; done += chunk) {
      SCOPED_TRACE(::testing::Message() << dims.name << " prefill at " << done);
      ix.step({{0, 1, std::min(chunk, prompt - done)}}, chunk);
      if (HasFatalFailure()) {
        return;
      }
    }
    const int64_t second = prompt / 2 + 3;
    ix.step({{2, 2, second}}, second);
    for (int64_t i = 0; i < decodes && !HasFatalFailure(); ++i) {
      SCOPED_TRACE(::testing::Message() << dims.name << " decode " << i);
      // Batch of 3 with a padding sequence in the middle.
      ix.step({{0, 1, 1}, {1, 9, 0}, {2, 2, 1}}, 1);
    }
  }

  std::unique_ptr<cuda::Module> module_;
};

TEST_F(DsaIndexerGpu, F32MatchesReferenceTiny) { prefillThenDecode(kTiny, false, 32, 90, 9); }

// Flash: 2,700 tokens close 675 pools, more than the 512 a query keeps.
TEST_F(DsaIndexerGpu, F32MatchesReferenceFlash) { prefillThenDecode(kFlash, false, 1024, 2700, 6); }

TEST_F(DsaIndexerGpu, Bf16MatchesReferenceTiny) { prefillThenDecode(kTiny, true, 32, 90, 9); }

TEST_F(DsaIndexerGpu, Bf16MatchesReferenceFlash) { prefillThenDecode(kFlash, true, 1024, 2700, 6); }

// The same tokens in one pass (slot 0) and in chunks plus decode steps (slot 1): the same rows
// and the same state bytes.
TEST_F(DsaIndexerGpu, ChunksEqualOnePass) {
  for (bool bf16 : {false, true}) {
    for (const Dims &dims : {kTiny, kFlash}) {
      const int64_t total = dims.topk * 3 / 2 + 7;
      Indexer ix(*module_, dims, bf16, 2, total + 64, 64);
      ix.init();
      ix.step({{0, 4, total}}, total);
      const int64_t first = total / 3, second = total - first - 5;
      ix.step({{1, 4, first}}, first + 3);
      ix.step({{1, 4, second}}, second);
      for (int i = 0; i < 5; ++i) {
        ix.step({{1, 4, 1}}, 1);
      }
      ASSERT_FALSE(HasFatalFailure());
      ASSERT_EQ(ix.length(1), total);
      for (int64_t t = 0; t < total; ++t) {
        ASSERT_EQ(ix.gpuRow(0, t), ix.gpuRow(1, t)) << dims.name << " position " << t;
      }
      EXPECT_EQ(ix.stateBytes(0), ix.stateBytes(1)) << dims.name << (bf16 ? " bf16" : " f32");
    }
  }
}

} // namespace
} // namespace glm::testing
