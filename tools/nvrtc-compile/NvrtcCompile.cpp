// glm-nvrtc-compile: compiles kernel template instances from the embedded kernel sources with
// NVRTC, as `glmc compile` and the GPU tests do, and writes the cubin. For kernel work on a machine
// without a GPU: it shows NVRTC's errors and warnings and ptxas's register and shared-memory
// report, and the cubin can be disassembled.
//
//   glm-nvrtc-compile ARCH 'SOURCE' NAME... [-o OUT.cubin]
//   glm-nvrtc-compile sm_90a '#include "kernels/rms_norm/rms_norm.cuh"' \
//       'glm::kernels::rmsNormKernel<float, float>'
#include "kernels/common/Nvrtc.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string out;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "-o") {
      out = args[i + 1];
      args.erase(args.begin() + static_cast<long>(i), args.begin() + static_cast<long>(i) + 2);
      break;
    }
  }
  if (args.size() < 3) {
    std::fprintf(stderr, "usage: glm-nvrtc-compile ARCH SOURCE NAME... [-o OUT.cubin]\n");
    return 2;
  }
  // Always compile afresh: this tool exists to see the compiler's output.
  setenv("GLM_KERNEL_CACHE", "off", 1);
  const std::vector<std::string> names(args.begin() + 2, args.end());
  glm::Expected<glm::kernels::CompiledModule> module =
      glm::kernels::compileKernels(args[1], names, args[0], {"--ptxas-options=-v"});
  if (!module.ok()) {
    std::fprintf(stderr, "glm-nvrtc-compile: %s\n", module.status().toString().c_str());
    return 1;
  }
  std::printf("%s", module->log.c_str());
  std::printf("cubin: %zu bytes for %s\n", module->cubin.size(), args[0].c_str());
  for (size_t i = 0; i < names.size(); ++i) {
    std::printf("  %s -> %s\n", names[i].c_str(), module->entries[i].c_str());
  }
  if (!out.empty()) {
    std::ofstream(out, std::ios::binary)
        .write(reinterpret_cast<const char *>(module->cubin.data()),
               static_cast<std::streamsize>(module->cubin.size()));
  }
  return 0;
}
