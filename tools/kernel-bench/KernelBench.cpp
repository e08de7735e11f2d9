// glm-kernel-bench: every CUDA kernel at a GLM-5.3 checkpoint's dimensions (GLM-5.3-Flash's by
// default), timed with events, against the device's measured copy bandwidth and matrix rate
// (issue: decode kernels >= 75% of copy bandwidth at batch 1; prefill matmuls >= 60% of cuBLAS on
// the same shapes).
//
//   glm-kernel-bench [--config DIR] [--family
//   linear|linear_quant|kda|sparse_attention|elementwise|moe|exl3_moe]
//                    [--only TEXT] [--markdown]
//
// --config names a checkpoint directory or its config.json; every model dimension comes from it.
// Without it, the glm53-flash fixture the GPU tests use: $GLM_FIXTURES_DIR/glm53-flash, else the
// build's fixtures directory. The config is loaded and its sizes printed before the GPU is touched,
// so that a machine without a GPU still checks a config.
//
// Exit status: 0 measured; 1 a failure while measuring (named on stderr); 2 bad arguments or a
// config that does not load.
#include "runtime/cuda/Ceilings.h"
#include "tools/kernel-bench/Bench.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

using namespace glm;

namespace {

constexpr int kExitFailed = 1, kExitUsage = 2;

constexpr const char *kUsage =
    "usage: glm-kernel-bench [--config DIR] [--family NAME] [--only TEXT] [--markdown]\n"
    "  --config DIR   a checkpoint directory or its config.json (default: the glm53-flash\n"
    "                 fixture, $GLM_FIXTURES_DIR/glm53-flash or the build's fixtures)\n"
    "  --family NAME  linear, linear_quant, kda, sparse_attention, elementwise, moe or exl3_moe "
    "(default: all)\n"
    "  --only TEXT    time only the rows whose kernel and shape contain TEXT (for a profiler:\n"
    "                 ncu then sees that row's launches alone)\n"
    "  --markdown     the table as markdown\n";

const struct {
  const char *name;
  Status (*add)(bench::Suite &);
} kFamilies[] = {{"linear", bench::addLinearBenches},
                 {"linear_quant", bench::addLinearQuantBenches},
                 {"kda", bench::addKdaBenches},
                 {"sparse_attention", bench::addSparseAttentionBenches},
                 {"elementwise", bench::addElementwiseBenches},
                 {"moe", bench::addMoeBenches},
                 {"exl3_moe", bench::addExl3MoeBenches}};

/// The fixture the GPU tests size their kernels by (tests/gpu/support/GpuTest.cpp), found the same
/// way: the environment overrides the directory compiled in.
std::filesystem::path defaultConfig() {
  const char *env = std::getenv("GLM_FIXTURES_DIR");
  return std::filesystem::path(env != nullptr && *env != '\0' ? env : GLM_FIXTURES_DIR) /
         "glm53-flash";
}

} // namespace

int main(int argc, char **argv) {
  std::string family;
  std::string configArg;
  std::string only;
  bool markdown = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--family" || arg == "--config" || arg == "--only") {
      if (i + 1 == argc) {
        std::fprintf(stderr, "glm-kernel-bench: %s needs a value\n%s", arg.c_str(), kUsage);
        return kExitUsage;
      }
      (arg == "--family" ? family : arg == "--config" ? configArg : only) = argv[++i];
    } else if (arg == "--markdown") {
      markdown = true;
    } else if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      std::fprintf(stderr, "glm-kernel-bench: unknown argument '%s'\n%s", arg.c_str(), kUsage);
      return kExitUsage;
    }
  }
  if (!family.empty()) {
    bool known = false;
    for (const auto &f : kFamilies) {
      known = known || family == f.name;
    }
    if (!known) {
      // Otherwise a misspelt family would measure nothing and exit 0.
      std::fprintf(stderr, "glm-kernel-bench: unknown family '%s'\n%s", family.c_str(), kUsage);
      return kExitUsage;
    }
  }

  // The config first, before the GPU: a bad one is reported as such on any machine.
  const std::filesystem::path configPath =
      configArg.empty() ? defaultConfig() : std::filesystem::path(configArg);
  Expected<glm53::Glm53Config> model = glm53::loadGlm53Config(configPath);
  if (!model.ok()) {
    // The message names the file that was read (or looked for).
    std::fprintf(stderr, "glm-kernel-bench: %s%s\n", model.status().message().c_str(),
                 configArg.empty() ? " (the default config, the glm53-flash fixture; set "
                                     "GLM_FIXTURES_DIR or pass --config DIR)"
                                   : "");
    return kExitUsage;
  }
  std::error_code ec;
  const std::filesystem::path configFile =
      std::filesystem::is_directory(configPath, ec) ? configPath / "config.json" : configPath;
  std::printf("config: %s (model_type %s, hidden %lld)\n", configFile.lexically_normal().c_str(),
              model->modelType.c_str(), static_cast<long long>(model->hiddenSize));
  std::printf("%s\n%s\n", bench::sizesLine(*model).c_str(), bench::constantsLine(*model).c_str());
  std::fflush(stdout); // before any CUDA error on stderr

  Expected<std::unique_ptr<cuda::CudaContext>> ctx = cuda::CudaContext::create(0);
  if (!ctx.ok()) {
    std::fprintf(stderr, "glm-kernel-bench: %s\n", ctx.status().toString().c_str());
    return kExitFailed;
  }
  bench::Suite suite(**ctx, *model);
  suite.setOnly(only);
  // The bandwidth ceiling: a 2 GiB device-to-device copy, counting bytes read and written.
  if (Expected<double> copy = cuda::measureCopyBandwidth(**ctx, size_t{2} << 30, 20); copy.ok()) {
    suite.copyBytesPerS = *copy;
  } else {
    std::fprintf(stderr, "glm-kernel-bench: %s\n", copy.status().toString().c_str());
    return kExitFailed;
  }
  int rc = 0;
  for (const auto &f : kFamilies) {
    if (!family.empty() && family != f.name) {
      continue;
    }
    if (Status s = f.add(suite); !s.ok()) {
      std::fprintf(stderr, "glm-kernel-bench: %s: %s\n", f.name, s.toString().c_str());
      rc = kExitFailed;
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
