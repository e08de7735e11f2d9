// The CUDA engine's load-time quantizer: kernels/quantize/quantize.cuh on the weights arena.
#include "runtime/engine/CudaQuantizer.h"

#include "base/Logging.h"
#include "kernels/common/Nvrtc.h"
#include "kernels/quantize/quantize_gpu.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

namespace glm::cuda {
namespace {

/// The kernels, in the order of their functions in the module.
const std::vector<std::string> &kernelNames() {
  static const std::vector<std::string> names = {
      "glm::kernels::q4QuantizeKernel", "glm::kernels::q4RowStatsKernel",
      "glm::kernels::fp8CandidatesKernel", "glm::kernels::fp8EncodeKernel",
      "glm::kernels::fp8SourceKernel"};
  return names;
}
enum Kernel { kQ4Quantize, kQ4RowStats, kFp8Candidates, kFp8Encode, kFp8Source };

uint64_t alignUp(uint64_t n) { return (n + 255) / 256 * 256; }

template <typename T> T *at(CUdeviceptr p) { return reinterpret_cast<T *>(p); }

} // namespace

std::unique_ptr<CudaQuantizer> CudaQuantizer::create(CudaContext &ctx, CUdeviceptr arena,
                                                     uint64_t arenaBytes, uint64_t bandBytes) {
  const char *env = std::getenv("GLM_GPU_QUANTIZE");
  const std::string mode = env != nullptr ? env : "";
  if (mode == "off") {
    return nullptr;
  }
  std::unique_ptr<CudaQuantizer> q(new CudaQuantizer(ctx, arena, arenaBytes, bandBytes));
  const int ratio = ctx.info().singleToDoubleRatio;
  q->exact_ = mode == "exact" || (ratio > 0 && ratio <= 8);
  Expected<kernels::CompiledModule> compiled = kernels::compileKernels(
      "#include \"kernels/quantize/quantize.cuh\"\n", kernelNames(), ctx.info().arch);
  if (!compiled.ok()) {
    logWarning("quantizing the weights on the host: the GPU quantizer does not compile for ",
               ctx.info().arch, ": ", compiled.status().toString());
    return nullptr;
  }
  Expected<std::unique_ptr<Module>> module = ctx.load(compiled->cubin, compiled->entries);
  if (!module.ok()) {
    logWarning("quantizing the weights on the host: the GPU quantizer does not load: ",
               module.status().toString());
    return nullptr;
  }
  q->module_ = std::move(module).value();
  return q;
}

CudaQuantizer::~CudaQuantizer() = default;

std::vector<WeightWindow> CudaQuantizer::takeWritten() {
  std::vector<WeightWindow> out;
  out.swap(written_);
  return out;
}

Expected<CUdeviceptr> CudaQuantizer::scratch(size_t bytes) {
  if (scratch_.bytes() < bytes) {
    scratch_ = DeviceMemory();
    GLM_ASSIGN_OR_RETURN(scratch_, ctx_.allocate(bytes));
  }
  return scratch_.ptr();
}

bool CudaQuantizer::quantize(const Job &job, kernels::QuantizeStats &stats) {
  const bool q4 = job.encoding == kernels::DenseEncoding::Q4;
  const bool fp8 = job.encoding == kernels::DenseEncoding::Fp8;
  if (disabled_ || (!q4 && !fp8) || (fp8 && !exact_) || job.rows <= 0 || job.cols <= 0 ||
      (q4 && job.cols % kernels::kQ4Group != 0) ||
      (job.dtype != DType::BF16 && job.dtype != DType::F16 && job.dtype != DType::F32)) {
    return false; // the host quantizes it (and refuses what it refuses, naming it)
  }
  const uint64_t need = static_cast<uint64_t>(q4 ? kernels::q4Bytes(1, job.rows, job.cols)
                                                 : kernels::fp8Bytes(1, job.rows, job.cols));
  if (need > job.bytes || job.arenaOffset > arenaBytes_ ||
      job.bytes > arenaBytes_ - job.arenaOffset || (arena_ + job.arenaOffset) % 16 != 0) {
    return false;
  }
  kernels::QuantizeStats s;
  bool bad = false;
  const Status status = run(job, s, bad);
  if (!status.ok()) {
    // Whatever the kernels left in the slice, the host's bytes replace it: the range is not
    // recorded as written, so the window upload covers it.
    logWarning("quantizing the weights on the host from ", job.name,
               " on: the GPU quantizer failed: ", status.toString());
    disabled_ = true;
    return false;
  }
  if (bad) {
    return false; // a value the host quantizer refuses: it says which
  }
  stats.add(s);
  written_.push_back({job.arenaOffset, job.bytes});
  return true;
}

Status CudaQuantizer::run(const Job &job, kernels::QuantizeStats &stats, bool &bad) {
  using namespace kernels;
  GLM_RETURN_IF_ERROR(ctx_.makeCurrent());
  const CudaDriver &d = ctx_.driver();
  const CUstream stream = ctx_.stream();
  const int64_t rows = job.rows, cols = job.cols;
  const uint64_t elementSize = dtypeSize(job.dtype);
  const bool q4 = job.encoding == DenseEncoding::Q4;
  const auto source = static_cast<int32_t>(job.dtype == DType::BF16  ? QuantizeSourceType::Bf16
                                           : job.dtype == DType::F16 ? QuantizeSourceType::F16
                                                                     : QuantizeSourceType::F32);
  const int candidates = std::max(1, Fp8Search{}.candidates);
  const int64_t rowBytes = cols * static_cast<int64_t>(elementSize);
  // Rows a band: about bandBytes_ of source, in whole fp8 blocks, so that the scratch stays
  // small beside a GB10's weights.
  int64_t band = std::max<int64_t>(kFp8Block, static_cast<int64_t>(bandBytes_) / rowBytes /
                                                  kFp8Block * kFp8Block);
  band = std::min(band, rows);
  const int64_t groupsPerRow = cols / kQ4Group;
  const int64_t colBlocks = fp8BlocksOf(cols);
  const int64_t bandBlocks = fp8BlocksOf(band) * colBlocks;

  // The scratch: the band's source, then the kernels' sums.
  uint64_t size = 0;
  auto take = [&size](uint64_t bytes) {
    const uint64_t offset = size;
    size += alignUp(bytes);
    return offset;
  };
  const uint64_t srcAt = take(static_cast<uint64_t>(band * rowBytes));
  const uint64_t aAt =
      take(static_cast<uint64_t>(q4 ? band * groupsPerRow * 4 : bandBlocks * candidates * 8));
  const uint64_t bAt =
      take(static_cast<uint64_t>(q4 ? band * groupsPerRow * 4 : bandBlocks * candidates * 4));
  const uint64_t cAt = take(static_cast<uint64_t>(q4 ? band * 8 : bandBlocks * 8));
  const uint64_t dAt = take(static_cast<uint64_t>(q4 ? band * 8 : fp8BlocksOf(band) * 8));
  const uint64_t badAt = take(4);
  GLM_ASSIGN_OR_RETURN(const CUdeviceptr base, scratch(size));
  const CUdeviceptr dst = arena_ + job.arenaOffset;
  GLM_CU(&d, cuMemsetD8Async(dst, 0, job.bytes, stream)); // alignment padding, as the host's
  GLM_CU(&d, cuMemsetD8Async(base + badAt, 0, 4, stream));

  // What comes back: the per-row (Q4) or per-block (fp8) sums, summed in the host's order at the
  // end.
  std::vector<double> sumsA, sumsB;
  std::vector<float> groupError, groupSource;
  auto launch = [&](Kernel k, const LaunchDims &dims, const auto &args) {
    return ctx_.launch(module_->function(k), dims.grid, dims.block, dims.sharedMemory, args);
  };
  for (int64_t r0 = 0; r0 < rows; r0 += band) {
    const int64_t n = std::min(band, rows - r0);
    GLM_RETURN_IF_ERROR(ctx_.upload(base + srcAt, job.source + static_cast<uint64_t>(r0 * rowBytes),
                                    static_cast<size_t>(n * rowBytes)));
    const void *src = at<const void>(base + srcAt);
    if (q4) {
      Q4QuantizeGpuArgs a{};
      a.src = src;
      a.codes = at<uint8_t>(dst + static_cast<uint64_t>(r0 * (cols / 2)));
      a.pairs = at<uint32_t>(
          dst + static_cast<uint64_t>(q4GroupsOffset(1, rows, cols) + r0 * groupsPerRow * 4));
      a.groupError = at<float>(base + aAt);
      a.groupSource = at<float>(base + bAt);
      a.bad = at<uint32_t>(base + badAt);
      a.rows = n;
      a.cols = cols;
      a.source = source;
      a.search = Q4Search{};
      GLM_RETURN_IF_ERROR(launch(kQ4Quantize, q4QuantizeLaunch(n, cols), a));
      if (exact_) {
        Q4RowStatsGpuArgs s{};
        s.src = src;
        s.codes = a.codes;
        s.pairs = a.pairs;
        s.rowError = at<double>(base + cAt);
        s.rowSource = at<double>(base + dAt);
        s.rows = n;
        s.cols = cols;
        s.source = source;
        GLM_RETURN_IF_ERROR(launch(kQ4RowStats, q4RowStatsLaunch(n), s));
        sumsA.resize(static_cast<size_t>(r0 + n));
        sumsB.resize(static_cast<size_t>(r0 + n));
        GLM_RETURN_IF_ERROR(
            ctx_.download(sumsA.data() + r0, base + cAt, static_cast<size_t>(n) * 8));
        GLM_RETURN_IF_ERROR(
            ctx_.download(sumsB.data() + r0, base + dAt, static_cast<size_t>(n) * 8));
      } else {
        const size_t first = static_cast<size_t>(r0 * groupsPerRow);
        const size_t count = static_cast<size_t>(n * groupsPerRow);
        groupError.resize(first + count);
        groupSource.resize(first + count);
        GLM_RETURN_IF_ERROR(ctx_.download(groupError.data() + first, base + aAt, count * 4));
        GLM_RETURN_IF_ERROR(ctx_.download(groupSource.data() + first, base + bAt, count * 4));
      }
      continue;
    }
    const int64_t blocks = fp8BlocksOf(n) * colBlocks;
    Fp8CandidatesGpuArgs c{};
    c.src = src;
    c.candidateError = at<double>(base + aAt);
    c.candidateScale = at<float>(base + bAt);
    c.bad = at<uint32_t>(base + badAt);
    c.rows = n;
    c.cols = cols;
    c.source = source;
    c.candidates = candidates;
    GLM_RETURN_IF_ERROR(launch(kFp8Candidates, fp8CandidatesLaunch(n, cols, candidates), c));
    Fp8EncodeGpuArgs e{};
    e.src = src;
    e.values = at<uint8_t>(dst + static_cast<uint64_t>(r0 * cols));
    e.scales = at<float>(dst + static_cast<uint64_t>(fp8ScalesOffset(1, rows, cols) +
                                                     (r0 / kFp8Block) * colBlocks * 4));
    e.candidateError = c.candidateError;
    e.candidateScale = c.candidateScale;
    e.blockError = at<double>(base + cAt);
    e.rows = n;
    e.cols = cols;
    e.source = source;
    e.candidates = candidates;
    GLM_RETURN_IF_ERROR(launch(kFp8Encode, fp8EncodeLaunch(n, cols), e));
    Fp8SourceGpuArgs s{};
    s.src = src;
    s.rowBlockSource = at<double>(base + dAt);
    s.rows = n;
    s.cols = cols;
    s.source = source;
    GLM_RETURN_IF_ERROR(launch(kFp8Source, fp8SourceLaunch(n), s));
    const size_t firstBlock = static_cast<size_t>((r0 / kFp8Block) * colBlocks);
    const size_t firstRowBlock = static_cast<size_t>(r0 / kFp8Block);
    sumsA.resize(firstBlock + static_cast<size_t>(blocks));
    sumsB.resize(firstRowBlock + static_cast<size_t>(fp8BlocksOf(n)));
    GLM_RETURN_IF_ERROR(
        ctx_.download(sumsA.data() + firstBlock, base + cAt, static_cast<size_t>(blocks) * 8));
    GLM_RETURN_IF_ERROR(ctx_.download(sumsB.data() + firstRowBlock, base + dAt,
                                      static_cast<size_t>(fp8BlocksOf(n)) * 8));
  }
  uint32_t badFlag = 0;
  GLM_RETURN_IF_ERROR(ctx_.download(&badFlag, base + badAt, 4));
  bad = badFlag != 0;
  if (bad) {
    return Status::success();
  }
  stats.add(!q4      ? fp8StatsFromBlocks(sumsA.data(), sumsB.data(), rows, cols)
            : exact_ ? QuantizeStats::ofRows(sumsA.data(), sumsB.data(), rows, rows * cols)
                     : q4StatsFromGroups(groupError.data(), groupSource.data(), rows, cols));
  return Status::success();
}

} // namespace glm::cuda
