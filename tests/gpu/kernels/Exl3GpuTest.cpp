// exl3's device primitives and exact reconstruction against the CPU reference, bit for bit: every
// codebook's 65536 values, every stream position's state for K = 1..8, and the reconstruction of
// EXL3 bindings (mixed K and codebooks, ragged features, experts selected by a routing) into the
// bf16 weights exl3ReconstructBf16Ref (`glmc dequantize`) produces.
#include "kernels/exl3/exl3.h"
#include "kernels/exl3/exl3_gpu.h"
#include "runtime/weights/KernelViews.h"
#include "tests/gpu/support/GpuTest.h"

namespace glm::testing {
namespace {

const char *kSource = R"(#include "kernels/exl3/exl3.cuh"
struct CodebookArgs { uint16_t *out; };
// out[cb * 65536 + s] = codebook cb's value of state s.
__global__ void codebookTableKernel(const CodebookArgs a) {
  const uint32_t i = blockIdx.x * 256 + threadIdx.x;
  a.out[i] = glm::kernels::exl3CodebookHalf(i & 0xFFFFu, static_cast<int>(i >> 16));
}
struct StatesArgs { const uint32_t *tiles; int bits; uint16_t *out; };
// out[t * 256 + p] = the state of position p of tile t (one block per tile).
__global__ void tileStatesKernel(const StatesArgs a) {
  const uint32_t *tile = a.tiles + blockIdx.x * 8 * a.bits;
  a.out[blockIdx.x * 256 + threadIdx.x] =
      static_cast<uint16_t>(glm::kernels::exl3State(tile, a.bits, threadIdx.x));
}
)";

struct CodebookArgs {
  uint16_t *out;
};
struct StatesArgs {
  const uint32_t *tiles;
  int bits;
  uint16_t *out;
};

/// One EXL3 binding as the weights arena holds it, with random bitstreams (every bitstream is a
/// valid encoding) and random sign-and-scale vectors.
struct Binding {
  Exl3ArenaLayout layout;
  std::vector<uint8_t> bytes;

  kernels::Exl3MatrixView matrix(int64_t m) const {
    return exl3MatrixInArena(bytes.data(), layout, m);
  }
};

uint16_t randomScale(SplitMix64 &rng) {
  const double magnitude = 0.02 * (0.5 + rng.uniform());
  return kernels::doubleToF16(rng.below(2) != 0 ? -magnitude : magnitude);
}

Binding randomBinding(SplitMix64 &rng, int64_t out, int64_t in, const std::vector<int> &bits,
                      const std::vector<Exl3Codebook> &codebooks) {
  const auto matrices = static_cast<int64_t>(bits.size());
  Binding b;
  b.layout = {matrices,
              in,
              out,
              exl3Padded(in),
              exl3Padded(out),
              *std::max_element(bits.begin(), bits.end())};
  b.bytes.assign(b.layout.bytes(), 0);
  auto *suh = reinterpret_cast<uint16_t *>(b.bytes.data() + b.layout.suhOffset());
  auto *svh = reinterpret_cast<uint16_t *>(b.bytes.data() + b.layout.svhOffset());
  auto *meta = reinterpret_cast<uint32_t *>(b.bytes.data() + b.layout.metaOffset());
  for (int64_t m = 0; m < matrices; ++m) {
    uint8_t *trellis = b.bytes.data() + m * b.layout.trellisStride();
    const uint64_t used = static_cast<uint64_t>(b.layout.k * b.layout.n * bits[m] / 8);
    for (uint64_t i = 0; i < used; ++i) {
      trellis[i] = static_cast<uint8_t>(rng.below(256));
    }
    for (int64_t i = 0; i < b.layout.k; ++i) {
      suh[m * b.layout.k + i] = randomScale(rng);
    }
    for (int64_t i = 0; i < b.layout.n; ++i) {
      svh[m * b.layout.n + i] = randomScale(rng);
    }
    meta[2 * m] = static_cast<uint32_t>(bits[m]);
    meta[2 * m + 1] = static_cast<uint32_t>(codebooks[m]);
  }
  return b;
}

class Exl3Gpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
  }

  static cuda::Module *module() {
    static std::unique_ptr<cuda::Module> m;
    if (m == nullptr) {
      Expected<std::unique_ptr<cuda::Module>> compiled = compileForGpu(
          kSource, {"codebookTableKernel", "tileStatesKernel", "glm::kernels::exl3SelectKernel",
                    "glm::kernels::exl3ReconstructKernel"});
      EXPECT_TRUE(compiled.ok()) << compiled.status().toString();
      if (compiled.ok()) {
        m = std::move(compiled).value();
      }
    }
    return m.get();
  }

  /// Reconstructs `b` on the device (only the experts `ids` select, when given) and returns the
  /// [matrices][out][in] bf16 result; unselected matrices keep the poison.
  static void reconstruct(const Binding &b, const std::vector<int32_t> *ids, int32_t firstExpert,
                          std::vector<uint16_t> &result) {
    cuda::Module *m = module();
    ASSERT_NE(m, nullptr);
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory slice, toDevice(b.bytes));
    const int64_t matrices = b.layout.matrices, count = matrices * b.layout.out * b.layout.in;
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory out, poisoned(count * 2));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory mask, poisoned(matrices * 4));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory deviceIds,
                             toDevice(ids != nullptr ? *ids : std::vector<int32_t>{0}));
    if (ids != nullptr) {
      const kernels::Exl3SelectGpuArgs select{reinterpret_cast<const int32_t *>(deviceIds.ptr()),
                                              static_cast<int64_t>(ids->size()), firstExpert,
                                              matrices, reinterpret_cast<int32_t *>(mask.ptr())};
      GLM_ASSERT_OK(launchAndWait(m->function(2), kernels::exl3SelectLaunch(), select));
    }
    const kernels::Exl3ReconstructGpuArgs args{
        exl3GpuWeights(reinterpret_cast<const void *>(slice.ptr()), b.layout),
        ids != nullptr ? reinterpret_cast<const int32_t *>(mask.ptr()) : nullptr,
        reinterpret_cast<kernels::Bf16 *>(out.ptr())};
    GLM_ASSERT_OK(launchAndWait(
        m->function(3), kernels::exl3ReconstructLaunch(matrices, b.layout.k, b.layout.n), args));
    GLM_ASSERT_OK_AND_ASSIGN(result, fromDevice<uint16_t>(out, count));
  }

  /// Matrix m of the device result equals the CPU reconstruction bit for bit.
  static void expectMatrixExact(const Binding &b, int64_t m, const std::vector<uint16_t> &result) {
    const size_t count = static_cast<size_t>(b.layout.out * b.layout.in);
    std::vector<uint16_t> expected(count);
    GLM_ASSERT_OK(kernels::exl3ReconstructBf16Ref(b.matrix(m), expected.data()));
    size_t differing = 0, first = count;
    for (size_t i = 0; i < count; ++i) {
      if (result[m * count + i] != expected[i]) {
        first = std::min(first, i);
        ++differing;
      }
    }
    EXPECT_EQ(differing, 0u) << "matrix " << m << " (K " << b.matrix(m).bits << "): first at ["
                             << first / b.layout.in << ", " << first % b.layout.in
                             << "]: " << (first < count ? result[m * count + first] : 0) << " vs "
                             << (first < count ? expected[first] : 0);
  }
};

TEST_F(Exl3Gpu, EveryCodebookValueEqualsTheCpuDecoder) {
  cuda::Module *m = module();
  ASSERT_NE(m, nullptr);
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory out, poisoned(3 * 65536 * 2));
  kernels::LaunchDims d;
  d.grid[0] = 3 * 256;
  d.block[0] = 256;
  GLM_ASSERT_OK(
      launchAndWait(m->function(0), d, CodebookArgs{reinterpret_cast<uint16_t *>(out.ptr())}));
  GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> table, fromDevice<uint16_t>(out, 3 * 65536));
  for (int cb = 0; cb < 3; ++cb) {
    int differing = 0;
    for (uint32_t s = 0; s < 65536; ++s) {
      differing +=
          table[cb * 65536 + s] != kernels::exl3CodebookHalf(static_cast<Exl3Codebook>(cb), s);
    }
    EXPECT_EQ(differing, 0) << "codebook " << exl3CodebookName(static_cast<Exl3Codebook>(cb));
  }
}

TEST_F(Exl3Gpu, EveryStateOfEveryBitWidthEqualsTheCpuDecoder) {
  cuda::Module *m = module();
  ASSERT_NE(m, nullptr);
  SplitMix64 rng(11);
  constexpr int kTiles = 16;
  for (int bits = kExl3MinBits; bits <= kExl3MaxBits; ++bits) {
    std::vector<uint16_t> tiles(static_cast<size_t>(kTiles * 16 * bits));
    for (uint16_t &u : tiles) {
      u = static_cast<uint16_t>(rng.below(65536));
    }
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory deviceTiles, toDevice(tiles));
    GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory out, poisoned(kTiles * 256 * 2));
    kernels::LaunchDims d;
    d.grid[0] = kTiles;
    d.block[0] = 256;
    GLM_ASSERT_OK(launchAndWait(m->function(1), d,
                                StatesArgs{reinterpret_cast<const uint32_t *>(deviceTiles.ptr()),
                                           bits, reinterpret_cast<uint16_t *>(out.ptr())}));
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> states, fromDevice<uint16_t>(out, kTiles * 256));
    int differing = 0;
    for (int t = 0; t < kTiles; ++t) {
      uint16_t expected[kernels::kExl3TileValues];
      kernels::exl3TileStates(tiles.data() + t * 16 * bits, bits, expected);
      for (int p = 0; p < kernels::kExl3TileValues; ++p) {
        differing += states[t * 256 + p] != expected[p];
      }
    }
    EXPECT_EQ(differing, 0) << "K = " << bits;
  }
}

TEST_F(Exl3Gpu, ReconstructionEqualsTheDequantizerBitForBit) {
  // Ragged features (padding on both sides), every K, every codebook.
  SplitMix64 rng(12);
  const std::vector<int> bits = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<Exl3Codebook> codebooks;
  for (size_t i = 0; i < bits.size(); ++i) {
    codebooks.push_back(static_cast<Exl3Codebook>(i % 3));
  }
  const Binding b = randomBinding(rng, 300, 200, bits, codebooks);
  std::vector<uint16_t> result;
  reconstruct(b, nullptr, 0, result);
  for (int64_t m = 0; m < b.layout.matrices; ++m) {
    expectMatrixExact(b, m, result);
  }
}

TEST_F(Exl3Gpu, ReconstructionAtTheModelsExpertShapes) {
  // An up projection ([inter, hidden]) and a down projection ([hidden, inter]) of both configs,
  // at K = 4 with MCG (the deployed checkpoint's) and K = 3 with MUL1.
  SplitMix64 rng(13);
  for (const glm53::Glm53Config *c : {&tinyConfig(), &flashConfig()}) {
    const int64_t hidden = c->hiddenSize, inter = c->moeIntermediateSize;
    for (auto [out, in] : {std::pair{inter, hidden}, std::pair{hidden, inter}}) {
      const Binding b =
          randomBinding(rng, out, in, {4, 3}, {Exl3Codebook::Mcg, Exl3Codebook::Mul1});
      std::vector<uint16_t> result;
      reconstruct(b, nullptr, 0, result);
      for (int64_t m = 0; m < b.layout.matrices; ++m) {
        expectMatrixExact(b, m, result);
      }
    }
  }
}

TEST_F(Exl3Gpu, OnlyTheSelectedExpertsOfThisRankAreReconstructed) {
  // Rank 1 of 2 holds global experts [6, 12); the routing selects 7 and 10 there (and others on
  // rank 0, which must be ignored).
  SplitMix64 rng(14);
  const Binding b = randomBinding(rng, 96, 160, std::vector<int>(6, 4),
                                  std::vector<Exl3Codebook>(6, Exl3Codebook::Mcg));
  const std::vector<int32_t> ids = {7, 2, 10, 0, 7, 5};
  std::vector<uint16_t> result;
  reconstruct(b, &ids, 6, result);
  const size_t count = static_cast<size_t>(b.layout.out * b.layout.in);
  for (int64_t m = 0; m < b.layout.matrices; ++m) {
    if (m == 1 || m == 4) {
      expectMatrixExact(b, m, result);
    } else {
      EXPECT_TRUE(std::all_of(result.begin() + m * count, result.begin() + (m + 1) * count,
                              [](uint16_t v) { return v == 0xFFFFu; }))
          << "expert " << m << " was not selected but was written";
    }
  }
}

} // namespace
} // namespace glm::testing
