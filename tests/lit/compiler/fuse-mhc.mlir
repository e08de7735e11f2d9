// RUN: glm-opt %s --plan-fuse-mhc | FileCheck %s

// An mhc_post whose next step is the mhc_pre of its result becomes, with it, one mhc_pre step at
// the mixer's place: mhc_post's operands (y, post, comb, residual), the mixer's results and the new
// streams as a fourth, the mixer's weights and parameters, the bytes and FLOPs summed; a decode
// program's step does not read the streams back (the 40 bytes mhc_post wrote), a prefill
// program's does. A pair with a step between stays apart (the step could read the streams before
// the fused step wrote them), as do an mhc_pre of other streams, a last mhc_post and one that
// updates its residual in place (the decode kernel reads old streams while it writes new ones).

// CHECK-LABEL: plan.program @decode_b1_r1
// CHECK-NEXT: %[[Y0:.*]] = plan.alloc "y0"
// CHECK-NEXT: %[[P0:.*]] = plan.alloc "p0"
// CHECK-NEXT: %[[C0:.*]] = plan.alloc "c0"
// CHECK-NEXT: %[[S0:.*]] = plan.alloc "s0"
// CHECK-NEXT: %[[S1:.*]] = plan.alloc "s1"
// CHECK-NEXT: %[[X1:.*]] = plan.alloc "x1"
// CHECK-NEXT: %[[P1:.*]] = plan.alloc "p1"
// CHECK-NEXT: %[[C1:.*]] = plan.alloc "c1"
// CHECK-NEXT: plan.step "mhc_pre" "blk.0.attn_hc.post+ffn_hc"(%[[Y0]], %[[P0]], %[[C0]], %[[S0]] : {{.*}}) -> (%[[X1]], %[[P1]], %[[C1]], %[[S1]] : {{.*}}) {bytes_read = 1060 : i64, bytes_written = 86 : i64, flops = 30 : i64, params = {hc_eps = 9.9999999999999995E-7 : f64, norm_eps = 1.000000e-05 : f64, sinkhorn_iters = 20 : i64}, states = [], weights = [@fn, @base, @scale]}
// CHECK-NEXT: plan.step "add" "blk.0.between"(
// CHECK-NEXT: plan.alloc "s2"
// CHECK-NEXT: plan.step "mhc_post" "blk.0.ffn_hc.post"(
// CHECK-NEXT: plan.alloc "s3"
// CHECK-NEXT: plan.step "add" "blk.0.reads_s2"(
// CHECK-NEXT: plan.alloc "x2"
// CHECK-NEXT: plan.step "mhc_pre" "blk.1.attn_hc"(
// CHECK-NEXT: plan.alloc "s4"
// CHECK-NEXT: plan.step "mhc_post" "blk.1.attn_hc.post"(
// CHECK-NEXT: plan.step "mhc_pre" "blk.1.other"(
// CHECK-NEXT: plan.step "mhc_post" "blk.1.last"(
// CHECK-NEXT: plan.step "mhc_post" "blk.2.in_place"(
// CHECK-NEXT: plan.step "mhc_pre" "blk.2.ffn_hc"(
// CHECK-LABEL: plan.program @prefill_c512
// CHECK: plan.step "mhc_pre" "blk.0.attn_hc.post+ffn_hc"({{.*}}) {bytes_read = 1100 : i64, bytes_written = 86 : i64

module {
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.weight @fn {checkpoint = "fn", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 24, 20>, rank_shape = array<i64: 24, 20>, shard = "replicated", shard_dim = 0 : i64, size = 960 : i64}
  plan.weight @base {checkpoint = "base", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 24>, rank_shape = array<i64: 24>, shard = "replicated", shard_dim = 0 : i64, size = 48 : i64}
  plan.weight @scale {checkpoint = "scale", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 3>, rank_shape = array<i64: 3>, shard = "replicated", shard_dim = 0 : i64, size = 6 : i64}
  plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %y0 = plan.alloc "y0" : <[1, 5], bf16>
    %p0 = plan.alloc "p0" : <[1, 4], f32>
    %c0 = plan.alloc "c0" : <[1, 4, 4], f32>
    %s0 = plan.alloc "s0" : <[1, 4, 5], bf16>
    %s1 = plan.alloc "s1" : <[1, 4, 5], bf16>
    plan.step "mhc_post" "blk.0.attn_hc.post"(%y0, %p0, %c0, %s0 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>, !plan.buffer<[1, 4, 5], bf16>) -> (%s1 : !plan.buffer<[1, 4, 5], bf16>) {bytes_read = 100 : i64, bytes_written = 40 : i64, flops = 10 : i64, params = {}, states = [], weights = []}
    %x1 = plan.alloc "x1" : <[1, 5], bf16>
    %p1 = plan.alloc "p1" : <[1, 4], f32>
    %c1 = plan.alloc "c1" : <[1, 4, 4], f32>
    plan.step "mhc_pre" "blk.0.ffn_hc"(%s1 : !plan.buffer<[1, 4, 5], bf16>) -> (%x1, %p1, %c1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {hc_eps = 1.0e-6 : f64, norm_eps = 1.0e-5 : f64, sinkhorn_iters = 20 : i64}, states = [], weights = [@fn, @base, @scale]}
    plan.step "add" "blk.0.between"(%x1, %x1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 5], bf16>) -> (%y0 : !plan.buffer<[1, 5], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    %s2 = plan.alloc "s2" : <[1, 4, 5], bf16>
    plan.step "mhc_post" "blk.0.ffn_hc.post"(%y0, %p1, %c1, %s1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>, !plan.buffer<[1, 4, 5], bf16>) -> (%s2 : !plan.buffer<[1, 4, 5], bf16>) {bytes_read = 100 : i64, bytes_written = 40 : i64, flops = 10 : i64, params = {}, states = [], weights = []}
    %s3 = plan.alloc "s3" : <[1, 4, 5], bf16>
    plan.step "add" "blk.0.reads_s2"(%s2, %s2 : !plan.buffer<[1, 4, 5], bf16>, !plan.buffer<[1, 4, 5], bf16>) -> (%s3 : !plan.buffer<[1, 4, 5], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    %x2 = plan.alloc "x2" : <[1, 5], bf16>
    plan.step "mhc_pre" "blk.1.attn_hc"(%s2 : !plan.buffer<[1, 4, 5], bf16>) -> (%x2, %p0, %c0 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {}, states = [], weights = [@fn, @base, @scale]}
    %s4 = plan.alloc "s4" : <[1, 4, 5], bf16>
    plan.step "mhc_post" "blk.1.attn_hc.post"(%x2, %p0, %c0, %s2 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>, !plan.buffer<[1, 4, 5], bf16>) -> (%s4 : !plan.buffer<[1, 4, 5], bf16>) {bytes_read = 100 : i64, bytes_written = 40 : i64, flops = 10 : i64, params = {}, states = [], weights = []}
    plan.step "mhc_pre" "blk.1.other"(%s3 : !plan.buffer<[1, 4, 5], bf16>) -> (%x2, %p1, %c1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {}, states = [], weights = [@fn, @base, @scale]}
    plan.step "mhc_post" "blk.1.last"(%x2, %p1, %c1, %s4 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>, !plan.buffer<[1, 4, 5], bf16>) -> (%s0 : !plan.buffer<[1, 4, 5], bf16>) {bytes_read = 100 : i64, bytes_written = 40 : i64, flops = 10 : i64, params = {}, states = [], weights = []}
    plan.step "mhc_post" "blk.2.in_place"(%x2, %p1, %c1, %s0 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>, !plan.buffer<[1, 4, 5], bf16>) -> (%s0 : !plan.buffer<[1, 4, 5], bf16>) {bytes_read = 100 : i64, bytes_written = 40 : i64, flops = 10 : i64, params = {}, states = [], weights = []}
    plan.step "mhc_pre" "blk.2.ffn_hc"(%s0 : !plan.buffer<[1, 4, 5], bf16>) -> (%x1, %p0, %c0 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {}, states = [], weights = [@fn, @base, @scale]}
  }
  plan.program @prefill_c512 attributes {batch = 1 : i64, kind = "prefill", rows = 512 : i64} {
    %y0 = plan.alloc "y0" : <[512, 5], bf16>
    %p0 = plan.alloc "p0" : <[512, 4], f32>
    %c0 = plan.alloc "c0" : <[512, 4, 4], f32>
    %s0 = plan.alloc "s0" : <[512, 4, 5], bf16>
    %s1 = plan.alloc "s1" : <[512, 4, 5], bf16>
    plan.step "mhc_post" "blk.0.attn_hc.post"(%y0, %p0, %c0, %s0 : !plan.buffer<[512, 5], bf16>, !plan.buffer<[512, 4], f32>, !plan.buffer<[512, 4, 4], f32>, !plan.buffer<[512, 4, 5], bf16>) -> (%s1 : !plan.buffer<[512, 4, 5], bf16>) {bytes_read = 100 : i64, bytes_written = 40 : i64, flops = 10 : i64, params = {}, states = [], weights = []}
    %x1 = plan.alloc "x1" : <[512, 5], bf16>
    %p1 = plan.alloc "p1" : <[512, 4], f32>
    %c1 = plan.alloc "c1" : <[512, 4, 4], f32>
    plan.step "mhc_pre" "blk.0.ffn_hc"(%s1 : !plan.buffer<[512, 4, 5], bf16>) -> (%x1, %p1, %c1 : !plan.buffer<[512, 5], bf16>, !plan.buffer<[512, 4], f32>, !plan.buffer<[512, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {}, states = [], weights = [@fn, @base, @scale]}
  }
}
