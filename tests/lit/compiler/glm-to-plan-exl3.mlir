// RUN: not glm-opt %s --glm-to-plan="target=cpu precision=f32" --split-input-file 2>&1 | FileCheck %s

// EXL3 slices (runtime/weights/Exl3Tensors.h): per matrix a trellis over both dimensions padded to
// 128 (K = 4: 128 x 128 x 4 / 8 bytes), suh and svh (2 bytes per padded channel) and 8 bytes of K
// and codebook.
// CHECK-DAG: plan.weight @w {checkpoint = "w", element = bf16, experts = 0 : i64, format = "exl3", global_shape = array<i64: 256, 100>, rank_shape = array<i64: 128, 100>, shard = "column", shard_dim = 0 : i64, size = 8712 : i64}
module attributes {glm.tp = 2 : i64} {
  glm.weight @w : tensor<128x100xbf16> {checkpoint = "w", format = #glm.format<exl3>, glm.global_shape = array<i64: 256, 100>, shard = #glm.shard<column>}
}

// -----

// A rank slice that cuts a 128-feature Hadamard block could not be loaded: refused here.
// CHECK-DAG: error: EXL3 weight v: a rank holds 64 of 128 features, which cuts its 128-feature Hadamard blocks
module attributes {glm.tp = 2 : i64} {
  glm.weight @v : tensor<64x128xbf16> {checkpoint = "v", format = #glm.format<exl3>, glm.global_shape = array<i64: 128, 128>, shard = #glm.shard<column>}
}
