// RUN: not glm-opt %s --split-input-file --plan-compile-kernels 2> %t.err | FileCheck %s
// RUN: FileCheck %s --check-prefix=BAD < %t.err

// Each kernel of the table gets NVRTC's cubin for the plan's target, its mangled entry and the
// cache's content hash; the emitter writes them into the plan file.
// CHECK: plan.kernel @"addKernel<Bf16>" "glm::kernels::addKernel<glm::kernels::Bf16>" from "kernels/add/add.cuh"
// CHECK-SAME: cubin = dense_resource<cubin> : tensor<{{[0-9]+}}xui8>
// CHECK-SAME: entry = "_ZN3glm7kernels9addKernelINS0_4Bf16EEEvNS0_10AddGpuArgsE"
// CHECK-SAME: source_hash = "{{[0-9a-f]+}}"
module {
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.kernel @"addKernel<Bf16>" "glm::kernels::addKernel<glm::kernels::Bf16>" from "kernels/add/add.cuh"
}

// -----

// An instance no header defines is refused by name, with NVRTC's reason.
// BAD: 'plan.kernel' op glm::kernels::noSuchKernel<float> does not compile for sm_121a: NVRTC could not compile
module {
  plan.target "sm_121a" {bandwidth_bytes_per_s = 2.73e11 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 101376 : i64, sm_count = 48 : i64, tp = 1 : i64}
  plan.kernel @noSuchKernel "glm::kernels::noSuchKernel<float>" from "kernels/add/add.cuh"
}
