// The load-time quantizer on the device (kernels/quantize/quantize.cuh) against the host's
// quantizeQ4 / quantizeFp8Blocks: the same bytes, bit for bit, and the same statistics (bit-equal
// from the f64 kernels, within f32 rounding from the Q4 group sums), on Gaussian and heavy-tailed
// bf16 sources (Student-t, ν = 3, with 1% of the columns × 10) and f16 / f32 ones, whole matrices
// and partial blocks; then the engine's CudaQuantizer writing a binding into an arena in bands.
#include "kernels/common/WeightView.h"
#include "kernels/quantize/quantize.h"
#include "kernels/quantize/quantize_gpu.h"
#include "runtime/engine/CudaQuantizer.h"
#include "tests/gpu/support/GpuTest.h"

#include <cmath>
#include <cstring>

namespace glm::testing {
namespace {

#define GLM_CU_ASSERT(call) GLM_ASSERT_OK(::glm::cuda::check(gpu()->driver().call, #call))

enum class Tail { Gaussian, StudentT3 };

/// [rows, cols] f32 values, already rounded to `dtype` (BF16, F16 or F32), and their encoding.
struct Source {
  std::vector<float> values;
  std::vector<uint8_t> bytes;
  DType dtype;
  int64_t rows, cols;
};

Source makeSource(int64_t rows, int64_t cols, Tail tail, DType dtype, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<float> scaleOf(cols, 1.0f);
  if (tail == Tail::StudentT3) {
    for (int64_t c = 0; c < cols; ++c) {
      scaleOf[c] = rng.below(100) == 0 ? 10.0f : 1.0f;
    }
  }
  Source s{{}, {}, dtype, rows, cols};
  s.values.resize(rows * cols);
  s.bytes.resize(rows * cols * dtypeSize(dtype));
  for (int64_t i = 0; i < rows * cols; ++i) {
    float v = rng.normal();
    if (tail == Tail::StudentT3) {
      float chi2 = 0.0f;
      for (int k = 0; k < 3; ++k) {
        const float z = rng.normal();
        chi2 += z * z;
      }
      v = v / std::sqrt(chi2 / 3.0f + 1e-6f);
    }
    v *= 0.02f * scaleOf[i % cols];
    if (i % 997 == 0) {
      v = 0.0f; // a few exact zeros
    }
    switch (dtype) {
    case DType::BF16: {
      const uint16_t b = kernels::floatToBf16(v);
      std::memcpy(s.bytes.data() + 2 * i, &b, 2);
      v = kernels::bf16ToFloat(b);
      break;
    }
    case DType::F16: {
      const uint16_t h = kernels::doubleToF16(v);
      std::memcpy(s.bytes.data() + 2 * i, &h, 2);
      v = kernels::f16ToFloat(h);
      break;
    }
    default:
      std::memcpy(s.bytes.data() + 4 * i, &v, 4);
      break;
    }
    s.values[i] = v;
  }
  // Row 1 (row 0 of a one-row matrix) starts with 128 equal values: constant Q4 groups.
  const int64_t constantRow = rows > 1 ? 1 : 0;
  for (int64_t c = 0; c < std::min<int64_t>(cols, 128); ++c) {
    const int64_t i = constantRow * cols + c;
    if (dtype == DType::F32) {
      s.values[i] = 0.0125f;
      std::memcpy(s.bytes.data() + 4 * i, &s.values[i], 4);
    } else {
      const uint16_t b =
          dtype == DType::BF16 ? kernels::floatToBf16(0.0125f) : kernels::doubleToF16(0.0125);
      std::memcpy(s.bytes.data() + 2 * i, &b, 2);
      s.values[i] = dtype == DType::BF16 ? kernels::bf16ToFloat(b) : kernels::f16ToFloat(b);
    }
  }
  // An all-zero 128 x 128 block when the shape has a second one in both directions.
  if (rows >= 256 && cols >= 256) {
    for (int64_t r = 128; r < 256; ++r) {
      for (int64_t c = 128; c < 256; ++c) {
        const int64_t i = r * cols + c;
        s.values[i] = 0.0f;
        std::memset(s.bytes.data() + i * dtypeSize(dtype), 0, dtypeSize(dtype));
      }
    }
  }
  return s;
}

kernels::WeightView viewOf(const Source &s) {
  return kernels::WeightView::raw(s.bytes.data(), s.dtype, {s.rows, s.cols});
}

int32_t sourceType(DType dtype) {
  return static_cast<int32_t>(dtype == DType::BF16  ? kernels::QuantizeSourceType::Bf16
                              : dtype == DType::F16 ? kernels::QuantizeSourceType::F16
                                                    : kernels::QuantizeSourceType::F32);
}

cuda::Module *quantizeModule() {
  static const std::vector<kernels::NamedLaunch> launches = {
      {"glm::kernels::q4QuantizeKernel", {}},
      {"glm::kernels::q4RowStatsKernel", {}},
      {"glm::kernels::fp8CandidatesKernel", {}},
      {"glm::kernels::fp8EncodeKernel", {}},
      {"glm::kernels::fp8SourceKernel", {}}};
  return cachedModule(R"(#include "kernels/quantize/quantize.cuh")", launches);
}

/// The index of the first differing byte, or -1.
int64_t firstDifference(const std::vector<uint8_t> &a, const std::vector<uint8_t> &b) {
  if (a.size() != b.size()) {
    return 0;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

struct Shape {
  int64_t rows, cols;
  Tail tail;
  DType dtype;
};

std::string describe(const Shape &s) {
  return strCat(s.rows, " x ", s.cols, " ", dtypeName(s.dtype),
                s.tail == Tail::Gaussian ? " gaussian" : " student-t");
}

void checkQ4(const Shape &shape, uint64_t seed) {
  SCOPED_TRACE(describe(shape));
  cuda::Module *module = quantizeModule();
  ASSERT_NE(module, nullptr);
  const Source s = makeSource(shape.rows, shape.cols, shape.tail, shape.dtype, seed);
  const int64_t rows = s.rows, cols = s.cols, groups = rows * (cols / kernels::kQ4Group);
  const int64_t bytes = kernels::q4Bytes(1, rows, cols);
  std::vector<uint8_t> expected(bytes, 0xAB);
  kernels::QuantizeStats expectedStats;
  GLM_ASSERT_OK(kernels::quantizeQ4(viewOf(s), expected.data(), &expectedStats));

  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory src, toDevice(s.bytes));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dst, gpu()->allocate(bytes));
  GLM_CU_ASSERT(cuMemsetD8(dst.ptr(), 0, bytes)); // the padding, which the caller zeroes
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory groupError, poisoned(groups * 4));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory groupSource, poisoned(groups * 4));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory rowError, poisoned(rows * 8));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory rowSource, poisoned(rows * 8));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory bad, toDevice(std::vector<uint32_t>{0}));
  kernels::Q4QuantizeGpuArgs a{};
  a.src = src.as<const void>();
  a.codes = dst.as<uint8_t>();
  a.pairs = reinterpret_cast<uint32_t *>(dst.ptr() + kernels::q4GroupsOffset(1, rows, cols));
  a.groupError = groupError.as<float>();
  a.groupSource = groupSource.as<float>();
  a.bad = bad.as<uint32_t>();
  a.rows = rows;
  a.cols = cols;
  a.source = sourceType(s.dtype);
  a.search = kernels::Q4Search{};
  GLM_ASSERT_OK(launchAndWait(module->function(0), kernels::q4QuantizeLaunch(rows, cols), a));
  kernels::Q4RowStatsGpuArgs r{};
  r.src = a.src;
  r.codes = a.codes;
  r.pairs = a.pairs;
  r.rowError = rowError.as<double>();
  r.rowSource = rowSource.as<double>();
  r.rows = rows;
  r.cols = cols;
  r.source = a.source;
  GLM_ASSERT_OK(launchAndWait(module->function(1), kernels::q4RowStatsLaunch(rows), r));

  GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint32_t> badFlag, fromDevice<uint32_t>(bad, 1));
  EXPECT_EQ(badFlag[0], 0u);
  GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> got, fromDevice<uint8_t>(dst, bytes));
  const int64_t at = firstDifference(got, expected);
  EXPECT_EQ(at, -1) << "first differing byte " << at << " of " << bytes << " (groups plane from "
                    << kernels::q4GroupsOffset(1, rows, cols)
                    << "): " << (at >= 0 ? strCat(int(got[at]), " vs ", int(expected[at])) : "");

  GLM_ASSERT_OK_AND_ASSIGN(std::vector<double> re, fromDevice<double>(rowError, rows));
  GLM_ASSERT_OK_AND_ASSIGN(std::vector<double> rs, fromDevice<double>(rowSource, rows));
  const kernels::QuantizeStats exact =
      kernels::QuantizeStats::ofRows(re.data(), rs.data(), rows, rows * cols);
  EXPECT_EQ(exact.sumSquaredError, expectedStats.sumSquaredError);
  EXPECT_EQ(exact.sumSquaredSource, expectedStats.sumSquaredSource);
  EXPECT_EQ(exact.elements, expectedStats.elements);
  EXPECT_EQ(exact.relativeRms(), expectedStats.relativeRms());

  GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> ge, fromDevice<float>(groupError, groups));
  GLM_ASSERT_OK_AND_ASSIGN(std::vector<float> gs, fromDevice<float>(groupSource, groups));
  const kernels::QuantizeStats close = kernels::q4StatsFromGroups(ge.data(), gs.data(), rows, cols);
  // Relative agreement, or both exactly zero (a one-row source is constant groups: no error).
  auto near = [](double got, double want) {
    return want == 0.0 ? got == 0.0 : std::fabs(got / want - 1.0) <= 1e-5;
  };
  EXPECT_TRUE(near(close.sumSquaredError, expectedStats.sumSquaredError))
      << close.sumSquaredError << " vs " << expectedStats.sumSquaredError;
  EXPECT_TRUE(near(close.sumSquaredSource, expectedStats.sumSquaredSource))
      << close.sumSquaredSource << " vs " << expectedStats.sumSquaredSource;
  EXPECT_TRUE(near(close.relativeRms(), expectedStats.relativeRms()))
      << close.relativeRms() << " vs " << expectedStats.relativeRms();
}

void checkFp8(const Shape &shape, uint64_t seed) {
  SCOPED_TRACE(describe(shape));
  cuda::Module *module = quantizeModule();
  ASSERT_NE(module, nullptr);
  const Source s = makeSource(shape.rows, shape.cols, shape.tail, shape.dtype, seed);
  const int64_t rows = s.rows, cols = s.cols;
  const int64_t blocks = kernels::fp8BlockCount(rows, cols);
  const int candidates = kernels::Fp8Search{}.candidates;
  const int64_t bytes = kernels::fp8Bytes(1, rows, cols);
  std::vector<uint8_t> expected(bytes, 0xAB);
  kernels::QuantizeStats expectedStats;
  GLM_ASSERT_OK(kernels::quantizeFp8Blocks(viewOf(s), expected.data(), &expectedStats));

  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory src, toDevice(s.bytes));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory dst, gpu()->allocate(bytes));
  GLM_CU_ASSERT(cuMemsetD8(dst.ptr(), 0, bytes));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory candidateError, poisoned(blocks * candidates * 8));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory candidateScale, poisoned(blocks * candidates * 4));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory blockError, poisoned(blocks * 8));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory rowBlockSource,
                           poisoned(kernels::fp8BlocksOf(rows) * 8));
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory bad, toDevice(std::vector<uint32_t>{0}));
  kernels::Fp8CandidatesGpuArgs c{};
  c.src = src.as<const void>();
  c.candidateError = candidateError.as<double>();
  c.candidateScale = candidateScale.as<float>();
  c.bad = bad.as<uint32_t>();
  c.rows = rows;
  c.cols = cols;
  c.source = sourceType(s.dtype);
  c.candidates = candidates;
  GLM_ASSERT_OK(
      launchAndWait(module->function(2), kernels::fp8CandidatesLaunch(rows, cols, candidates), c));
  kernels::Fp8EncodeGpuArgs e{};
  e.src = c.src;
  e.values = dst.as<uint8_t>();
  e.scales = reinterpret_cast<float *>(dst.ptr() + kernels::fp8ScalesOffset(1, rows, cols));
  e.candidateError = c.candidateError;
  e.candidateScale = c.candidateScale;
  e.blockError = blockError.as<double>();
  e.rows = rows;
  e.cols = cols;
  e.source = c.source;
  e.candidates = candidates;
  GLM_ASSERT_OK(launchAndWait(module->function(3), kernels::fp8EncodeLaunch(rows, cols), e));
  kernels::Fp8SourceGpuArgs so{};
  so.src = c.src;
  so.rowBlockSource = rowBlockSource.as<double>();
  so.rows = rows;
  so.cols = cols;
  so.source = c.source;
  GLM_ASSERT_OK(launchAndWait(module->function(4), kernels::fp8SourceLaunch(rows), so));

  GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint32_t> badFlag, fromDevice<uint32_t>(bad, 1));
  EXPECT_EQ(badFlag[0], 0u);
  GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> got, fromDevice<uint8_t>(dst, bytes));
  const int64_t at = firstDifference(got, expected);
  EXPECT_EQ(at, -1) << "first differing byte " << at << " of " << bytes << " (scales from "
                    << kernels::fp8ScalesOffset(1, rows, cols)
                    << "): " << (at >= 0 ? strCat(int(got[at]), " vs ", int(expected[at])) : "");
  GLM_ASSERT_OK_AND_ASSIGN(std::vector<double> be, fromDevice<double>(blockError, blocks));
  GLM_ASSERT_OK_AND_ASSIGN(std::vector<double> bs,
                           fromDevice<double>(rowBlockSource, kernels::fp8BlocksOf(rows)));
  const kernels::QuantizeStats stats =
      kernels::fp8StatsFromBlocks(be.data(), bs.data(), rows, cols);
  EXPECT_EQ(stats.sumSquaredError, expectedStats.sumSquaredError);
  EXPECT_EQ(stats.sumSquaredSource, expectedStats.sumSquaredSource);
  EXPECT_EQ(stats.relativeRms(), expectedStats.relativeRms());
}

TEST(QuantizeGpu, Q4BytesAndStatsEqualTheHostQuantizers) {
  std::string why;
  ASSERT_NE(gpu(&why), nullptr) << why;
  uint64_t seed = 1;
  for (const Shape &shape :
       {Shape{300, 256, Tail::Gaussian, DType::BF16}, Shape{300, 256, Tail::StudentT3, DType::BF16},
        Shape{4096, 4096, Tail::Gaussian, DType::BF16},
        Shape{4096, 4096, Tail::StudentT3, DType::BF16},
        Shape{130, 192, Tail::StudentT3, DType::F16}, Shape{77, 320, Tail::Gaussian, DType::F32},
        Shape{1, 64, Tail::Gaussian, DType::BF16}}) {
    checkQ4(shape, seed++);
  }
}

TEST(QuantizeGpu, Fp8BytesAndStatsEqualTheHostQuantizers) {
  std::string why;
  ASSERT_NE(gpu(&why), nullptr) << why;
  uint64_t seed = 100;
  for (const Shape &shape :
       {Shape{300, 256, Tail::Gaussian, DType::BF16}, Shape{300, 256, Tail::StudentT3, DType::BF16},
        Shape{4096, 4096, Tail::StudentT3, DType::BF16},
        Shape{129, 200, Tail::Gaussian, DType::F16}, Shape{77, 131, Tail::StudentT3, DType::F32},
        Shape{1, 5, Tail::Gaussian, DType::BF16}}) {
    checkFp8(shape, seed++);
  }
}

/// The engine's quantizer: a binding at an offset of an arena, in bands of 128 rows, its bytes
/// and stats the host's, the rest of the arena untouched, its range reported written.
TEST(QuantizeGpu, TheEnginesQuantizerWritesTheArenaInBands) {
  std::string why;
  ASSERT_NE(gpu(&why), nullptr) << why;
  const uint64_t arenaBytes = uint64_t{8} << 20, offset = 4096;
  GLM_ASSERT_OK_AND_ASSIGN(cuda::DeviceMemory arena, poisoned(arenaBytes));
  std::unique_ptr<cuda::CudaQuantizer> quantizer =
      cuda::CudaQuantizer::create(*gpu(), arena.ptr(), arenaBytes, /*bandBytes=*/1);
  ASSERT_NE(quantizer, nullptr) << "the quantizer's kernels did not compile (see the warning)";
  for (const kernels::DenseEncoding encoding :
       {kernels::DenseEncoding::Q4, kernels::DenseEncoding::Fp8}) {
    const bool q4 = encoding == kernels::DenseEncoding::Q4;
    SCOPED_TRACE(q4 ? "q4" : "fp8");
    const Source s = makeSource(300, 256, Tail::StudentT3, DType::BF16, q4 ? 7 : 8);
    const int64_t bytes =
        q4 ? kernels::q4Bytes(1, s.rows, s.cols) : kernels::fp8Bytes(1, s.rows, s.cols);
    const uint64_t slice = static_cast<uint64_t>(bytes) + 512; // a slice longer than its matrix
    std::vector<uint8_t> expected(slice, 0);
    kernels::QuantizeStats expectedStats;
    GLM_ASSERT_OK(q4 ? kernels::quantizeQ4(viewOf(s), expected.data(), &expectedStats)
                     : kernels::quantizeFp8Blocks(viewOf(s), expected.data(), &expectedStats));
    GLM_CU_ASSERT(cuMemsetD8(arena.ptr(), 0xFF, arenaBytes));
    cuda::CudaQuantizer::Job job;
    job.name = "test";
    job.source = s.bytes.data();
    job.dtype = s.dtype;
    job.rows = s.rows;
    job.cols = s.cols;
    job.encoding = encoding;
    job.arenaOffset = offset;
    job.bytes = slice;
    kernels::QuantizeStats stats;
    const bool done = quantizer->quantize(job, stats);
    if (!q4 && !quantizer->exact()) {
      EXPECT_FALSE(done) << "fp8 blocks stay on the host where f64 is slow";
      continue;
    }
    ASSERT_TRUE(done);
    std::vector<WeightWindow> written = quantizer->takeWritten();
    ASSERT_EQ(written.size(), 1u);
    EXPECT_EQ(written[0].offset, offset);
    EXPECT_EQ(written[0].bytes, slice);
    GLM_ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> all, fromDevice<uint8_t>(arena, arenaBytes));
    const std::vector<uint8_t> got(all.begin() + offset, all.begin() + offset + slice);
    EXPECT_EQ(firstDifference(got, expected), -1);
    EXPECT_EQ(all[offset - 1], 0xFF);
    EXPECT_EQ(all[offset + slice], 0xFF);
    if (quantizer->exact()) {
      EXPECT_EQ(stats.sumSquaredError, expectedStats.sumSquaredError);
      EXPECT_EQ(stats.sumSquaredSource, expectedStats.sumSquaredSource);
    } else {
      EXPECT_NEAR(stats.relativeRms() / expectedStats.relativeRms(), 1.0, 1e-5);
    }
    EXPECT_EQ(stats.elements, expectedStats.elements);
  }
  // A source the host refuses: the device declines it, writing nothing it reports.
  Source nan = makeSource(256, 128, Tail::Gaussian, DType::F32, 9);
  const float value = NAN;
  std::memcpy(nan.bytes.data() + 4 * (200 * 128 + 3), &value, 4);
  cuda::CudaQuantizer::Job job;
  job.name = "nan";
  job.source = nan.bytes.data();
  job.dtype = DType::F32;
  job.rows = nan.rows;
  job.cols = nan.cols;
  job.encoding = kernels::DenseEncoding::Q4;
  job.arenaOffset = offset;
  job.bytes = static_cast<uint64_t>(kernels::q4Bytes(1, nan.rows, nan.cols));
  kernels::QuantizeStats stats;
  EXPECT_FALSE(quantizer->quantize(job, stats));
  EXPECT_TRUE(quantizer->takeWritten().empty());
  EXPECT_EQ(stats.elements, 0);
}

} // namespace
} // namespace glm::testing
