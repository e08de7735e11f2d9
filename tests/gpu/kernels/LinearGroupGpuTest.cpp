// The decode-quant kernels' bits, at GLM-5.3-Flash's projection shapes: (1) a row's outputs do not
// depend on the rows that share its launch (what a verify window and a batch rely on:
// docs/speculative-decoding.md), for the plain and K-split kernels, sized for this device and for
// sm_121a's 99 KB; (2) linear_group's kernel gives each part exactly what the plain kernel gives it
// at the same block size, whether the parts share their input or read their own. Their values
// against the CPU reference are LinearGpuTest's.
#include "base/Random.h"
#include "kernels/common/FloatFormats.h"
#include "kernels/linear/linear_gpu.h"
#include "kernels/linear_group/linear_group_gpu.h"
#include "tests/gpu/support/GpuTest.h"

#include <string>

namespace glm::testing {
namespace {

using kernels::LinearKernel;

const char *kSource = R"(#include "kernels/linear_group/linear_group.cuh")";
const std::string kBf16 = "glm::kernels::Bf16";

const char *weightType(bool q4) { return q4 ? "glm::kernels::Q4Groups" : "glm::kernels::Fp8E4m3"; }

const LinearKernel kPlainKernels[] = {LinearKernel::DecodeQuant, LinearKernel::DecodeQuantSplit2,
                                      LinearKernel::DecodeQuantSplit4};

/// Function i of the module: the plain kernels of kPlainKernels for Q4 then fp8, then the group
/// kernel for Q4 then fp8.
std::vector<std::string> names() {
  std::vector<std::string> v;
  for (bool q4 : {true, false}) {
    for (LinearKernel k : kPlainKernels) {
      v.push_back(kernels::linearKernelName(k, kBf16, weightType(q4)));
    }
  }
  for (bool q4 : {true, false}) {
    v.push_back("glm::kernels::linearGroupDecodeQuantKernel<" + kBf16 + ", " + weightType(q4) +
                ">");
  }
  return v;
}
size_t plainIndex(LinearKernel k, bool q4) {
  const size_t i =
      std::find(std::begin(kPlainKernels), std::end(kPlainKernels), k) - std::begin(kPlainKernels);
  return (q4 ? 0 : std::size(kPlainKernels)) + i;
}
size_t groupIndex(bool q4) { return 2 * std::size(kPlainKernels) + (q4 ? 0 : 1); }

/// A weight [out, in] as the weights arena holds it (kernels/common/DenseFormats.h): any codes
/// (fp8's NaNs left out), scales and minima about a quantizer's.
std::vector<uint8_t> randomWeight(bool q4, int64_t out, int64_t in, SplitMix64 &rng) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(in));
  if (q4) {
    std::vector<uint8_t> w(kernels::q4Bytes(1, out, in));
    for (int64_t i = 0; i < out * in / 2; ++i) {
      w[i] = static_cast<uint8_t>(rng.next());
    }
    auto *groups = reinterpret_cast<uint16_t *>(w.data() + kernels::q4GroupsOffset(1, out, in));
    for (int64_t g = 0; g < out * (in / kernels::kQ4Group); ++g) {
      groups[2 * g] = kernels::doubleToF16(rng.normal() * scale / 4);
      groups[2 * g + 1] = kernels::doubleToF16(rng.normal() * scale * 2);
    }
    return w;
  }
  std::vector<uint8_t> w(kernels::fp8Bytes(1, out, in));
  for (int64_t i = 0; i < out * in; ++i) {
    w[i] = static_cast<uint8_t>(rng.next());
    if ((w[i] & 0x7F) == 0x7F) {
      w[i] ^= 1; // not NaN
    }
  }
  auto *scales = reinterpret_cast<float *>(w.data() + kernels::fp8ScalesOffset(1, out, in));
  for (int64_t b = 0; b < kernels::fp8BlocksOf(out) * kernels::fp8BlocksOf(in); ++b) {
    scales[b] = static_cast<float>(scale / 120.0 * (0.5 + rng.uniform()));
  }
  return w;
}

std::vector<uint16_t> randomActivations(int64_t count, SplitMix64 &rng) {
  std::vector<uint16_t> x(count);
  for (uint16_t &v : x) {
    v = kernels::floatToBf16(rng.normal());
  }
  return x;
}

kernels::LinearGpuArgs plainArgs(bool q4, const cuda::DeviceMemory &x, const cuda::DeviceMemory &w,
                                 const cuda::DeviceMemory &y, int64_t rows, int64_t in,
                                 int64_t out) {
  return {reinterpret_cast<const void *>(x.ptr()),
          reinterpret_cast<const void *>(w.ptr()),
          q4 ? nullptr
             : reinterpret_cast<const float *>(w.ptr() + kernels::fp8ScalesOffset(1, out, in)),
          nullptr,
          reinterpret_cast<void *>(y.ptr()),
          rows,
          in,
          out,
          0,
          q4 ? reinterpret_cast<const uint32_t *>(w.ptr() + kernels::q4GroupsOffset(1, out, in))
             : nullptr};
}

class LinearGroupGpu : public ::testing::Test {
protected:
  void SetUp() override {
    std::string why;
    ASSERT_NE(gpu(&why), nullptr) << why;
    module_ = cachedModule(kSource, names()); // once per process: NVRTC takes seconds
    ASSERT_NE(module_, nullptr);
  }
  /// This device's sizing, and sm_121a's (what a GB10 plan launches, run here).
  static std::vector<kernels::LinearQuantSizing> sizings(bool q4) {
    return {{q4, gpu()->info().sharedMemoryPerBlockOptin}, {q4, kernels::kLinearQuantMaxShared}};
  }

  cuda::Module *module_ = nullptr;
};

struct Product {
  int64_t in, out;
};

TEST_F(LinearGroupGpu, ARowsOutputsDoNotDependOnTheRowsBesideIt) {
  // KDA q/k/v and o_proj, the MLP's gate and down, the indexer's and MLA's small projections
  // (split kernels), a ragged tail.
  const Product products[] = {{4096, 4096}, {4096, 12288}, {8192, 4096}, {6144, 4096},
                              {4096, 2048}, {4096, 1024},  {4096, 576},  {448, 1000}};
  const int sms = gpu()->info().smCount;
  SplitMix64 rng(11);
  for (bool q4 : {true, false}) {
    for (const Product &p : products) {
      const LinearKernel kernel = kernels::linearQuantKernelFor(true, 1, p.out, sms);
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory w, toDevice(randomWeight(q4, p.out, p.in, rng)));
      const std::vector<uint16_t> xs = randomActivations(16 * p.in, rng);
      GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory x, toDevice(xs));
      for (const kernels::LinearQuantSizing &sizing : sizings(q4)) {
        for (int64_t rows : {4, 16}) {
          const std::string what = std::string(q4 ? "Q4 " : "fp8 ") + std::to_string(rows) + " x " +
                                   std::to_string(p.in) + " -> " + std::to_string(p.out) + " at " +
                                   std::to_string(sizing.sharedLimit) + " B";
          GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory y, poisoned(rows * p.out * 2));
          GLM_ASSERT_OK(launchAndWait(module_->function(plainIndex(kernel, q4)),
                                      kernels::linearLaunch(kernel, rows, p.in, p.out, sms, sizing),
                                      plainArgs(q4, x, w, y, rows, p.in, p.out)));
          GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> together,
                                   fromDevice<uint16_t>(y, rows * p.out));
          for (int64_t r = 0; r < rows; ++r) {
            GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory xr,
                                     toDevice(std::vector<uint16_t>(xs.begin() + r * p.in,
                                                                    xs.begin() + (r + 1) * p.in)));
            GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory yr, poisoned(p.out * 2));
            GLM_ASSERT_OK(launchAndWait(module_->function(plainIndex(kernel, q4)),
                                        kernels::linearLaunch(kernel, 1, p.in, p.out, sms, sizing),
                                        plainArgs(q4, xr, w, yr, 1, p.in, p.out)));
            GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> alone, fromDevice<uint16_t>(yr, p.out));
            ASSERT_TRUE(std::equal(alone.begin(), alone.end(), together.begin() + r * p.out))
                << what << ": row " << r << " differs from its launch alone";
          }
        }
      }
    }
  }
}

TEST_F(LinearGroupGpu, EachPartIsWhatThePlainKernelGivesIt) {
  struct Group {
    int64_t in;
    std::vector<int64_t> outs;
    bool ownInputs = false; // each part reads its own x
  };
  // A KDA layer's six projections at TP 2 (q, k, v, f_a, b, g_a), an MLP's gate and up, MLA's q_a
  // with the indexer's, ragged parts of a short K, and parts of their own inputs: KDA's f_b and
  // g_b at TP 1 and 2, the ragged ones again.
  const Group groups[] = {{4096, {2048, 2048, 2048, 128, 16, 128}},
                          {4096, {6144, 6144}},
                          {4096, {1536, 576, 128, 64, 32}},
                          {448, {300, 72, 1000}},
                          {128, {8192, 8192}, true},
                          {128, {4096, 4096}, true},
                          {448, {300, 72, 1000}, true}};
  const int sms = gpu()->info().smCount;
  SplitMix64 rng(12);
  for (bool q4 : {true, false}) {
    for (const Group &g : groups) {
      std::vector<cuda::DeviceMemory> weights;
      for (int64_t out : g.outs) {
        GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory w, toDevice(randomWeight(q4, out, g.in, rng)));
        weights.push_back(std::move(w));
      }
      for (int64_t rows : {1, 5, 16, 33}) {
        std::vector<cuda::DeviceMemory> xs; // one for all parts, or each part's
        for (size_t i = 0; i < (g.ownInputs ? g.outs.size() : 1); ++i) {
          GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory x,
                                   toDevice(randomActivations(rows * g.in, rng)));
          xs.push_back(std::move(x));
        }
        const auto xOf = [&](size_t part) -> const cuda::DeviceMemory & {
          return xs[g.ownInputs ? part : 0];
        };
        for (const kernels::LinearQuantSizing &sizing : sizings(q4)) {
          kernels::LinearGroupGpuArgs args{};
          args.rows = rows;
          args.inFeatures = g.in;
          args.parts = static_cast<int32_t>(g.outs.size());
          std::vector<cuda::DeviceMemory> ys;
          int64_t blocks = 0;
          for (size_t i = 0; i < g.outs.size(); ++i) {
            GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory y, poisoned(rows * g.outs[i] * 2));
            const kernels::LinearGpuArgs part =
                plainArgs(q4, xOf(i), weights[i], y, rows, g.in, g.outs[i]);
            blocks += kernels::linearGroupPartBlocks(rows, g.outs[i]);
            args.part[i] = {part.x,    part.weight, part.weightScaleInv, part.weightGroups, part.y,
                            g.outs[i], blocks};
            ys.push_back(std::move(y));
          }
          const kernels::LaunchDims d = kernels::linearGroupLaunch(rows, g.in, blocks, sms, sizing);
          GLM_ASSERT_OK(launchAndWait(module_->function(groupIndex(q4)), d, args));
          for (size_t i = 0; i < g.outs.size(); ++i) {
            const int64_t out = g.outs[i];
            const std::string what =
                std::string(q4 ? "Q4 " : "fp8 ") + (g.ownInputs ? "own-input " : "") + "part " +
                std::to_string(i) + " of " + std::to_string(rows) + " x " + std::to_string(g.in) +
                " -> " + std::to_string(out) + " at " + std::to_string(sizing.sharedLimit) + " B";
            GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> grouped,
                                     fromDevice<uint16_t>(ys[i], rows * out));
            // The plain kernel on the part alone, at the group's block size and shared memory.
            GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory y, poisoned(rows * out * 2));
            kernels::LaunchDims plain = d;
            plain.grid[0] = static_cast<unsigned>(kernels::linearGroupPartBlocks(rows, out));
            GLM_ASSERT_OK(
                launchAndWait(module_->function(plainIndex(LinearKernel::DecodeQuant, q4)), plain,
                              plainArgs(q4, xOf(i), weights[i], y, rows, g.in, out)));
            GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint16_t> alone,
                                     fromDevice<uint16_t>(y, rows * out));
            EXPECT_EQ(grouped, alone) << what;
            EXPECT_TRUE(std::none_of(grouped.begin(), grouped.end(),
                                     [](uint16_t v) { return v == 0xFFFF; }))
                << what << ": elements left unwritten";
          }
        }
      }
    }
  }
}

} // namespace
} // namespace glm::testing
