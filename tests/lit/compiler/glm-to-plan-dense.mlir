// RUN: not glm-opt %s --glm-to-plan="target=cpu precision=f32" --split-input-file 2>&1 | FileCheck %s

// Q4 and fp8 slices (kernels/common/DenseFormats.h): q4 is the codes (rows x in / 2 bytes), from
// the next 256-byte boundary an f16 scale and minimum per 64 inputs; fp8 is a byte per weight,
// then from the next 256-byte boundary an f32 per 128 x 128 block. The element is the codes'.
// CHECK-DAG: plan.weight @q {checkpoint = "q", element = ui8, encoding = "q4", experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 200, 128>, rank_shape = array<i64: 100, 128>, shard = "column", shard_dim = 0 : i64, size = 7200 : i64}
// CHECK-DAG: plan.weight @f {checkpoint = "f", element = f8E4M3FN, encoding = "fp8", experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 256, 300>, rank_shape = array<i64: 256, 300>, shard = "replicated", shard_dim = 0 : i64, size = 76824 : i64}
// An fp8 checkpoint's weight is fp8 as stored, without being told.
// CHECK-DAG: plan.weight @s {checkpoint = "s", element = f8E4M3FN, encoding = "fp8", experts = 0 : i64, format = "fp8_e4m3", global_shape = array<i64: 128, 256>, rank_shape = array<i64: 64, 256>, shard = "column", shard_dim = 0 : i64, size = 16392 : i64}
module attributes {glm.tp = 2 : i64} {
  glm.weight @q : tensor<100x128xbf16> {checkpoint = "q", encoding = #glm.encoding<q4>, format = #glm.format<bfloat16>, glm.global_shape = array<i64: 200, 128>, shard = #glm.shard<column>}
  glm.weight @f : tensor<256x300xbf16> {checkpoint = "f", encoding = #glm.encoding<fp8>, format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
  glm.weight @s : tensor<64x256xf8E4M3FN> {checkpoint = "s", format = #glm.format<fp8_e4m3>, glm.global_shape = array<i64: 128, 256>, shard = #glm.shard<column>}
}

// -----

// A rank slice that cuts a q4 group or an fp8 block could not hold its encoding: refused here.
// CHECK-DAG: error: weight a: a rank holds 96 of 192 features, which cuts its 64-feature q4 groups
// CHECK-DAG: error: weight b: a rank holds 96 of 192 features, which cuts its 128 x 128 fp8 blocks
module attributes {glm.tp = 2 : i64} {
  glm.weight @a : tensor<128x96xbf16> {checkpoint = "a", encoding = #glm.encoding<q4>, format = #glm.format<bfloat16>, glm.global_shape = array<i64: 128, 192>, shard = #glm.shard<row, 1>}
}

// -----

module attributes {glm.tp = 2 : i64} {
  glm.weight @b : tensor<96x128xbf16> {checkpoint = "b", encoding = #glm.encoding<fp8>, format = #glm.format<bfloat16>, glm.global_shape = array<i64: 192, 128>, shard = #glm.shard<column>}
}
