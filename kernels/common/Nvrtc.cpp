// Compiling kernel sources with NVRTC (loaded with dlopen) and caching the cubins by content hash.
#include "kernels/common/Nvrtc.h"

#include "base/Hash.h"
#include "kernels/common/KernelSources.h"

#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <unistd.h>

namespace glm::kernels {
namespace {

using nvrtcProgram = struct _nvrtcProgram *;

struct NvrtcApi {
  int (*version)(int *, int *);
  const char *(*getErrorString)(int);
  int (*createProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                       const char *const *);
  int (*destroyProgram)(nvrtcProgram *);
  int (*addNameExpression)(nvrtcProgram, const char *);
  int (*compileProgram)(nvrtcProgram, int, const char *const *);
  int (*getProgramLogSize)(nvrtcProgram, size_t *);
  int (*getProgramLog)(nvrtcProgram, char *);
  int (*getCubinSize)(nvrtcProgram, size_t *);
  int (*getCubin)(nvrtcProgram, char *);
  int (*getLoweredName)(nvrtcProgram, const char *, const char **);
};

Expected<const NvrtcApi *> api() {
  static NvrtcApi table;
  static Status loaded = Status::success();
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (const char *env = std::getenv("GLM_NVRTC")) {
      candidates.push_back(env);
    }
    for (const char *name :
         {"libnvrtc.so.13", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
          "/usr/local/cuda/lib64/libnvrtc.so"}) {
      candidates.push_back(name);
    }
    void *lib = nullptr;
    std::string errors;
    for (const std::string &name : candidates) {
      if ((lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) {
        break;
      }
      errors += strCat("\n  ", dlerror());
    }
    if (lib == nullptr) {
      loaded = Status(StatusCode::Unavailable,
                      strCat("cannot load NVRTC (the CUDA 13 toolkit's libnvrtc.so; set GLM_NVRTC "
                             "to its path):",
                             errors));
      return;
    }
    auto get = [&](auto &fn, const char *symbol) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, symbol));
      if (fn == nullptr && loaded.ok()) {
        loaded = Status(StatusCode::Unavailable, strCat("NVRTC has no ", symbol));
      }
    };
    get(table.version, "nvrtcVersion");
    get(table.getErrorString, "nvrtcGetErrorString");
    get(table.createProgram, "nvrtcCreateProgram");
    get(table.destroyProgram, "nvrtcDestroyProgram");
    get(table.addNameExpression, "nvrtcAddNameExpression");
    get(table.compileProgram, "nvrtcCompileProgram");
    get(table.getProgramLogSize, "nvrtcGetProgramLogSize");
    get(table.getProgramLog, "nvrtcGetProgramLog");
    get(table.getCubinSize, "nvrtcGetCUBINSize");
    get(table.getCubin, "nvrtcGetCUBIN");
    get(table.getLoweredName, "nvrtcGetLoweredName");
  });
  if (!loaded.ok()) {
    return loaded;
  }
  return &table;
}

std::filesystem::path cacheDir() {
  if (const char *env = std::getenv("GLM_KERNEL_CACHE")) {
    return std::string(env) == "off" ? std::filesystem::path() : std::filesystem::path(env);
  }
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg) {
    return std::filesystem::path(xdg) / "glmc" / "kernels";
  }
  if (const char *home = std::getenv("HOME"); home && *home) {
    return std::filesystem::path(home) / ".cache" / "glmc" / "kernels";
  }
  return {};
}

// A cache entry: the entry names, one per line, a blank line, then the cubin.
bool readCache(const std::filesystem::path &file, CompiledModule &out, size_t names) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return false;
  }
  std::string line;
  out.entries.clear();
  while (std::getline(in, line) && !line.empty()) {
    out.entries.push_back(line);
  }
  out.cubin.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return out.entries.size() == names && !out.cubin.empty();
}

void writeCache(const std::filesystem::path &file, const CompiledModule &module) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  // Write aside and rename, so that a concurrent reader never sees half an entry.
  const std::filesystem::path tmp = file.string() + strCat(".", getpid(), ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary);
    for (const std::string &e : module.entries) {
      out << e << '\n';
    }
    out << '\n';
    out.write(reinterpret_cast<const char *>(module.cubin.data()),
              static_cast<std::streamsize>(module.cubin.size()));
    if (!out) {
      std::filesystem::remove(tmp, ec);
      return; // a cache that cannot be written is no error
    }
  }
  std::filesystem::rename(tmp, file, ec);
}

} // namespace

Expected<std::string> nvrtcVersion() {
  GLM_ASSIGN_OR_RETURN(const NvrtcApi *nvrtc, api());
  int major = 0, minor = 0;
  nvrtc->version(&major, &minor);
  return strCat(major, ".", minor);
}

std::string kernelSourcesHash() {
  static const std::string hex = [] {
    Fnv1a64 hash;
    for (const KernelSource &h : kernelSources()) {
      hash.add(h.path).add(h.text);
    }
    return hash.hex();
  }();
  return hex;
}

Expected<CompiledModule> compileKernels(std::string_view source,
                                        const std::vector<std::string> &nameExpressions,
                                        std::string_view arch,
                                        const std::vector<std::string> &extraOptions) {
  GLM_ASSIGN_OR_RETURN(const NvrtcApi *nvrtc, api());
  GLM_ASSIGN_OR_RETURN(std::string version, nvrtcVersion());
  const std::string archOption = strCat("--gpu-architecture=", arch);
  // Exact IEEE f32 arithmetic (no fast math): f32 plans are checked against the golden at 1e-5.
  std::vector<std::string> options = {archOption, "-std=c++17"};
  options.insert(options.end(), extraOptions.begin(), extraOptions.end());
  // Source lines in the cubin, for a profiler's per-line view (Nsight Compute's source page); the
  // code is the same, and the option is hashed with the rest, so such cubins are cached apart.
  if (const char *lineInfo = std::getenv("GLM_NVRTC_LINEINFO"); lineInfo && *lineInfo) {
    options.emplace_back("-lineinfo");
  }

  Fnv1a64 hash;
  hash.add(version).add(source);
  for (const std::string &o : options) {
    hash.add(o);
  }
  for (const std::string &n : nameExpressions) {
    hash.add(n);
  }
  hash.add(kernelSourcesHash());
  CompiledModule module;
  module.hash = hash.hex();
  const std::filesystem::path dir = cacheDir();
  const std::filesystem::path entry =
      dir.empty() ? std::filesystem::path() : dir / strCat(module.hash, ".", arch, ".cubin");
  if (!entry.empty() && readCache(entry, module, nameExpressions.size())) {
    return module;
  }

  std::vector<const char *> headers, includeNames;
  for (const KernelSource &h : kernelSources()) {
    headers.push_back(h.text.data());
    includeNames.push_back(h.path.data());
  }
  const std::string text(source);
  nvrtcProgram program = nullptr;
  if (int rc = nvrtc->createProgram(&program, text.c_str(), "glmc_kernels.cu",
                                    static_cast<int>(headers.size()), headers.data(),
                                    includeNames.data());
      rc != 0) {
    return internalError("nvrtcCreateProgram: ", nvrtc->getErrorString(rc));
  }
  struct Destroy {
    const NvrtcApi *nvrtc;
    nvrtcProgram *program;
    ~Destroy() { nvrtc->destroyProgram(program); }
  } destroy{nvrtc, &program};
  for (const std::string &n : nameExpressions) {
    if (int rc = nvrtc->addNameExpression(program, n.c_str()); rc != 0) {
      return internalError("nvrtcAddNameExpression(", n, "): ", nvrtc->getErrorString(rc));
    }
  }
  std::vector<const char *> optionPointers;
  for (const std::string &o : options) {
    optionPointers.push_back(o.c_str());
  }
  const int rc = nvrtc->compileProgram(program, static_cast<int>(optionPointers.size()),
                                       optionPointers.data());
  size_t logSize = 0;
  nvrtc->getProgramLogSize(program, &logSize);
  std::string log(logSize, '\0');
  if (logSize > 0) {
    nvrtc->getProgramLog(program, log.data());
  }
  if (rc != 0) {
    return internalError("NVRTC could not compile the kernels for ", arch, ": ",
                         nvrtc->getErrorString(rc), "\n", log);
  }
  size_t cubinSize = 0;
  if (int r = nvrtc->getCubinSize(program, &cubinSize); r != 0 || cubinSize == 0) {
    return internalError("NVRTC produced no cubin for ", arch,
                         " (a virtual architecture? use sm_90a or sm_121a)");
  }
  module.log = log;
  module.cubin.resize(cubinSize);
  nvrtc->getCubin(program, reinterpret_cast<char *>(module.cubin.data()));
  for (const std::string &n : nameExpressions) {
    const char *lowered = nullptr;
    if (int r = nvrtc->getLoweredName(program, n.c_str(), &lowered); r != 0 || !lowered) {
      return internalError("NVRTC has no symbol for ", n);
    }
    module.entries.push_back(lowered);
  }
  if (!entry.empty()) {
    writeCache(entry, module);
  }
  return module;
}

} // namespace glm::kernels
