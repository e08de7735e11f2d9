// RUN: glm-opt %s --plan-form-segments | FileCheck %s

// Nothing inside a program needs the host, so each is one segment: one CUDA graph.
// CHECK: plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = array<i64: 0, 2>}
// CHECK: plan.program @empty attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64, segments = array<i64>}
module {
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %x = plan.alloc "x" : <[4], f32>
    plan.step "add" "a"(%x, %x : !plan.buffer<[4], f32>, !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, kernel = "k", params = {}, states = [], weights = []}
    plan.step "add" "b"(%x, %x : !plan.buffer<[4], f32>, !plan.buffer<[4], f32>) -> (%x : !plan.buffer<[4], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, kernel = "k", params = {}, states = [], weights = []}
  }
  plan.program @empty attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
  }
}
