// glm-kernel-bench: every CUDA kernel at GLM-5.3-Flash's dimensions, timed with events, against
// the device's measured copy bandwidth and matrix rate (issue: decode kernels >= 75% of copy
// bandwidth at batch 1; prefill matmuls >= 60% of cuBLAS on the same shapes).
//
//   glm-kernel-bench [--family linear|kda|sparse_attention|elementwise|moe|exl3_moe] [--markdown]
#include "runtime/cuda/Ceilings.h"
#include "tools/kernel-bench/Bench.h"

#include <cstdio>
#include <cstring>
#include <string>

using namespace glm;

int main(int argc, char **argv) {
  std::string family;
  bool markdown = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--family") == 0 && i + 1 < argc) {
      family = argv[++i];
    } else if (std::strcmp(argv[i], "--markdown") == 0) {
      markdown = true;
    } else {
      std::fprintf(stderr, "usage: glm-kernel-bench [--family NAME] [--markdown]\n");
      return 2;
    }
  }
  Expected<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::create(0);
  if (!ctx.ok()) {
    std::fprintf(stderr, "glm-kernel-bench: %s\n", ctx.status().toString().c_str());
    return 1;
  }
  bench::Suite suite(**ctx);
  // The bandwidth ceiling: a 2 GiB device-to-device copy, counting bytes read and written.
  if (Expected<double> copy = cuda::measureCopyBandwidth(**ctx, size_t{2} << 30, 20); copy.ok()) {
    suite.copyBytesPerS = *copy;
  } else {
    std::fprintf(stderr, "glm-kernel-bench: %s\n", copy.status().toString().c_str());
    return 1;
  }
  const struct {
    const char *name;
    Status (*add)(bench::Suite &);
  } families[] = {{"linear", bench::addLinearBenches},
                  {"kda", bench::addKdaBenches},
                  {"sparse_attention", bench::addSparseAttentionBenches},
                  {"elementwise", bench::addElementwiseBenches},
                  {"moe", bench::addMoeBenches},
                  {"exl3_moe", bench::addExl3MoeBenches}};
  int rc = 0;
  for (const auto &f : families) {
    if (!family.empty() && family != f.name) {
      continue;
    }
    if (Status s = f.add(suite); !s.ok()) {
      std::fprintf(stderr, "glm-kernel-bench: %s: %s\n", f.name, s.toString().c_str());
      rc = 1;
    }
  }
  const auto &info = (*ctx)->info();
  std::printf("%s (%s, %d SMs): copy %.0f GB/s (read + write), bf16 matrix %.0f TFLOP/s\n",
              info.name.c_str(), info.arch.c_str(), info.smCount, suite.copyBytesPerS / 1e9,
              suite.matrixFlopsPerS / 1e12);
  const char *fmt = markdown
                        ? "| %s | %s | %.1f ± %.1f | %.2f | %.0f | %.2f | %s %s |\n"
                        : "%-36s %-34s %9.1f ±%6.1f us %9.2f MB %8.0f GB/s %7.2f TF/s  %s %s\n";
  if (markdown) {
    std::printf("| kernel | shape | µs | MB | GB/s | TFLOP/s | of ceiling "
                "|\n|---|---|---|---|---|---|---|\n");
  }
  for (const bench::Row &r : suite.rows()) {
    const double s = r.medianUs * 1e-6;
    const double gbs = r.bytes / s / 1e9, tfs = r.flops / s / 1e12;
    char fraction[64];
    if (r.bound == "mma") {
      std::snprintf(fraction, sizeof fraction, "%.0f%% of matrix",
                    suite.matrixFlopsPerS > 0 ? 100.0 * r.flops / s / suite.matrixFlopsPerS : 0.0);
    } else {
      std::snprintf(fraction, sizeof fraction, "%.0f%% of copy",
                    100.0 * r.bytes / s / suite.copyBytesPerS);
    }
    std::printf(fmt, r.kernel.c_str(), r.shape.c_str(), r.medianUs, r.spreadUs, r.bytes / 1e6, gbs,
                tfs, fraction, r.note.c_str());
  }
  return rc;
}
