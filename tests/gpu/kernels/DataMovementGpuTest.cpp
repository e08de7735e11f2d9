// The CUDA kernels that move rows around (expand_streams, stream_mean, add, concat, embedding,
// next_embedding, last_rows)
// against their CPU references, at GLM-5.3-Flash's width (hidden 4096, hc 4) and the tiny
// model's (hidden 128), at decode and prefill row counts, and on the scalar (odd width, unaligned)
// path.
#include "kernels/add/add.h"
#include "kernels/add/add_gpu.h"
#include "kernels/concat/concat.h"
#include "kernels/concat/concat_gpu.h"
#include "kernels/embedding/embedding.h"
#include "kernels/embedding/embedding_gpu.h"
#include "kernels/expand_streams/expand_streams.h"
#include "kernels/expand_streams/expand_streams_gpu.h"
#include "kernels/last_rows/last_rows.h"
#include "kernels/last_rows/last_rows_gpu.h"
#include "kernels/next_embedding/next_embedding.h"
#include "kernels/next_embedding/next_embedding_gpu.h"
#include "kernels/stream_mean/stream_mean.h"
#include "kernels/stream_mean/stream_mean_gpu.h"
#include "tests/gpu/support/GpuTest.h"

#include <climits>

namespace glm::testing {
namespace {

const char *kSource = R"(#include "kernels/add/add.cuh"
#include "kernels/concat/concat.cuh"
#include "kernels/embedding/embedding.cuh"
#include "kernels/expand_streams/expand_streams.cuh"
#include "kernels/last_rows/last_rows.cuh"
#include "kernels/next_embedding/next_embedding.cuh"
#include "kernels/stream_mean/stream_mean.cuh")";

enum Kernel : size_t {
  kExpandF32,
  kExpandBf16,
  kMeanF32,
  kMeanBf16,
  kAddF32,
  kAddBf16,
  kConcatF32,
  kConcatBf16,
  kEmbedF32F32,
  kEmbedF32Bf16,
  kEmbedBf16Bf16,
  kEmbedBf16F32,
  kLastRowsF32,
  kLastRowsBf16,
  kNextEmbedF32F32,
  kNextEmbedBf16Bf16,
};

constexpr int64_t kHc = 4;

struct Shape {
  int64_t rows, width;
};
// Flash's hidden size at decode and prefill row counts, the tiny model's, and an odd width.
const Shape kShapes[] = {{1, 4096}, {3, 4096}, {37, 4096},  {2048, 4096},
                         {1, 128},  {37, 128}, {2048, 128}, {5, 100}};

std::string name(const Shape &s) { return std::to_string(s.rows) + "x" + std::to_string(s.width); }

std::vector<float> randomValues(SplitMix64 &rng, size_t n, bool bf16, float scale = 2.0f) {
  std::vector<float> v(n);
  for (float &x : v) {
    x = rng.normal() * scale;
    if (bf16) {
      x = kernels::roundToBf16(x);
    }
  }
  return v;
}

void *ptr(const cuda::DeviceMemory &m, size_t byteOffset = 0) {
  return reinterpret_cast<void *>(m.ptr() + byteOffset);
}

class DataMovementGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    GLM_ASSERT_OK_AND_ASSIGN(
        module_,
        compileForGpu(kSource, {
                                   "glm::kernels::expandStreamsKernel<float>",
                                   "glm::kernels::expandStreamsKernel<glm::kernels::Bf16>",
                                   "glm::kernels::streamMeanKernel<float>",
                                   "glm::kernels::streamMeanKernel<glm::kernels::Bf16>",
                                   "glm::kernels::addKernel<float>",
                                   "glm::kernels::addKernel<glm::kernels::Bf16>",
                                   "glm::kernels::concatKernel<float>",
                                   "glm::kernels::concatKernel<glm::kernels::Bf16>",
                                   "glm::kernels::embeddingKernel<float, float>",
                                   "glm::kernels::embeddingKernel<float, glm::kernels::Bf16>",
                                   "glm::kernels::embeddingKernel<glm::kernels::Bf16, "
                                   "glm::kernels::Bf16>",
                                   "glm::kernels::embeddingKernel<glm::kernels::Bf16, float>",
                                   "glm::kernels::lastRowsKernel<float>",
                                   "glm::kernels::lastRowsKernel<glm::kernels::Bf16>",
                                   "glm::kernels::nextEmbeddingKernel<float, float>",
                                   "glm::kernels::nextEmbeddingKernel<glm::kernels::Bf16, "
                                   "glm::kernels::Bf16>",
                               }));
  }

  /// `count` elements of `m` (f32 or bf16) widened to f32, starting `offset` elements in.
  Expected<std::vector<float>> download(const cuda::DeviceMemory &m, size_t count, bool bf16,
                                        size_t offset = 0) {
    const size_t bytes = bf16 ? 2 : 4;
    std::vector<uint8_t> raw(count * bytes);
    GLM_RETURN_IF_ERROR(gpu()->download(raw.data(), m.ptr() + offset * bytes, raw.size()));
    std::vector<float> out(count);
    for (size_t i = 0; i < count; ++i) {
      if (bf16) {
        uint16_t b;
        std::memcpy(&b, raw.data() + 2 * i, 2);
        out[i] = kernels::bf16ToFloat(b);
      } else {
        std::memcpy(&out[i], raw.data() + 4 * i, 4);
      }
    }
    return out;
  }

  std::unique_ptr<cuda::Module> module_;
};

// Exact copies: the kernel must reproduce every bit, in f32 and bf16.
TEST_F(DataMovementGpu, ExpandStreamsCopiesExactly) {
  SplitMix64 rng(301);
  for (const Shape &s : kShapes) {
    for (bool bf16 : {false, true}) {
      const std::vector<float> x = randomValues(rng, s.rows * s.width, bf16);
      std::vector<float> ref(s.rows * kHc * s.width);
      GLM_ASSERT_OK(kernels::expandStreamsRef(
          {.x = x.data(), .out = ref.data(), .tokens = s.rows, .streams = kHc, .hidden = s.width}));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx, upload(x, bf16));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(ref.size() * 4));
      const kernels::ExpandStreamsGpuArgs args{ptr(dx), ptr(dout), s.rows, kHc, s.width};
      GLM_ASSERT_OK(launchAndWait(module_->function(bf16 ? kExpandBf16 : kExpandF32),
                                  kernels::expandStreamsLaunch(s.rows, s.width), args));
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> out, download(dout, ref.size(), bf16));
      EXPECT_EQ(out, ref) << name(s) << (bf16 ? " bf16" : " f32");
    }
  }
}

// f32: within 1e-5 of the double-accumulated mean. bf16: the f32 sum in stream order divided by
// hc and rounded once (torch's bf16 mean) is reproduced bit for bit, and so within 2^-8 of the
// reference.
TEST_F(DataMovementGpu, StreamMeanMatchesReference) {
  SplitMix64 rng(302);
  for (const Shape &s : kShapes) {
    for (bool bf16 : {false, true}) {
      const std::vector<float> x = randomValues(rng, s.rows * kHc * s.width, bf16);
      std::vector<float> ref(s.rows * s.width);
      GLM_ASSERT_OK(kernels::streamMeanRef({.streams = x.data(),
                                            .out = ref.data(),
                                            .tokens = s.rows,
                                            .hcMult = kHc,
                                            .hidden = s.width}));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx, upload(x, bf16));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(ref.size() * 4));
      const kernels::StreamMeanGpuArgs args{ptr(dx), ptr(dout), s.rows, kHc, s.width};
      GLM_ASSERT_OK(launchAndWait(module_->function(bf16 ? kMeanBf16 : kMeanF32),
                                  kernels::streamMeanLaunch(s.rows, s.width), args));
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> out, download(dout, ref.size(), bf16));
      if (!bf16) {
        EXPECT_LE(relativeError(out, ref), 1e-5) << name(s);
        continue;
      }
      EXPECT_LE(relativeError(out, ref), 1.0 / 256 + 1e-6) << name(s);
      std::vector<float> emulated(ref.size());
      for (int64_t t = 0; t < s.rows; ++t) {
        for (int64_t d = 0; d < s.width; ++d) {
          float sum = 0.0f;
          for (int64_t k = 0; k < kHc; ++k) {
            sum += x[(t * kHc + k) * s.width + d];
          }
          emulated[t * s.width + d] = kernels::roundToBf16(sum / static_cast<float>(kHc));
        }
      }
      EXPECT_EQ(out, emulated) << name(s);
    }
  }
}

// The f32 sum is exactly the reference's; in bf16 it is the f32 sum rounded once, bit for bit.
// Also in place (out = a), and from pointers off 16-byte alignment (the element-wise path).
TEST_F(DataMovementGpu, AddMatchesReference) {
  SplitMix64 rng(303);
  for (const Shape &s : kShapes) {
    for (bool bf16 : {false, true}) {
      for (int variant = 0; variant < 3; ++variant) { // 0 plain, 1 in place, 2 unaligned
        const size_t count = s.rows * s.width;
        const size_t skew = variant == 2 ? 1 : 0;
        const std::vector<float> a = randomValues(rng, count + skew, bf16);
        const std::vector<float> b = randomValues(rng, count + skew, bf16);
        std::vector<float> ref(count);
        GLM_ASSERT_OK(kernels::addRef({.a = a.data() + skew,
                                       .b = b.data() + skew,
                                       .out = ref.data(),
                                       .count = static_cast<int64_t>(count)}));
        if (bf16) {
          for (float &v : ref) {
            v = kernels::roundToBf16(v);
          }
        }
        const size_t bytes = bf16 ? 2 : 4;
        GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory da, upload(a, bf16));
        GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory db, upload(b, bf16));
        GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned((count + skew) * 4));
        const cuda::DeviceMemory &target = variant == 1 ? da : dout;
        const kernels::AddGpuArgs args{ptr(da, skew * bytes), ptr(db, skew * bytes),
                                       ptr(target, skew * bytes), static_cast<int64_t>(count)};
        GLM_ASSERT_OK(launchAndWait(module_->function(bf16 ? kAddBf16 : kAddF32),
                                    kernels::addLaunch(static_cast<int64_t>(count)), args));
        GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> out, download(target, count, bf16, skew));
        EXPECT_EQ(out, ref) << name(s) << (bf16 ? " bf16" : " f32") << " variant " << variant;
      }
    }
  }
}

// Exact copies into place, for the MTP block's [e, h] join at Flash's and the tiny model's widths,
// and for widths that break the 8-element chunks (the element-wise path).
TEST_F(DataMovementGpu, ConcatCopiesExactly) {
  struct Case {
    int64_t rows;
    std::vector<int64_t> widths;
  };
  const Case cases[] = {{1, {4096, 4096}},    {3, {4096, 4096}}, {37, {4096, 4096}},
                        {2048, {4096, 4096}}, {37, {128, 128}},  {5, {100, 37, 5}},
                        {3, {8, 16, 24, 32}}};
  SplitMix64 rng(304);
  for (const Case &c : cases) {
    for (bool bf16 : {false, true}) {
      std::vector<std::vector<float>> inputs;
      std::vector<const float *> pointers;
      std::vector<cuda::DeviceMemory> device;
      int64_t total = 0, widest = 0;
      for (int64_t w : c.widths) {
        inputs.push_back(randomValues(rng, c.rows * w, bf16));
        total += w;
        widest = std::max(widest, w);
      }
      kernels::ConcatGpuArgs args{};
      for (size_t i = 0; i < inputs.size(); ++i) {
        pointers.push_back(inputs[i].data());
        GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory m, upload(inputs[i], bf16));
        args.inputs[i] = ptr(m);
        args.widths[i] = c.widths[i];
        device.push_back(std::move(m));
      }
      std::vector<float> ref(c.rows * total);
      GLM_ASSERT_OK(kernels::concatRef(
          {.inputs = pointers, .widths = c.widths, .out = ref.data(), .rows = c.rows}));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(ref.size() * 4));
      args.out = ptr(dout);
      args.rows = c.rows;
      args.count = static_cast<int32_t>(c.widths.size());
      GLM_ASSERT_OK(launchAndWait(module_->function(bf16 ? kConcatBf16 : kConcatF32),
                                  kernels::concatLaunch(c.rows, widest, args.count), args));
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> out, download(dout, ref.size(), bf16));
      EXPECT_EQ(out, ref) << c.rows << " rows, " << c.widths.size() << " inputs"
                          << (bf16 ? " bf16" : " f32");
    }
  }
}

// Row gather from an f32 or bf16 table into f32 or bf16 activations: exact (a bf16 output of an
// f32 table is that table's value rounded once), one copy or hc copies, at Flash's width and the
// tiny model's. In-range ids match the CPU reference.
TEST_F(DataMovementGpu, EmbeddingGathersRows) {
  struct Case {
    int64_t tokens, vocab, hidden;
  };
  const Case cases[] = {{1, 4096, 4096}, {3, 4096, 4096}, {37, 4096, 4096},  {2048, 4096, 4096},
                        {1, 1024, 128},  {37, 1024, 128}, {2048, 1024, 128}, {5, 50, 100}};
  SplitMix64 rng(305);
  for (const Case &c : cases) {
    std::vector<int32_t> ids(c.tokens);
    for (int32_t &id : ids) {
      id = static_cast<int32_t>(rng.below(c.vocab));
    }
    ids.back() = static_cast<int32_t>(c.vocab - 1);
    for (bool bf16Table : {false, true}) {
      const std::vector<float> table = randomValues(rng, c.vocab * c.hidden, bf16Table);
      for (bool bf16Out : {false, true}) {
        for (int64_t copies : {int64_t{1}, kHc}) {
          std::vector<float> ref(c.tokens * copies * c.hidden);
          GLM_ASSERT_OK(kernels::embeddingRef(
              {.tokenIds = ids.data(),
               .table = kernels::WeightView::f32(table.data(), {c.vocab, c.hidden}),
               .out = ref.data(),
               .tokens = c.tokens,
               .copies = copies}));
          if (bf16Out) {
            for (float &v : ref) {
              v = kernels::roundToBf16(v);
            }
          }
          GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dids, toDevice(ids));
          GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dtable, upload(table, bf16Table));
          GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(ref.size() * 4));
          const kernels::EmbeddingGpuArgs args{ptr(dids), ptr(dtable), ptr(dout), c.tokens,
                                               c.vocab,   c.hidden,    copies};
          const size_t kernel = bf16Out ? (bf16Table ? kEmbedBf16Bf16 : kEmbedBf16F32)
                                        : (bf16Table ? kEmbedF32Bf16 : kEmbedF32F32);
          GLM_ASSERT_OK(launchAndWait(module_->function(kernel),
                                      kernels::embeddingLaunch(c.tokens, c.hidden), args));
          GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> out, download(dout, ref.size(), bf16Out));
          EXPECT_EQ(out, ref) << c.tokens << " tokens, hidden " << c.hidden << ", " << copies
                              << " copies" << (bf16Table ? " bf16 table" : " f32 table")
                              << (bf16Out ? " bf16 out" : " f32 out");
        }
      }
    }
  }
}

// Ids outside [0, vocab) read nothing and write zero rows (every copy); the rows around them are
// gathered as usual.
TEST_F(DataMovementGpu, EmbeddingZeroesOutOfRangeIds) {
  const int64_t vocab = 1024, hidden = 128;
  SplitMix64 rng(306);
  const std::vector<int32_t> ids = {5, -1, 1023, 1024, INT_MAX, 0, INT_MIN, 77};
  const int64_t tokens = static_cast<int64_t>(ids.size());
  const std::vector<float> table = randomValues(rng, vocab * hidden, true);
  std::vector<float> expected(tokens * kHc * hidden, 0.0f);
  for (int64_t t = 0; t < tokens; ++t) {
    if (ids[t] >= 0 && ids[t] < vocab) {
      for (int64_t c = 0; c < kHc; ++c) {
        std::copy_n(table.begin() + ids[t] * hidden, hidden,
                    expected.begin() + (t * kHc + c) * hidden);
      }
    }
  }
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dids, toDevice(ids));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dtable, upload(table, true));
  for (bool bf16Out : {false, true}) {
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(expected.size() * 4));
    const kernels::EmbeddingGpuArgs args{ptr(dids), ptr(dtable), ptr(dout), tokens,
                                         vocab,     hidden,      kHc};
    GLM_ASSERT_OK(launchAndWait(module_->function(bf16Out ? kEmbedBf16Bf16 : kEmbedF32Bf16),
                                kernels::embeddingLaunch(tokens, hidden), args));
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> out, download(dout, expected.size(), bf16Out));
    EXPECT_EQ(out, expected) << (bf16Out ? "bf16 out" : "f32 out");
  }
}

// The MTP head's input: each row's next token's embedding row, exactly the CPU reference's, as a
// prefill chunk (the next input token, then the host's `following` word or the last row's draw,
// held for every row or for the last alone) and as a verify window (each row's draw) gives it:
// sequences padded and not, one starting at position 0 (zeros there), a padding batch entry.
TEST_F(DataMovementGpu, NextEmbeddingGathersEachRowsNextToken) {
  constexpr int64_t kWidth = 1 + kernels::kSampleTopLogprobs;
  struct Case {
    int64_t batch, rowsPerSequence, vocab, hidden;
  };
  const Case cases[] = {
      {1, 2048, 4096, 4096}, {4, 16, 4096, 4096}, {3, 37, 1024, 128}, {2, 5, 50, 100}};
  SplitMix64 rng(308);
  for (const Case &c : cases) {
    const int64_t rows = c.batch * c.rowsPerSequence;
    std::vector<int32_t> ids(rows), positions(rows, -1), sampled(rows * kWidth);
    std::vector<int64_t> used(c.batch);
    std::vector<kernels::SampleWords> params(c.batch, kernels::SampleWords{});
    for (int64_t b = 0; b < c.batch; ++b) {
      // Sequence 0 starts the context; the last is a padding entry when there are several.
      used[b] = b + 1 == c.batch && c.batch > 1 ? 0 : c.rowsPerSequence - (b % 2) * (b + 1);
      const int32_t start = b == 0 ? 0 : static_cast<int32_t>(rng.below(1000));
      for (int64_t r = 0; r < used[b]; ++r) {
        positions[b * c.rowsPerSequence + r] = start + static_cast<int32_t>(r);
      }
      params[b].following = b == 1 ? 1 + static_cast<int32_t>(rng.below(c.vocab)) : 0;
    }
    for (int32_t &id : ids) {
      id = static_cast<int32_t>(rng.below(c.vocab));
    }
    for (int32_t &id : sampled) {
      id = static_cast<int32_t>(rng.below(c.vocab));
    }
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dids, toDevice(ids));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dpos, toDevice(positions));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dsampled, toDevice(sampled));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dparams, toDevice(params));
    for (bool bf16 : {false, true}) {
      const std::vector<float> table = randomValues(rng, c.vocab * c.hidden, bf16);
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dtable, upload(table, bf16));
      // Prefill with every row's draws, prefill after a last_rows head, a verify window.
      for (auto [followInput, lastOnly] : {std::pair{true, false}, {true, true}, {false, false}}) {
        // The draws a last-only head holds: each sequence's last real row's.
        std::vector<int32_t> lastDraws(c.batch * kWidth, 0);
        for (int64_t b = 0; b < c.batch; ++b) {
          const int64_t last = b * c.rowsPerSequence + std::max<int64_t>(used[b] - 1, 0);
          std::copy_n(sampled.begin() + last * kWidth, kWidth, lastDraws.begin() + b * kWidth);
        }
        std::vector<float> ref(rows * c.hidden, 0.0f);
        for (int64_t b = 0; b < c.batch; ++b) {
          const int64_t first = b * c.rowsPerSequence;
          GLM_ASSERT_OK(kernels::nextEmbeddingRef(
              {.ids = ids.data() + first,
               .sampled =
                   lastOnly ? lastDraws.data() + b * kWidth : sampled.data() + first * kWidth,
               .sampledLastOnly = lastOnly,
               .positions = positions.data() + first,
               .following = params[b].following - 1,
               .table = kernels::WeightView::f32(table.data(), {c.vocab, c.hidden}),
               .out = ref.data() + first * c.hidden,
               .rows = used[b],
               .followInput = followInput}));
        }
        if (bf16) {
          for (float &v : ref) {
            v = kernels::roundToBf16(v);
          }
        }
        GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dlast, toDevice(lastDraws));
        GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(ref.size() * 4));
        const kernels::NextEmbeddingGpuArgs args{
            reinterpret_cast<const int32_t *>(dids.ptr()),
            reinterpret_cast<const int32_t *>(lastOnly ? dlast.ptr() : dsampled.ptr()),
            reinterpret_cast<const int32_t *>(dpos.ptr()),
            reinterpret_cast<const kernels::SampleWords *>(dparams.ptr()),
            ptr(dtable),
            ptr(dout),
            c.rowsPerSequence,
            lastOnly ? c.batch : rows,
            rows,
            c.vocab,
            c.hidden,
            followInput ? 1 : 0};
        GLM_ASSERT_OK(launchAndWait(module_->function(bf16 ? kNextEmbedBf16Bf16 : kNextEmbedF32F32),
                                    kernels::nextEmbeddingLaunch(rows, c.hidden), args));
        GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> out, download(dout, ref.size(), bf16));
        EXPECT_EQ(out, ref) << c.batch << "x" << c.rowsPerSequence << ", hidden " << c.hidden
                            << (followInput ? " following the input" : " following the draws")
                            << (lastOnly ? ", last rows' draws" : "") << (bf16 ? " bf16" : " f32");
      }
    }
  }
}

// Each sequence's last row that holds a token, copied exactly: sequences of every length up to
// the program's rows (a full chunk, a padded one, one row, none: a padding batch entry copies its
// first row), at a prefill chunk's rows and at a verify window's.
TEST_F(DataMovementGpu, LastRowsCopiesEachSequencesLastRealRow) {
  SplitMix64 rng(307);
  struct Case {
    int64_t batch, rowsPerSequence, width;
  };
  for (const Case &c :
       {Case{1, 2048, 4096}, Case{1, 512, 128}, Case{4, 8, 4096}, Case{3, 5, 100}}) {
    for (bool bf16 : {false, true}) {
      const int64_t rows = c.batch * c.rowsPerSequence;
      const std::vector<float> x = randomValues(rng, rows * c.width, bf16);
      // Sequence b holds b-dependent lengths: full, short, one token, none (the last entry of a
      // batch of four).
      std::vector<int32_t> positions(rows, -1);
      std::vector<int64_t> last(c.batch);
      for (int64_t b = 0; b < c.batch; ++b) {
        const int64_t length = b == 0   ? c.rowsPerSequence
                               : b == 3 ? 0
                                        : std::max<int64_t>(1, c.rowsPerSequence / (b + 1));
        for (int64_t r = 0; r < length; ++r) {
          positions[b * c.rowsPerSequence + r] = static_cast<int32_t>(100 + r);
        }
        last[b] = b * c.rowsPerSequence + std::max<int64_t>(length - 1, 0);
      }
      std::vector<float> ref(c.batch * c.width);
      GLM_ASSERT_OK(kernels::lastRowsRef({.x = x.data(),
                                          .rows = last.data(),
                                          .out = ref.data(),
                                          .count = c.batch,
                                          .width = c.width}));
      // The rows' positions come along; a sequence without a row gets -1.
      std::vector<int32_t> picked(c.batch);
      for (int64_t b = 0; b < c.batch; ++b) {
        picked[b] = positions[last[b]];
      }
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dx, upload(x, bf16));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dpos, toDevice(positions));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dout, poisoned(ref.size() * 4));
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dpicked, poisoned(picked.size() * 4));
      const kernels::LastRowsGpuArgs args{ptr(dx),   reinterpret_cast<const int32_t *>(dpos.ptr()),
                                          ptr(dout), reinterpret_cast<int32_t *>(dpicked.ptr()),
                                          c.batch,   c.rowsPerSequence,
                                          c.width};
      GLM_ASSERT_OK(launchAndWait(module_->function(bf16 ? kLastRowsBf16 : kLastRowsF32),
                                  kernels::lastRowsLaunch(c.batch, c.width), args));
      GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> out, download(dout, ref.size(), bf16));
      EXPECT_EQ(out, ref) << c.batch << "x" << c.rowsPerSequence << "x" << c.width
                          << (bf16 ? " bf16" : " f32");
      std::vector<int32_t> gotPicked(picked.size());
      GLM_ASSERT_OK(gpu()->download(gotPicked.data(), dpicked.ptr(), gotPicked.size() * 4));
      EXPECT_EQ(gotPicked, picked) << c.batch << "x" << c.rowsPerSequence;
    }
  }
}

} // namespace
} // namespace glm::testing
