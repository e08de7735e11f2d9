// RUN: glm-opt %s --plan-fuse-linear-add | FileCheck %s

// A linear whose next step adds its output to another buffer becomes one linear step at its
// place: x and the other buffer as operands, the add's result as its own (the alloc moved up
// before it, the linear's own output gone), bytes read less the output the add read back, bytes
// written the add's, FLOPs summed; either operand order folds, in decode and prefill programs. A
// linear whose output another step reads stays apart, as do an add in place, an add of the output
// with itself and a pair with a step between.

// CHECK-LABEL: plan.program @decode_b1_r1
// CHECK-NEXT: %[[X:.*]] = plan.alloc "x"
// CHECK-NEXT: %[[R:.*]] = plan.alloc "routed"
// CHECK-NEXT: %[[S:.*]] = plan.alloc "sum"
// CHECK-NEXT: plan.step "linear" "blk.3.ffn.shared.down_proj+sum"(%[[X]], %[[R]] : {{.*}}) -> (%[[S]] : !plan.buffer<[1, 8], bf16>) {bytes_read = 180 : i64, bytes_written = 16 : i64, flops = 136 : i64, params = {}, states = [], weights = [@down]}
// CHECK-NEXT: %[[S2:.*]] = plan.alloc "sum2"
// CHECK-NEXT: plan.step "linear" "blk.4.ffn.shared.down_proj+sum"(%[[X]], %[[R]] : {{.*}}) -> (%[[S2]] : {{.*}})
// CHECK-NEXT: plan.alloc "y3"
// CHECK-NEXT: plan.step "linear" "blk.5.read_twice"(
// CHECK-NEXT: plan.step "add" "blk.5.ffn.sum"(
// CHECK-NEXT: plan.step "add" "blk.5.reads_y3"(
// CHECK-NEXT: plan.alloc "y4"
// CHECK-NEXT: plan.step "linear" "blk.6.in_place"(
// CHECK-NEXT: plan.step "add" "blk.6.ffn.sum"(
// CHECK-NEXT: plan.alloc "y5"
// CHECK-NEXT: plan.step "linear" "blk.7.doubled"(
// CHECK-NEXT: plan.step "add" "blk.7.ffn.sum"(
// CHECK-NEXT: plan.alloc "y6"
// CHECK-NEXT: plan.step "linear" "blk.8.apart"(
// CHECK-NEXT: plan.step "add" "blk.8.between"(
// CHECK-NEXT: plan.step "add" "blk.8.ffn.sum"(
// CHECK-LABEL: plan.program @prefill_c512
// CHECK: plan.step "linear" "blk.3.ffn.shared.down_proj+sum"({{.*}}) -> ({{.*}}) {bytes_read = 180 : i64
// CHECK-NOT: "add"

module {
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.weight @down {checkpoint = "down", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 8, 8>, rank_shape = array<i64: 8, 8>, shard = "replicated", shard_dim = 0 : i64, size = 128 : i64}
  plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %x = plan.alloc "x" : <[1, 8], bf16>
    %routed = plan.alloc "routed" : <[1, 8], bf16>
    %y1 = plan.alloc "y1" : <[1, 8], bf16>
    plan.step "linear" "blk.3.ffn.shared.down_proj"(%x : !plan.buffer<[1, 8], bf16>) -> (%y1 : !plan.buffer<[1, 8], bf16>) {bytes_read = 144 : i64, bytes_written = 16 : i64, flops = 128 : i64, params = {}, states = [], weights = [@down]}
    %sum = plan.alloc "sum" : <[1, 8], bf16>
    plan.step "add" "blk.3.ffn.sum"(%routed, %y1 : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%sum : !plan.buffer<[1, 8], bf16>) {bytes_read = 52 : i64, bytes_written = 16 : i64, flops = 8 : i64, params = {}, states = [], weights = []}
    %y2 = plan.alloc "y2" : <[1, 8], bf16>
    plan.step "linear" "blk.4.ffn.shared.down_proj"(%x : !plan.buffer<[1, 8], bf16>) -> (%y2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 144 : i64, bytes_written = 16 : i64, flops = 128 : i64, params = {}, states = [], weights = [@down]}
    %sum2 = plan.alloc "sum2" : <[1, 8], bf16>
    plan.step "add" "blk.4.ffn.sum"(%y2, %routed : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%sum2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 52 : i64, bytes_written = 16 : i64, flops = 8 : i64, params = {}, states = [], weights = []}
    %y3 = plan.alloc "y3" : <[1, 8], bf16>
    plan.step "linear" "blk.5.read_twice"(%x : !plan.buffer<[1, 8], bf16>) -> (%y3 : !plan.buffer<[1, 8], bf16>) {bytes_read = 144 : i64, bytes_written = 16 : i64, flops = 128 : i64, params = {}, states = [], weights = [@down]}
    plan.step "add" "blk.5.ffn.sum"(%routed, %y3 : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%sum : !plan.buffer<[1, 8], bf16>) {bytes_read = 52 : i64, bytes_written = 16 : i64, flops = 8 : i64, params = {}, states = [], weights = []}
    plan.step "add" "blk.5.reads_y3"(%y3, %sum : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%sum2 : !plan.buffer<[1, 8], bf16>) {bytes_read = 52 : i64, bytes_written = 16 : i64, flops = 8 : i64, params = {}, states = [], weights = []}
    %y4 = plan.alloc "y4" : <[1, 8], bf16>
    plan.step "linear" "blk.6.in_place"(%x : !plan.buffer<[1, 8], bf16>) -> (%y4 : !plan.buffer<[1, 8], bf16>) {bytes_read = 144 : i64, bytes_written = 16 : i64, flops = 128 : i64, params = {}, states = [], weights = [@down]}
    plan.step "add" "blk.6.ffn.sum"(%routed, %y4 : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%routed : !plan.buffer<[1, 8], bf16>) {bytes_read = 52 : i64, bytes_written = 16 : i64, flops = 8 : i64, params = {}, states = [], weights = []}
    %y5 = plan.alloc "y5" : <[1, 8], bf16>
    plan.step "linear" "blk.7.doubled"(%x : !plan.buffer<[1, 8], bf16>) -> (%y5 : !plan.buffer<[1, 8], bf16>) {bytes_read = 144 : i64, bytes_written = 16 : i64, flops = 128 : i64, params = {}, states = [], weights = [@down]}
    plan.step "add" "blk.7.ffn.sum"(%y5, %y5 : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%sum : !plan.buffer<[1, 8], bf16>) {bytes_read = 52 : i64, bytes_written = 16 : i64, flops = 8 : i64, params = {}, states = [], weights = []}
    %y6 = plan.alloc "y6" : <[1, 8], bf16>
    plan.step "linear" "blk.8.apart"(%x : !plan.buffer<[1, 8], bf16>) -> (%y6 : !plan.buffer<[1, 8], bf16>) {bytes_read = 144 : i64, bytes_written = 16 : i64, flops = 128 : i64, params = {}, states = [], weights = [@down]}
    plan.step "add" "blk.8.between"(%x, %x : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%routed : !plan.buffer<[1, 8], bf16>) {bytes_read = 52 : i64, bytes_written = 16 : i64, flops = 8 : i64, params = {}, states = [], weights = []}
    plan.step "add" "blk.8.ffn.sum"(%routed, %y6 : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1, 8], bf16>) -> (%sum : !plan.buffer<[1, 8], bf16>) {bytes_read = 52 : i64, bytes_written = 16 : i64, flops = 8 : i64, params = {}, states = [], weights = []}
  }
  plan.program @prefill_c512 attributes {batch = 1 : i64, kind = "prefill", rows = 512 : i64} {
    %x = plan.alloc "x" : <[512, 8], bf16>
    %routed = plan.alloc "routed" : <[512, 8], bf16>
    %y1 = plan.alloc "y1" : <[512, 8], bf16>
    plan.step "linear" "blk.3.ffn.shared.down_proj"(%x : !plan.buffer<[512, 8], bf16>) -> (%y1 : !plan.buffer<[512, 8], bf16>) {bytes_read = 144 : i64, bytes_written = 16 : i64, flops = 128 : i64, params = {}, states = [], weights = [@down]}
    %sum = plan.alloc "sum" : <[512, 8], bf16>
    plan.step "add" "blk.3.ffn.sum"(%routed, %y1 : !plan.buffer<[512, 8], bf16>, !plan.buffer<[512, 8], bf16>) -> (%sum : !plan.buffer<[512, 8], bf16>) {bytes_read = 52 : i64, bytes_written = 16 : i64, flops = 8 : i64, params = {}, states = [], weights = []}
  }
}
