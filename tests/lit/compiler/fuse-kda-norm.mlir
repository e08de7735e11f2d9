// RUN: glm-opt %s --plan-fuse-kda-norm | FileCheck %s

// A kda step whose next step is a weighted gated norm of its result in groups of its head_dim,
// written to another buffer, becomes with it one kda step at the recurrence's place: the gate
// after the step context, the norm's weight after kda's, its eps as norm_eps, its result second
// (the alloc moved up before the step), the bytes and FLOPs summed; a prefill program's folds the
// same way. A norm with a step between stays apart, as do an unweighted norm, a norm of groups
// other than the head, a norm in place, a norm whose result is the gate, and a norm of another
// buffer.

// CHECK-LABEL: plan.program @decode_b1_r1
// CHECK: %[[O1:.*]] = plan.alloc "o1"
// CHECK-NEXT: %[[N1:.*]] = plan.alloc "n1"
// CHECK-NEXT: plan.step "kda" "blk.0.kda+o_norm"(%[[Q:[^,]*]], %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %[[P:[^,]*]], %[[S:[^,]*]], %[[G:[^ ]*]] : {{.*}}) -> (%[[O1]], %[[N1]] : {{.*}}) {bytes_read = 1030 : i64, bytes_written = 56 : i64, flops = 25 : i64, params = {head_dim = 4 : i64, lower_bound = -5.000000e+00 : f64, norm_eps = 9.9999999999999995E-7 : f64, num_heads = 2 : i64}, states = [@st], weights = [@alog, @dtb, @onorm]}
// CHECK-NEXT: plan.alloc "y1"
// CHECK-NEXT: plan.step "add" "blk.0.uses_n1"(%[[N1]], %[[N1]]
// CHECK-NEXT: plan.alloc "o2"
// CHECK-NEXT: plan.step "kda" "blk.1.kda"(
// CHECK-NEXT: plan.step "add" "blk.1.between"(
// CHECK-NEXT: plan.alloc "n2"
// CHECK-NEXT: plan.step "gated_norm" "blk.1.o_norm"(
// CHECK: plan.step "kda" "blk.2.unweighted"(
// CHECK-NEXT: plan.step "gated_norm" "blk.2.o_norm"(
// CHECK: plan.step "kda" "blk.3.grouped"(
// CHECK-NEXT: plan.step "gated_norm" "blk.3.o_norm"(
// CHECK: plan.step "kda" "blk.4.in_place"(
// CHECK-NEXT: plan.step "gated_norm" "blk.4.o_norm"(
// CHECK: plan.step "kda" "blk.5.into_gate"(
// CHECK-NEXT: plan.step "gated_norm" "blk.5.o_norm"(
// CHECK: plan.step "kda" "blk.6.other_buffer"(
// CHECK-NEXT: plan.step "gated_norm" "blk.6.o_norm"(
// CHECK-LABEL: plan.program @prefill_c4
// CHECK: plan.step "kda" "blk.0.kda+o_norm"({{.*}}) -> ({{.*}}, {{.*}} : {{.*}}) {bytes_read = 1030 : i64
// CHECK-NOT: "gated_norm"

module {
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.weight @alog {checkpoint = "alog", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 2>, rank_shape = array<i64: 2>, shard = "replicated", shard_dim = 0 : i64, size = 4 : i64}
  plan.weight @dtb {checkpoint = "dtb", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 8>, rank_shape = array<i64: 8>, shard = "replicated", shard_dim = 0 : i64, size = 16 : i64}
  plan.weight @onorm {checkpoint = "onorm", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 4>, rank_shape = array<i64: 4>, shard = "replicated", shard_dim = 0 : i64, size = 8 : i64}
  plan.state @st {element = f32, kind = "kda_recurrent", paged = false, unit_shape = array<i64: 2, 4, 4>}
  plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %pos = plan.alloc "positions" {io = "positions"} : <[1], i32>
    %slots = plan.alloc "slots" {io = "sequence_slots"} : <[1], i32>
    %q = plan.alloc "q" : <[1, 8], bf16>
    %b = plan.alloc "b" : <[1, 2], bf16>
    %g = plan.alloc "g" : <[1, 8], bf16>
    %o1 = plan.alloc "o1" : <[1, 8], bf16>
    plan.step "kda" "blk.0.kda"(%q, %q, %q, %q, %b, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 2], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%o1 : !plan.buffer<[1, 8], bf16>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {head_dim = 4 : i64, lower_bound = -5.0 : f64, num_heads = 2 : i64}, states = [@st], weights = [@alog, @dtb]}
    %n1 = plan.alloc "n1" : <[1, 8], bf16>
    plan.step "gated_norm" "blk.0.o_norm"(%o1, %g : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%n1 : !plan.buffer<[1, 8], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {eps = 1.0e-6 : f64, group = 4 : i64}, states = [], weights = [@onorm]}
    %y1 = plan.alloc "y1" : <[1, 8], bf16>
    plan.step "add" "blk.0.uses_n1"(%n1, %n1 : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%y1 : !plan.buffer<[1, 8], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    %o2 = plan.alloc "o2" : <[1, 8], bf16>
    plan.step "kda" "blk.1.kda"(%q, %q, %q, %q, %b, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 2], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%o2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {head_dim = 4 : i64, lower_bound = -5.0 : f64, num_heads = 2 : i64}, states = [@st], weights = [@alog, @dtb]}
    plan.step "add" "blk.1.between"(%q, %q : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%y1 : !plan.buffer<[1, 8], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    %n2 = plan.alloc "n2" : <[1, 8], bf16>
    plan.step "gated_norm" "blk.1.o_norm"(%o2, %g : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%n2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {eps = 1.0e-6 : f64, group = 4 : i64}, states = [], weights = [@onorm]}
    plan.step "kda" "blk.2.unweighted"(%q, %q, %q, %q, %b, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 2], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%o2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {head_dim = 4 : i64, lower_bound = -5.0 : f64, num_heads = 2 : i64}, states = [@st], weights = [@alog, @dtb]}
    plan.step "gated_norm" "blk.2.o_norm"(%o2, %g : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%n2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {eps = 1.0e-6 : f64, group = 4 : i64}, states = [], weights = []}
    plan.step "kda" "blk.3.grouped"(%q, %q, %q, %q, %b, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 2], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%o2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {head_dim = 4 : i64, lower_bound = -5.0 : f64, num_heads = 2 : i64}, states = [@st], weights = [@alog, @dtb]}
    plan.step "gated_norm" "blk.3.o_norm"(%o2, %g : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%n2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {eps = 1.0e-6 : f64, group = 8 : i64}, states = [], weights = [@onorm]}
    plan.step "kda" "blk.4.in_place"(%q, %q, %q, %q, %b, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 2], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%o2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {head_dim = 4 : i64, lower_bound = -5.0 : f64, num_heads = 2 : i64}, states = [@st], weights = [@alog, @dtb]}
    plan.step "gated_norm" "blk.4.o_norm"(%o2, %g : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%o2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {eps = 1.0e-6 : f64, group = 4 : i64}, states = [], weights = [@onorm]}
    plan.step "kda" "blk.5.into_gate"(%q, %q, %q, %q, %b, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 2], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%o2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {head_dim = 4 : i64, lower_bound = -5.0 : f64, num_heads = 2 : i64}, states = [@st], weights = [@alog, @dtb]}
    plan.step "gated_norm" "blk.5.o_norm"(%o2, %g : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%g : !plan.buffer<[1, 8], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {eps = 1.0e-6 : f64, group = 4 : i64}, states = [], weights = [@onorm]}
    plan.step "kda" "blk.6.other_buffer"(%q, %q, %q, %q, %b, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 2], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%o2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {head_dim = 4 : i64, lower_bound = -5.0 : f64, num_heads = 2 : i64}, states = [@st], weights = [@alog, @dtb]}
    plan.step "gated_norm" "blk.6.o_norm"(%q, %g : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%n2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {eps = 1.0e-6 : f64, group = 4 : i64}, states = [], weights = [@onorm]}
  }
  plan.program @prefill_c4 attributes {batch = 1 : i64, kind = "prefill", rows = 4 : i64} {
    %pos = plan.alloc "positions" {io = "positions"} : <[4], i32>
    %slots = plan.alloc "slots" {io = "sequence_slots"} : <[1], i32>
    %q = plan.alloc "q" : <[4, 8], bf16>
    %b = plan.alloc "b" : <[4, 2], bf16>
    %g = plan.alloc "g" : <[4, 8], bf16>
    %o1 = plan.alloc "o1" : <[4, 8], bf16>
    plan.step "kda" "blk.0.kda"(%q, %q, %q, %q, %b, %pos, %slots : !plan.buffer<[4, 8], bf16>, !plan.buffer<[4, 8], bf16>, !plan.buffer<[4, 8], bf16>, !plan.buffer<[4, 8], bf16>, !plan.buffer<[4, 2], bf16>, !plan.buffer<[4], i32>, !plan.buffer<[1], i32>) -> (%o1 : !plan.buffer<[4, 8], bf16>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {head_dim = 4 : i64, lower_bound = -5.0 : f64, num_heads = 2 : i64}, states = [@st], weights = [@alog, @dtb]}
    %n1 = plan.alloc "n1" : <[4, 8], bf16>
    plan.step "gated_norm" "blk.0.o_norm"(%o1, %g : !plan.buffer<[4, 8], bf16>, !plan.buffer<[4, 8], bf16>) -> (%n1 : !plan.buffer<[4, 8], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {eps = 1.0e-6 : f64, group = 4 : i64}, states = [], weights = [@onorm]}
  }
}
