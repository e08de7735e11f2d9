// The GPU tests' shared device and helpers.
#include "tests/gpu/support/GpuTest.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <numeric>

namespace glm::testing {

cuda::CudaContext *gpu(std::string *why) {
  static Expected<std::unique_ptr<cuda::CudaContext>> context = cuda::CudaContext::create(0);
  if (!context.ok()) {
    if (why != nullptr) {
      *why = context.status().toString();
    }
    return nullptr;
  }
  return context.value().get();
}

Expected<std::unique_ptr<cuda::Module>> compileForGpu(const std::string &source,
                                                      const std::vector<std::string> &names) {
  std::string why;
  if (gpu(&why) == nullptr) {
    return Status(StatusCode::Unavailable, why);
  }
  GLM_ASSIGN_OR_RETURN(kernels::CompiledModule module,
                       kernels::compileKernels(source, names, gpu()->info().arch));
  return gpu()->load(module.cubin, module.entries);
}

cuda::Module *cachedModule(const std::string &source, const std::vector<std::string> &names) {
  static std::map<std::string, std::unique_ptr<cuda::Module>> modules;
  std::string key = source;
  for (const std::string &name : names) {
    key += "\n" + name;
  }
  std::unique_ptr<cuda::Module> &m = modules[key];
  if (m == nullptr) {
    Expected<std::unique_ptr<cuda::Module>> compiled = compileForGpu(source, names);
    EXPECT_TRUE(compiled.ok()) << compiled.status().toString();
    if (!compiled.ok()) {
      return nullptr;
    }
    m = std::move(compiled).value();
  }
  return m.get();
}

cuda::Module *cachedModule(const std::string &source,
                           const std::vector<kernels::NamedLaunch> &launches) {
  std::vector<std::string> names;
  for (const kernels::NamedLaunch &l : launches) {
    names.push_back(l.name);
  }
  return cachedModule(source, names);
}

Expected<cuda::DeviceMemory> poisoned(size_t bytes) {
  GLM_ASSIGN_OR_RETURN(cuda::DeviceMemory m, gpu()->allocate(bytes));
  GLM_CU(&gpu()->driver(), cuMemsetD8(m.ptr(), 0xFF, bytes));
  return m;
}

Routing randomRouting(SplitMix64 &rng, int64_t tokens, int64_t topK, int64_t globalExperts) {
  Routing r;
  r.ids.resize(tokens * topK);
  r.weights.resize(tokens * topK);
  std::vector<int32_t> pool(globalExperts);
  for (int64_t t = 0; t < tokens; ++t) {
    std::iota(pool.begin(), pool.end(), 0);
    for (int64_t k = 0; k < topK; ++k) {
      const int64_t j = k + static_cast<int64_t>(rng.below(globalExperts - k));
      std::swap(pool[k], pool[j]);
      r.ids[t * topK + k] = pool[k];
      r.weights[t * topK + k] = kernels::roundToBf16(0.05f + 0.55f * rng.uniform());
    }
  }
  return r;
}

double relativeError(const std::vector<float> &a, const std::vector<float> &b) {
  if (a.size() != b.size()) {
    return std::numeric_limits<double>::infinity();
  }
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) && std::isfinite(b[i])) {
      return std::numeric_limits<double>::infinity();
    }
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    ref += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(ref), 1e-30);
}

namespace {

const glm53::Glm53Config &fixtureConfig(const char *name) {
  const char *env = std::getenv("GLM_FIXTURES_DIR");
  const std::filesystem::path dir =
      std::filesystem::path(env != nullptr ? env : GLM_FIXTURES_DIR) / name;
  Expected<glm53::Glm53Config> config = glm53::loadGlm53Config(dir);
  if (!config.ok()) {
    // Every kernel test depends on it: stop with the reason rather than test made-up sizes.
    std::fprintf(stderr, "%s\n", config.status().toString().c_str());
    std::abort();
  }
  static std::vector<std::unique_ptr<glm53::Glm53Config>> kept;
  kept.push_back(std::make_unique<glm53::Glm53Config>(std::move(config).value()));
  return *kept.back();
}

} // namespace

const glm53::Glm53Config &flashConfig() {
  static const glm53::Glm53Config &config = fixtureConfig("glm53-flash");
  return config;
}

const glm53::Glm53Config &tinyConfig() {
  static const glm53::Glm53Config &config = fixtureConfig("glm53-tiny");
  return config;
}

std::vector<uint16_t> toBf16(const std::vector<float> &values) {
  std::vector<uint16_t> out(values.size());
  std::transform(values.begin(), values.end(), out.begin(), kernels::floatToBf16);
  return out;
}

Expected<cuda::DeviceMemory> upload(const std::vector<float> &values, bool bf16) {
  return bf16 ? toDevice(toBf16(values)) : toDevice(values);
}

Expected<std::vector<float>> download(const cuda::DeviceMemory &m, size_t count, bool bf16) {
  if (!bf16) {
    return fromDevice<float>(m, count);
  }
  GLM_ASSIGN_OR_RETURN(std::vector<uint16_t> b, fromDevice<uint16_t>(m, count));
  return widen(b);
}

std::vector<float> widen(const std::vector<uint16_t> &bf16) {
  std::vector<float> out(bf16.size());
  for (size_t i = 0; i < bf16.size(); ++i) {
    out[i] = kernels::bf16ToFloat(bf16[i]);
  }
  return out;
}

} // namespace glm::testing
