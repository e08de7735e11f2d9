// RUN: glm-opt %s --split-input-file --plan-group-linears | FileCheck %s

// A decode program's linears of one input and one encoding (Q4 here, fp8 apart) become one
// linear_group step at the first one's place, their bytes and FLOPs summed. A linear with a bias
// stays one; so does one whose result an earlier step reads (moving it up would change what that
// step reads) and one after a step that writes the input (it reads another value). That one
// starts a group of its own, which takes a later linear of another input of the same width
// (e2: each part then has its operand). Prefill linears (the prefill kernels) are left as they are.

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
// CHECK-NEXT: plan.alloc "ye2"
// CHECK-NEXT: plan.step "linear_group" "blk.0.h+e2"(%[[X]], %[[Z:.*]] : {{.*}}) -> ({{.*}}) {{.*}} weights = [@b, @b]}
// CHECK-NEXT: plan.step "add" "blk.0.overwrite"
// CHECK: plan.step "linear" "blk.0.e"(%[[X]]
// CHECK-NOT: blk.0.e2
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

// A CPU plan's decode linears group too, in any encoding and f32: the reference runs each part.

// CHECK-LABEL: plan.target "cpu"
// CHECK: plan.step "linear_group" "blk.0.a+b"(%{{.*}} : !plan.buffer<[1, 128], f32>)
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

// -----

// Linears of their own inputs: one joins where its input is ready at the group's place and its
// width is the group's (t, whose input u was written before p). Not one that reads a part's result
// (q reads p's: the parts run at once), one whose input a step in between writes (r), one of
// another width (v) or another encoding (fp8: w).

// CHECK-LABEL: plan.weight @k
// CHECK: %[[U:.*]] = plan.alloc "u"
// CHECK-NEXT: plan.step "swiglu" "blk.1.makes_u"
// CHECK-NEXT: %[[P:.*]] = plan.alloc "p"
// CHECK-NEXT: %[[T:.*]] = plan.alloc "t"
// CHECK-NEXT: plan.step "linear_group" "blk.1.p+t"(%{{.*}}, %[[U]] : {{.*}}) -> (%[[P]], %[[T]] : {{.*}}) {bytes_read = 20 : i64, {{.*}} weights = [@k, @k]}
// CHECK: plan.step "linear" "blk.1.q"
// CHECK: plan.step "swiglu" "blk.1.makes_r"
// CHECK: plan.step "linear" "blk.1.r"
// CHECK: plan.step "linear" "blk.1.v"
// CHECK: plan.step "linear" "blk.1.w"
// CHECK-NOT: plan.step
module {
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.weight @k {checkpoint = "k", element = ui8, encoding = "q4", experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 128, 128>, rank_shape = array<i64: 128, 128>, shard = "replicated", shard_dim = 0 : i64, size = 9216 : i64}
  plan.weight @wide {checkpoint = "wide", element = ui8, encoding = "q4", experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 128, 256>, rank_shape = array<i64: 128, 256>, shard = "replicated", shard_dim = 0 : i64, size = 18432 : i64}
  plan.weight @f {checkpoint = "f", element = f8E4M3FN, encoding = "fp8", experts = 0 : i64, format = "fp8_e4m3", global_shape = array<i64: 128, 128>, rank_shape = array<i64: 128, 128>, shard = "replicated", shard_dim = 0 : i64, size = 16392 : i64}
  plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %x = plan.alloc "x" : <[1, 128], bf16>
    %g = plan.alloc "g" : <[1, 256], bf16>
    %u = plan.alloc "u" : <[1, 128], bf16>
    plan.step "swiglu" "blk.1.makes_u"(%g : !plan.buffer<[1, 256], bf16>) -> (%u : !plan.buffer<[1, 128], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    %p = plan.alloc "p" : <[1, 128], bf16>
    plan.step "linear" "blk.1.p"(%x : !plan.buffer<[1, 128], bf16>) -> (%p : !plan.buffer<[1, 128], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@k]}
    %q = plan.alloc "q" : <[1, 128], bf16>
    plan.step "linear" "blk.1.q"(%p : !plan.buffer<[1, 128], bf16>) -> (%q : !plan.buffer<[1, 128], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@k]}
    %rin = plan.alloc "rin" : <[1, 128], bf16>
    plan.step "swiglu" "blk.1.makes_r"(%g : !plan.buffer<[1, 256], bf16>) -> (%rin : !plan.buffer<[1, 128], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    %r = plan.alloc "r" : <[1, 128], bf16>
    plan.step "linear" "blk.1.r"(%rin : !plan.buffer<[1, 128], bf16>) -> (%r : !plan.buffer<[1, 128], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@k]}
    %v = plan.alloc "v" : <[1, 128], bf16>
    plan.step "linear" "blk.1.v"(%g : !plan.buffer<[1, 256], bf16>) -> (%v : !plan.buffer<[1, 128], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@wide]}
    %w = plan.alloc "w" : <[1, 128], bf16>
    plan.step "linear" "blk.1.w"(%u : !plan.buffer<[1, 128], bf16>) -> (%w : !plan.buffer<[1, 128], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@f]}
    %t = plan.alloc "t" : <[1, 128], bf16>
    plan.step "linear" "blk.1.t"(%u : !plan.buffer<[1, 128], bf16>) -> (%t : !plan.buffer<[1, 128], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 100 : i64, params = {}, states = [], weights = [@k]}
  }
}
