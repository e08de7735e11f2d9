// The linear family: the decode and prefill kernels at the model's projection shapes, beside
// cuBLAS's bf16 GEMM on the same shapes (whose 8192^3 rate is the suite's matrix ceiling; 8192^3
// is a fixed size, not the model's).
#include "kernels/linear/linear_gpu.h"
#include "runtime/cuda/Ceilings.h"
#include "tools/kernel-bench/Bench.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace glm::bench {

namespace {

using kernels::LinearKernel;

std::string shapeName(int64_t rows, int64_t in, int64_t out) {
  char s[96];
  std::snprintf(s, sizeof s, "[%lldx%lld]·[%lldx%lld]", static_cast<long long>(rows),
                static_cast<long long>(in), static_cast<long long>(in),
                static_cast<long long>(out));
  return s;
}

/// Device buffers of `bytes` each, enough copies that together they are at least 4x the L2 (so
/// that rotating among them, no call finds its weights cached), filled from one random block.
Expected<std::vector<cuda::DeviceMemory>> weightCopies(Suite &suite, size_t bytes) {
  const size_t l2 = suite.ctx().info().l2Bytes > 0 ? suite.ctx().info().l2Bytes : (60u << 20);
  const size_t copies = std::clamp<size_t>((4 * l2 + bytes - 1) / bytes, 1, 16);
  const size_t blockBytes = std::min<size_t>(bytes, 32u << 20);
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory block, suite.random(blockBytes / 2, true, 0.02f));
  std::vector<cuda::DeviceMemory> out;
  for (size_t c = 0; c < copies; ++c) {
    GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory m, suite.ctx().allocate(bytes));
    for (size_t done = 0; done < bytes; done += blockBytes) {
      GLM_CU(&suite.ctx().driver(),
             cuMemcpyDtoD(m.ptr() + done, block.ptr(), std::min(blockBytes, bytes - done)));
    }
    out.push_back(std::move(m));
  }
  return out;
}

struct Kernels {
  std::unique_ptr<cuda::Module> module;
  std::vector<std::string> names;
  cuda::CUfunction get(const std::string &name) const {
    const size_t i = std::find(names.begin(), names.end(), name) - names.begin();
    if (i == names.size()) {
      std::fprintf(stderr, "linear bench: %s was not compiled\n", name.c_str());
      std::abort();
    }
    return module->function(i);
  }
};

const std::string kBf16 = "glm::kernels::Bf16", kFp8 = "glm::kernels::Fp8E4m3";

std::string prefillName(int tileN, int k) {
  char s[128];
  std::snprintf(
      s, sizeof s,
      "glm::kernels::linearPrefillMmaKernel<glm::kernels::Bf16, glm::kernels::Bf16, %d, %d>", tileN,
      k);
  return s;
}

std::string decodeName(int mTiles, int unroll) {
  char s[128];
  std::snprintf(
      s, sizeof s,
      "glm::kernels::linearDecodeMmaKernel<glm::kernels::Bf16, glm::kernels::Bf16, %d, %d>", mTiles,
      unroll);
  return s;
}

Status timeInstance(Suite &suite, const Kernels &k, const std::string &name,
                    const kernels::LaunchDims &d, const std::string &t, const std::string &w,
                    int64_t rows, int64_t in, int64_t out, const std::string &label, bool mma,
                    int reps);

/// Times one kernel of the family on a shape, with its grid rule, rotating over weight copies.
Status timeKernel(Suite &suite, const Kernels &k, LinearKernel kernel, const std::string &t,
                  const std::string &w, int64_t rows, int64_t in, int64_t out, const char *label,
                  int reps = 100) {
  return timeInstance(suite, k, kernels::linearKernelName(kernel, t, w),
                      kernels::linearLaunch(kernel, rows, in, out, suite.ctx().info().smCount), t,
                      w, rows, in, out, label,
                      kernel == LinearKernel::PrefillMma || kernel == LinearKernel::PrefillWgmma ||
                          kernel == LinearKernel::Tiled,
                      reps);
}

/// The mma.sync prefill kernel with tiles of 128 x tileN x k.
Status timePrefill(Suite &suite, const Kernels &k, int tileN, int kk, int64_t rows, int64_t in,
                   int64_t out, int reps) {
  return timeInstance(suite, k, prefillName(tileN, kk),
                      kernels::linearPrefillLaunch(rows, out, tileN, kk), kBf16, kBf16, rows, in,
                      out, "mma-" + std::to_string(tileN) + "x" + std::to_string(kk), true, reps);
}

/// The decode kernel with 16 x mTiles outputs per block and `unroll` chunks per step.
Status timeDecode(Suite &suite, const Kernels &k, int mTiles, int unroll, int64_t rows, int64_t in,
                  int64_t out) {
  return timeInstance(
      suite, k, decodeName(mTiles, unroll),
      kernels::linearDecodeLaunch(rows, out, suite.ctx().info().smCount, mTiles), kBf16, kBf16,
      rows, in, out, "decode-" + std::to_string(mTiles) + "x" + std::to_string(unroll), false, 100);
}

Status timeInstance(Suite &suite, const Kernels &k, const std::string &name,
                    const kernels::LaunchDims &d, const std::string &t, const std::string &w,
                    int64_t rows, int64_t in, int64_t out, const std::string &label, bool mma,
                    int reps) {
  const size_t tBytes = t == "float" ? 4 : 2;
  const size_t wBytes = w == "float" ? 4 : w == kFp8 ? 1 : 2;
  GLM_ASSIGN_OR_RETURN(std::vector<cuda::DeviceMemory> weights,
                       weightCopies(suite, static_cast<size_t>(in * out) * wBytes));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory x, suite.random(rows * in * tBytes / 2, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory y, suite.ctx().allocate(rows * out * tBytes));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory scales,
                       suite.ctx().allocate(((out + 127) / 128) * ((in + 127) / 128) * 4));
  GLM_CU(&suite.ctx().driver(), cuMemsetD8(scales.ptr(), 0, scales.bytes()));
  const cuda::CUfunction fn = k.get(name);
  size_t next = 0;
  Row row;
  row.kernel = std::string("linear<") + (t == "float" ? "f32" : "bf16") + "," +
               (w == "float" ? "f32"
                : w == kFp8  ? "fp8"
                             : "bf16") +
               "> " + label;
  row.shape = shapeName(rows, in, out);
  row.bytes = static_cast<double>(in * out * wBytes + (rows * in + rows * out) * tBytes) +
              (w == kFp8 ? static_cast<double>(scales.bytes()) : 0.0);
  row.flops = 2.0 * rows * in * out;
  row.bound = mma ? "mma" : "bw";
  GLM_RETURN_IF_ERROR(suite.time(
      [&] {
        const cuda::DeviceMemory &wm = weights[next++ % weights.size()];
        const kernels::LinearGpuArgs args{reinterpret_cast<const void *>(x.ptr()),
                                          reinterpret_cast<const void *>(wm.ptr()),
                                          reinterpret_cast<const float *>(scales.ptr()),
                                          nullptr,
                                          reinterpret_cast<void *>(y.ptr()),
                                          rows,
                                          in,
                                          out,
                                          0};
        return suite.ctx().launch(fn, d.grid, d.block, d.sharedMemory, args);
      },
      row, reps));
  char note[64];
  std::snprintf(note, sizeof note, "(%u blocks x %u)", d.grid[0] * d.grid[1], d.block[0]);
  row.note = note;
  suite.add(row);
  return Status::success();
}

/// cuBLAS's bf16 GEMM on the same shape and weight rotation; returns its FLOP/s. A `ceiling`
/// (the matrix rate rows are judged by) is timed whatever --only keeps.
Expected<double> timeCublas(Suite &suite, cuda::Cublas &cublas, int64_t rows, int64_t in,
                            int64_t out, bool bw, int reps = 100, bool ceiling = false) {
  GLM_ASSIGN_OR_RETURN(std::vector<cuda::DeviceMemory> weights,
                       weightCopies(suite, static_cast<size_t>(in * out) * 2));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory x, suite.random(rows * in, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory y, suite.ctx().allocate(rows * out * 2));
  size_t next = 0;
  Row row;
  row.kernel = "cublasGemmEx bf16";
  row.shape = shapeName(rows, in, out);
  row.bytes = static_cast<double>(in * out * 2 + (rows * in + rows * out) * 2);
  row.flops = 2.0 * rows * in * out;
  row.bound = bw ? "bw" : "mma";
  row.note = "(reference)";
  auto launch = [&] {
    return cublas.linear(x.ptr(), weights[next++ % weights.size()].ptr(), y.ptr(), rows, in, out);
  };
  GLM_RETURN_IF_ERROR(ceiling ? suite.timeCeiling(launch, row, reps)
                              : suite.time(launch, row, reps));
  suite.add(row);
  return row.flops / (row.medianUs * 1e-6);
}

struct Product {
  int64_t in, out;
};

} // namespace

Status addLinearBenches(Suite &suite) {
  const glm53::Glm53Config &m = suite.model();
  // KDA q/k/v (Flash: 4096 -> 8192), KDA o_proj, DSA q_b (1536 -> 16384), dense MLP gate (4096 ->
  // 12288), lm_head (4096 -> 154880).
  const Product qkv{m.hiddenSize, m.kdaProjDim()}, oProj{m.kdaProjDim(), m.hiddenSize};
  const Product qB{m.qLoraRank, mlaQueryDim(m)}, denseGate{m.hiddenSize, m.intermediateSize};
  const Product lmHead{m.hiddenSize, m.vocabSize};
  const Product decodeProducts[] = {qkv, oProj, qB, denseGate, lmHead};
  const Product prefillProducts[] = {qkv, oProj, denseGate};
  const bool wgmma = suite.ctx().info().arch == "sm_90a";
  const int decodeSizes[][2] = {{2, 2}, {4, 1}, {2, 4}};
  const int prefillSizes[][2] = {{128, 32}, {128, 64}, {256, 32}, {256, 64}};
  Kernels k;
  for (const auto &d : decodeSizes) {
    k.names.push_back(decodeName(d[0], d[1]));
  }
  for (const auto &p : prefillSizes) {
    k.names.push_back(prefillName(p[0], p[1]));
  }
  if (wgmma) {
    k.names.push_back(kernels::linearKernelName(LinearKernel::PrefillWgmma, kBf16, kBf16));
  }
  for (const std::string &w : {kBf16, kFp8}) {
    k.names.push_back(kernels::linearKernelName(LinearKernel::Gemv, "float", w));
  }
  k.names.push_back(kernels::linearKernelName(LinearKernel::Gemv, kBf16, kFp8));
  k.names.push_back(kernels::linearKernelName(LinearKernel::Gemv, "float", "float"));
  k.names.push_back(kernels::linearKernelName(LinearKernel::Tiled, "float", kBf16));
  GLM_ASSIGN_OR_RETURN(k.module, suite.compile(R"(#include "kernels/linear/linear.cuh")", k.names));
  // Without cuBLAS the bench still runs; its reference rows are left out.
  std::unique_ptr<cuda::Cublas> cublas;
  if (Expected<std::unique_ptr<cuda::Cublas>> opened = cuda::Cublas::open(suite.ctx().stream());
      opened.ok()) {
    cublas = std::move(opened).value();
  } else {
    std::fprintf(stderr, "linear bench: %s; its rows are left out\n",
                 opened.status().toString().c_str());
  }

  // The matrix ceiling first: cuBLAS at 8192^3.
  if (cublas) {
    GLM_ASSIGN_OR_RETURN(suite.matrixFlopsPerS,
                         timeCublas(suite, *cublas, 8192, 8192, 8192, false, 20, true));
  }

  // A product too small to cost anything but the launch: the fixed cost under these timers.
  GLM_RETURN_IF_ERROR(timeInstance(
      suite, k, decodeName(2, 2), kernels::linearDecodeLaunch(1, 32, suite.ctx().info().smCount),
      kBf16, kBf16, 1, 128, 32, "decode-2x2 (launch floor)", false, 100));

  // Decode: batch 1, 4 and 16 (a verify window) on every projection, in the block shapes the rule
  // chooses between (decode-2x2 = DecodeMma, decode-4x1 = DecodeMmaWide) and one more.
  for (int64_t rows : {1, 4, 16}) {
    for (const Product &p : decodeProducts) {
      for (const auto &d : decodeSizes) {
        GLM_RETURN_IF_ERROR(timeDecode(suite, k, d[0], d[1], rows, p.in, p.out));
      }
      if (cublas) {
        GLM_RETURN_IF_ERROR(timeCublas(suite, *cublas, rows, p.in, p.out, true).status());
      }
    }
  }
  // The other weight and activation types' decode kernel, at batch 1, on KDA q/k/v.
  GLM_RETURN_IF_ERROR(
      timeKernel(suite, k, LinearKernel::Gemv, kBf16, kFp8, 1, qkv.in, qkv.out, "gemv"));
  GLM_RETURN_IF_ERROR(
      timeKernel(suite, k, LinearKernel::Gemv, "float", kBf16, 1, qkv.in, qkv.out, "gemv"));
  GLM_RETURN_IF_ERROR(
      timeKernel(suite, k, LinearKernel::Gemv, "float", "float", 1, qkv.in, qkv.out, "gemv"));

  // Where decode hands over to prefill: 32 to 256 rows, on KDA q/k/v.
  for (int64_t rows : {32, 64, 128, 256}) {
    for (const auto &d : {decodeSizes[0], decodeSizes[1]}) {
      GLM_RETURN_IF_ERROR(timeDecode(suite, k, d[0], d[1], rows, qkv.in, qkv.out));
    }
    if (wgmma) {
      GLM_RETURN_IF_ERROR(timeKernel(suite, k, LinearKernel::PrefillWgmma, kBf16, kBf16, rows,
                                     qkv.in, qkv.out, "prefill-wgmma"));
    }
    GLM_RETURN_IF_ERROR(timePrefill(suite, k, 128, 32, rows, qkv.in, qkv.out, 100));
    if (cublas) {
      GLM_RETURN_IF_ERROR(timeCublas(suite, *cublas, rows, qkv.in, qkv.out, true).status());
    }
  }

  // Prefill: 2048-row chunks, and 8192^3 beside the ceiling.
  for (const Product &p : prefillProducts) {
    if (wgmma) {
      GLM_RETURN_IF_ERROR(timeKernel(suite, k, LinearKernel::PrefillWgmma, kBf16, kBf16, 2048, p.in,
                                     p.out, "prefill-wgmma", 30));
    }
    for (const auto &pr : prefillSizes) {
      GLM_RETURN_IF_ERROR(timePrefill(suite, k, pr[0], pr[1], 2048, p.in, p.out, 30));
    }
    if (cublas) {
      GLM_RETURN_IF_ERROR(timeCublas(suite, *cublas, 2048, p.in, p.out, false, 30).status());
    }
  }
  if (wgmma) {
    GLM_RETURN_IF_ERROR(timeKernel(suite, k, LinearKernel::PrefillWgmma, kBf16, kBf16, 8192, 8192,
                                   8192, "prefill-wgmma", 20));
  }
  for (const auto &pr : {prefillSizes[0], prefillSizes[3]}) {
    GLM_RETURN_IF_ERROR(timePrefill(suite, k, pr[0], pr[1], 8192, 8192, 8192, 20));
  }
  GLM_RETURN_IF_ERROR(
      timeKernel(suite, k, LinearKernel::Tiled, "float", kBf16, 2048, qkv.in, qkv.out, "tiled", 5));
  return Status::success();
}

} // namespace glm::bench

namespace glm::bench {

namespace {

/// A quantized weight's kernel: its instance, grid, and whether it is judged by the matrix rate.
struct QuantInstance {
  std::string name, label;
  kernels::LaunchDims dims;
  bool mma;
};

/// Times `inst` on [rows x in]·[in x out] with weights in `format` ("q4" or "fp8", laid out as
/// kernels/common/DenseFormats.h defines them, rotated over enough copies that the L2 does not
/// serve them). Few-row products run as a CUDA graph of `graphCount` launches, the row's time one
/// launch's share, as the engine's captured programs run them; the bytes are the codes, their
/// scales and the activations read and written.
Status timeQuant(Suite &suite, const Kernels &k, const QuantInstance &inst,
                 const std::string &format, int64_t rows, int64_t in, int64_t out, int graphCount,
                 int reps) {
  const bool q4 = format == "q4";
  const size_t wBytes =
      static_cast<size_t>(q4 ? kernels::q4Bytes(1, out, in) : kernels::fp8Bytes(1, out, in));
  const size_t codeBytes = static_cast<size_t>(q4 ? out * in / 2 : out * in);
  const size_t sideBytes =
      static_cast<size_t>(q4 ? out * (in / kernels::kQ4Group) * 4
                             : kernels::fp8BlocksOf(out) * kernels::fp8BlocksOf(in) * 4);
  GLM_ASSIGN_OR_RETURN(std::vector<cuda::DeviceMemory> weights, weightCopies(suite, wBytes));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory x, suite.random(rows * in, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory y, suite.ctx().allocate(rows * out * 2));
  const cuda::CUfunction fn = k.get(inst.name);
  Row row;
  row.kernel = "linear<bf16," + format + "> " + inst.label;
  row.shape = shapeName(rows, in, out);
  row.bytes = static_cast<double>(codeBytes + sideBytes + (rows * in + rows * out) * 2);
  row.flops = 2.0 * rows * in * out;
  row.bound = inst.mma ? "mma" : "bw";
  auto launch = [&](size_t i) {
    const cuda::DeviceMemory &wm = weights[i % weights.size()];
    const kernels::LinearGpuArgs args{
        reinterpret_cast<const void *>(x.ptr()),
        reinterpret_cast<const void *>(wm.ptr()),
        q4 ? nullptr
           : reinterpret_cast<const float *>(wm.ptr() + kernels::fp8ScalesOffset(1, out, in)),
        nullptr,
        reinterpret_cast<void *>(y.ptr()),
        rows,
        in,
        out,
        0,
        q4 ? reinterpret_cast<const uint32_t *>(wm.ptr() + kernels::q4GroupsOffset(1, out, in))
           : nullptr};
    return suite.ctx().launch(fn, inst.dims.grid, inst.dims.block, inst.dims.sharedMemory, args);
  };
  char note[96];
  if (graphCount > 1) {
    GLM_RETURN_IF_ERROR(suite.timeGraph(
        graphCount, [&](int i) { return launch(static_cast<size_t>(i)); }, row, reps));
    row.medianUs /= graphCount;
    row.spreadUs /= graphCount;
    std::snprintf(note, sizeof note, "(%u blocks x %u; per launch of a %d-launch graph)",
                  inst.dims.grid[0] * inst.dims.grid[1], inst.dims.block[0], graphCount);
  } else {
    size_t next = 0;
    GLM_RETURN_IF_ERROR(suite.time([&] { return launch(next++); }, row, reps));
    std::snprintf(note, sizeof note, "(%u blocks x %u)", inst.dims.grid[0] * inst.dims.grid[1],
                  inst.dims.block[0]);
  }
  row.note = note;
  suite.add(row);
  return Status::success();
}

/// The plain bf16 decode kernel the rule picks, in the same graph timing, for comparison.
Status timeBf16Graph(Suite &suite, const Kernels &k, int64_t rows, int64_t in, int64_t out,
                     int graphCount) {
  const int sms = suite.ctx().info().smCount;
  const LinearKernel kernel = kernels::linearKernelFor(true, rows, out, "", sms);
  const kernels::LaunchDims d = kernels::linearLaunch(kernel, rows, in, out, sms);
  GLM_ASSIGN_OR_RETURN(std::vector<cuda::DeviceMemory> weights,
                       weightCopies(suite, static_cast<size_t>(in * out) * 2));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory x, suite.random(rows * in, true));
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory y, suite.ctx().allocate(rows * out * 2));
  const cuda::CUfunction fn =
      k.get(kernel == LinearKernel::DecodeMmaWide ? decodeName(4, 1) : decodeName(2, 2));
  Row row;
  row.kernel = std::string("linear<bf16,bf16> ") +
               (kernel == LinearKernel::DecodeMmaWide ? "decode-4x1" : "decode-2x2");
  row.shape = shapeName(rows, in, out);
  row.bytes = static_cast<double>(in * out * 2 + (rows * in + rows * out) * 2);
  row.flops = 2.0 * rows * in * out;
  GLM_RETURN_IF_ERROR(suite.timeGraph(
      graphCount,
      [&](int i) {
        const kernels::LinearGpuArgs args{
            reinterpret_cast<const void *>(x.ptr()),
            reinterpret_cast<const void *>(weights[static_cast<size_t>(i) % weights.size()].ptr()),
            nullptr,
            nullptr,
            reinterpret_cast<void *>(y.ptr()),
            rows,
            in,
            out,
            0,
            nullptr};
        return suite.ctx().launch(fn, d.grid, d.block, d.sharedMemory, args);
      },
      row, 100));
  row.medianUs /= graphCount;
  row.spreadUs /= graphCount;
  row.note = "(per launch of a " + std::to_string(graphCount) + "-launch graph; reference)";
  suite.add(row);
  return Status::success();
}

std::string quantType(const std::string &format) {
  return format == "q4" ? "glm::kernels::Q4Groups" : kFp8;
}

/// The decode-quant kernel with a ring of `stages` slots a warp, and its grid.
std::string stagesName(const std::string &w, int stages) {
  return "glm::kernels::linearDecodeQuantKernel<glm::kernels::Bf16, " + w + ", 2, " +
         std::to_string(stages) + ">";
}

constexpr LinearKernel kSplits[] = {LinearKernel::DecodeQuantSplit2,
                                    LinearKernel::DecodeQuantSplit4,
                                    LinearKernel::DecodeQuantSplit8};

const char *quantLabel(LinearKernel kernel) {
  return kernel == LinearKernel::DecodeQuant         ? "decode-quant-2x"
         : kernel == LinearKernel::DecodeQuantWide   ? "decode-quant-4x"
         : kernel == LinearKernel::DecodeQuantSplit2 ? "decode-quant-2x split 2"
         : kernel == LinearKernel::DecodeQuantSplit4 ? "decode-quant-2x split 4"
                                                     : "decode-quant-2x split 8";
}

} // namespace

Status addLinearQuantBenches(Suite &suite) {
  // GLM-5.3-Flash's projections per rank (out x in) at TP 2 and TP 1: KDA/DSA 4096 x 4096, q_b / k
  // 12288 x 4096, o_proj at TP 2 4096 x 8192, 8192 x 4096, dense gate/up at TP 2 6144 x 4096,
  // dense down at TP 2 4096 x 6144, shared expert gate/up 2048 / 1024 x 4096, its down 4096 x
  // 1024, q_a 1536 x 4096, 576 x 4096, lm_head (per rank at TP 2) 77440 x 4096.
  const Product shapes[] = {{4096, 4096}, {4096, 12288}, {8192, 4096}, {4096, 8192},
                            {4096, 6144}, {6144, 4096},  {4096, 2048}, {4096, 1024},
                            {1024, 4096}, {4096, 1536},  {4096, 576},  {4096, 77440}};
  const int sms = suite.ctx().info().smCount;
  Kernels k;
  for (const std::string &format : {std::string("q4"), std::string("fp8")}) {
    const std::string w = quantType(format);
    k.names.push_back(kernels::linearKernelName(LinearKernel::DecodeQuant, kBf16, w));
    k.names.push_back(kernels::linearKernelName(LinearKernel::DecodeQuantWide, kBf16, w));
    k.names.push_back(kernels::linearKernelName(LinearKernel::PrefillMma, kBf16, w));
    k.names.push_back(kernels::linearKernelName(LinearKernel::Gemv, "float", w));
  }
  for (const std::string &format : {std::string("q4"), std::string("fp8")}) {
    for (LinearKernel kernel : kSplits) {
      k.names.push_back(kernels::linearKernelName(kernel, kBf16, quantType(format)));
    }
    for (int stages : {2, 6}) {
      k.names.push_back(stagesName(quantType(format), stages));
    }
  }
  k.names.push_back(decodeName(2, 2));
  k.names.push_back(decodeName(4, 1));
  const bool wgmma = suite.ctx().info().arch == "sm_90a";
  if (wgmma) {
    k.names.push_back(kernels::linearKernelName(LinearKernel::PrefillWgmma, kBf16, kBf16));
  }
  k.names.push_back(prefillName(128, 32));
  GLM_ASSIGN_OR_RETURN(k.module, suite.compile(R"(#include "kernels/linear/linear.cuh")", k.names));
  std::unique_ptr<cuda::Cublas> cublas;
  if (Expected<std::unique_ptr<cuda::Cublas>> opened = cuda::Cublas::open(suite.ctx().stream());
      opened.ok()) {
    cublas = std::move(opened).value();
    GLM_ASSIGN_OR_RETURN(suite.matrixFlopsPerS,
                         timeCublas(suite, *cublas, 8192, 8192, 8192, false, 20, true));
  }
  constexpr int kGraph = 20;

  // Decode: rows 1, 4, 16: the 32- and 64-output blocks, K split over clusters where the plain
  // blocks number fewer than the SMs, the ring's depth at 1 and 16 rows; the bf16 kernel beside.
  for (int64_t rows : {1, 4, 16}) {
    for (const Product &p : shapes) {
      for (const std::string &format : {std::string("q4"), std::string("fp8")}) {
        const std::string w = quantType(format);
        const LinearKernel chosen = kernels::linearQuantKernelFor(true, rows, p.out, sms);
        std::vector<LinearKernel> kernelsToTime = {LinearKernel::DecodeQuant,
                                                   LinearKernel::DecodeQuantWide};
        const int64_t blocks = ((rows + 15) / 16) * ((p.out + 31) / 32);
        if (blocks < sms) {
          kernelsToTime.insert(kernelsToTime.end(), std::begin(kSplits), std::end(kSplits));
        }
        // Sized for this device's shared memory (as an sm_90a plan is) and, where the rows'
        // activations make the rings large, for sm_121a's 99 KB, so that the H200 shows the
        // warps a GB10 plan gets.
        const kernels::LinearQuantSizing sizing{format == "q4",
                                                suite.ctx().info().sharedMemoryPerBlockOptin};
        for (LinearKernel kernel : kernelsToTime) {
          const std::string label =
              std::string(quantLabel(kernel)) + (kernel == chosen ? " *" : "");
          GLM_RETURN_IF_ERROR(
              timeQuant(suite, k,
                        {kernels::linearKernelName(kernel, kBf16, w), label,
                         kernels::linearLaunch(kernel, rows, p.in, p.out, sms, sizing), false},
                        format, rows, p.in, p.out, kGraph, 100));
          if (rows == 16 && kernel == chosen) {
            GLM_RETURN_IF_ERROR(timeQuant(
                suite, k,
                {kernels::linearKernelName(kernel, kBf16, w), label + " at 99 KB",
                 kernels::linearLaunch(kernel, rows, p.in, p.out, sms,
                                       {sizing.q4, kernels::kLinearQuantMaxShared}),
                 false},
                format, rows, p.in, p.out, kGraph, 100));
          }
        }
        if (rows != 4 && blocks >= sms) {
          for (int stages : {2, 6}) {
            GLM_RETURN_IF_ERROR(timeQuant(
                suite, k,
                {stagesName(w, stages), "decode-quant-2x " + std::to_string(stages) + " stages",
                 kernels::linearDecodeQuantStagesLaunch(rows, p.in, p.out, sms, stages, sizing),
                 false},
                format, rows, p.in, p.out, kGraph, 100));
          }
        }
      }
      if (rows == 1) {
        GLM_RETURN_IF_ERROR(timeBf16Graph(suite, k, rows, p.in, p.out, kGraph));
      }
    }
  }
  // f32 plans' decode (the exact FMA gemv) at batch 1, two shapes.
  for (const Product &p : {shapes[0], shapes[1]}) {
    for (const std::string &format : {std::string("q4"), std::string("fp8")}) {
      const std::string w = quantType(format);
      Kernels &kk = k;
      const kernels::LaunchDims d = kernels::linearLaunch(LinearKernel::Gemv, 1, p.in, p.out, sms);
      // Activations are read as f32: twice the bf16 bytes, a rounding of the row count's cost.
      GLM_RETURN_IF_ERROR(timeQuant(suite, kk,
                                    {kernels::linearKernelName(LinearKernel::Gemv, "float", w),
                                     "gemv (f32 activations; bytes as bf16)", d, false},
                                    format, 1, p.in, p.out, kGraph, 100));
    }
  }
  // Where decode hands over to prefill: 64 and 128 rows at two shapes.
  for (int64_t rows : {64, 128}) {
    for (const Product &p : {shapes[0], shapes[1]}) {
      for (const std::string &format : {std::string("q4"), std::string("fp8")}) {
        const std::string w = quantType(format);
        for (LinearKernel kernel : {LinearKernel::DecodeQuantWide, LinearKernel::PrefillMma}) {
          GLM_RETURN_IF_ERROR(
              timeQuant(suite, k,
                        {kernels::linearKernelName(kernel, kBf16, w),
                         kernel == LinearKernel::PrefillMma ? "prefill-mma" : "decode-quant-4x",
                         kernels::linearLaunch(kernel, rows, p.in, p.out, sms,
                                               {format == "q4",
                                                suite.ctx().info().sharedMemoryPerBlockOptin}),
                         kernel == LinearKernel::PrefillMma},
                        format, rows, p.in, p.out, kGraph, 50));
        }
      }
    }
  }
  // Prefill: 2048-row chunks, against the bf16 prefill kernels on the same shapes.
  for (const Product &p : {shapes[0], shapes[1], shapes[2], shapes[3], shapes[5], shapes[11]}) {
    for (const std::string &format : {std::string("q4"), std::string("fp8")}) {
      GLM_RETURN_IF_ERROR(
          timeQuant(suite, k,
                    {kernels::linearKernelName(LinearKernel::PrefillMma, kBf16, quantType(format)),
                     "prefill-mma (decoded tile)",
                     kernels::linearLaunch(LinearKernel::PrefillMma, 2048, p.in, p.out, sms), true},
                    format, 2048, p.in, p.out, 1, p.out > 20000 ? 5 : 20));
    }
    if (wgmma) {
      GLM_RETURN_IF_ERROR(timeKernel(suite, k, LinearKernel::PrefillWgmma, kBf16, kBf16, 2048, p.in,
                                     p.out, "prefill-wgmma", p.out > 20000 ? 5 : 20));
    }
    GLM_RETURN_IF_ERROR(timePrefill(suite, k, 128, 32, 2048, p.in, p.out, p.out > 20000 ? 5 : 20));
  }
  return Status::success();
}

} // namespace glm::bench
