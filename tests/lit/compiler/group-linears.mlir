// RUN: glm-opt %s --split-input-file --plan-group-linears | FileCheck %s

// A decode program's linears of one input and one encoding (Q4 here, fp8 apart) become one
// linear_group step at the first one's place, their bytes and FLOPs summed. A linear with a bias
// stays one; so does one whose result an earlier step reads (moving it up would change what that
// step reads) and one after a step that writes the input (it reads another value). Prefill linears
// (the prefill kernels) and a CPU plan's are left as they are.

// CHECK-LABEL: plan.program @decode_b1_r1
// CHECK-NEXT: %[[X:.*]] = plan.alloc "x"
// CHECK-NEXT: %[[A:.*]] = plan.alloc "ya"
// CHECK-NEXT: %[[B:.*]] = plan.alloc "yb"
// CHECK-NEXT: %[[C:.*]] = plan.alloc "yc"
// CHECK-NEXT: plan.step "linear_group" "blk.0.a+b+c"(%[[X]] : !plan.buffer<[1, 128], bf16>) -> (%[[A]], %[[B]], %[[C]] : {{.*}}) {bytes_read = 30 : i64, bytes_written = 3 : i64, flops = 300 : i64, params = {}, states = [], weights = [@a, @b, @c]}
// CHECK: plan.step "swiglu" "blk.0.act"(%[[A]]
// CHECK: plan.step "linear_group" "blk.0.f+g"(%[[X]] : {{.*}} weights = [@f, @f]}
// CHECK: plan.step "linear" "blk.0.bias"
// CHECK: plan.step "swiglu" "blk.0.reads_h"
// CHECK-NEXT: plan.step "linear" "blk.0.h"
// CHECK-NEXT: plan.step "add" "blk.0.overwrite"
// CHECK: plan.step "linear" "blk.0.e"
// CHECK: plan.step "linear" "blk.0.e2"
// CHECK-LABEL: plan.program @prefill_c512
// CHECK-NOT: linear_group

module {
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.weight @a {checkpoint = "a", element = ui8, encoding = "q4", experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 256, 128>, rank_shape = array<i64: 256, 128>, shard = "replicated", shard_dim = 0 : i64, size = 18432 : i64}
  plan.weight @b {checkpoint = "b", element = ui8, encoding = "q4", experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 256, 128>, rank_shape = array<i64: 256, 128>, shard = "replicated", shard_dim = 0 : i64, size = 18432 : i64}
  plan.weight @c {checkpoint = "c", element = ui8, encoding = "q4", experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 256, 128>, rank_shape = array<i64: 256, 128>, shard = "replicated", shard_dim = 0 : i64, size = 18432 : i64}
  plan.weight @f {checkpoint = "f", element = f8E4M3FN, encoding = "fp8", experts = 0 : i64, format = "fp8_e4m3", global_shape = array<i64: 256, 128>, rank_shape = array<i64: 256, 128>, shard = "replicated", shard_dim = 0 : i64, size = 32776 : i64}
  plan.weight @bias {checkpoint = "bias", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 256>, rank_shape = array<i64: 256>, shard = "replicated", shard_dim = 0 : i64, size = 512 : i64}
  plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %x = plan.alloc "x" : <[1, 128], bf16>
    %ya = plan.alloc "ya" : <[1, 256], bf16>
    plan.step "linear" "blk.0.a"(%x : !plan.buffer<[1, 128], bf16>) -> (%ya : !plan.buffer<[1, 256], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@a]}
    %z = plan.alloc "z" : <[1, 128], bf16>
    plan.step "swiglu" "blk.0.act"(%ya : !plan.buffer<[1, 256], bf16>) -> (%z : !plan.buffer<[1, 128], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    %yb = plan.alloc "yb" : <[1, 256], bf16>
    plan.step "linear" "blk.0.b"(%x : !plan.buffer<[1, 128], bf16>) -> (%yb : !plan.buffer<[1, 256], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@b]}
    %yf = plan.alloc "yf" : <[1, 256], bf16>
    plan.step "linear" "blk.0.f"(%x : !plan.buffer<[1, 128], bf16>) -> (%yf : !plan.buffer<[1, 256], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@f]}
    %yd = plan.alloc "yd" : <[1, 256], bf16>
    plan.step "linear" "blk.0.bias"(%x : !plan.buffer<[1, 128], bf16>) -> (%yd : !plan.buffer<[1, 256], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@c, @bias]}
    %yc = plan.alloc "yc" : <[1, 256], bf16>
    plan.step "linear" "blk.0.c"(%x : !plan.buffer<[1, 128], bf16>) -> (%yc : !plan.buffer<[1, 256], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@c]}
    %yh = plan.alloc "yh" : <[1, 256], bf16>
    %z2 = plan.alloc "z2" : <[1, 128], bf16>
    plan.step "swiglu" "blk.0.reads_h"(%yh : !plan.buffer<[1, 256], bf16>) -> (%z2 : !plan.buffer<[1, 128], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    plan.step "linear" "blk.0.h"(%x : !plan.buffer<[1, 128], bf16>) -> (%yh : !plan.buffer<[1, 256], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@b]}
    %yg = plan.alloc "yg" : <[1, 256], bf16>
    plan.step "linear" "blk.0.g"(%x : !plan.buffer<[1, 128], bf16>) -> (%yg : !plan.buffer<[1, 256], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@f]}
    plan.step "add" "blk.0.overwrite"(%x, %x : !plan.buffer<[1, 128], bf16>, !plan.buffer<[1, 128], bf16>) -> (%x : !plan.buffer<[1, 128], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    %ye = plan.alloc "ye" : <[1, 256], bf16>
    plan.step "linear" "blk.0.e"(%x : !plan.buffer<[1, 128], bf16>) -> (%ye : !plan.buffer<[1, 256], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@a]}
    %ye2 = plan.alloc "ye2" : <[1, 256], bf16>
    plan.step "linear" "blk.0.e2"(%z : !plan.buffer<[1, 128], bf16>) -> (%ye2 : !plan.buffer<[1, 256], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@b]}
  }
  plan.program @prefill_c512 attributes {batch = 1 : i64, kind = "prefill", rows = 512 : i64} {
    %x = plan.alloc "x" : <[512, 128], bf16>
    %ya = plan.alloc "ya" : <[512, 256], bf16>
    %yb = plan.alloc "yb" : <[512, 256], bf16>
    plan.step "linear" "blk.0.a"(%x : !plan.buffer<[512, 128], bf16>) -> (%ya : !plan.buffer<[512, 256], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@a]}
    plan.step "linear" "blk.0.b"(%x : !plan.buffer<[512, 128], bf16>) -> (%yb : !plan.buffer<[512, 256], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@b]}
  }
}

// -----

// CHECK-LABEL: plan.target "cpu"
// CHECK-NOT: linear_group
module {
  plan.target "cpu" {bandwidth_bytes_per_s = 0.0 : f64, memory_bytes = 0 : i64, precision = "f32", shared_memory_per_block = 0 : i64, sm_count = 0 : i64, tp = 1 : i64}
  plan.weight @a {checkpoint = "a", element = ui8, encoding = "q4", experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 256, 128>, rank_shape = array<i64: 256, 128>, shard = "replicated", shard_dim = 0 : i64, size = 18432 : i64}
  plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %x = plan.alloc "x" : <[1, 128], f32>
    %ya = plan.alloc "ya" : <[1, 256], f32>
    %yb = plan.alloc "yb" : <[1, 256], f32>
    plan.step "linear" "blk.0.a"(%x : !plan.buffer<[1, 128], f32>) -> (%ya : !plan.buffer<[1, 256], f32>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@a]}
    plan.step "linear" "blk.0.b"(%x : !plan.buffer<[1, 128], f32>) -> (%yb : !plan.buffer<[1, 256], f32>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@a]}
  }
}
