// RUN: glm-opt %s --plan-fuse-mhc-norm | FileCheck %s

// An mhc_pre whose next step is a weighted RMSNorm of its x over whole rows, written to another
// buffer, becomes with it one mhc_pre step at the mixer's place: the norm's weight after the
// mixer's, its eps as input_norm_eps, its result last (the alloc moved up before the step), the
// bytes and FLOPs summed. An mhc_pre already folded with its mhc_post folds the same way, and so
// does a prefill program's. A norm with a step between stays apart, as do an unweighted norm, a
// norm of groups of the row, a norm in place, a norm of another buffer, and a second norm after
// a fold (its mixer holds one already).

// CHECK-LABEL: plan.program @decode_b1_r1
// CHECK-NEXT: plan.alloc "s0"
// CHECK-NEXT: %[[X1:.*]] = plan.alloc "x1"
// CHECK-NEXT: %[[P1:.*]] = plan.alloc "p1"
// CHECK-NEXT: %[[C1:.*]] = plan.alloc "c1"
// CHECK-NEXT: %[[N1:.*]] = plan.alloc "n1"
// CHECK-NEXT: plan.step "mhc_pre" "blk.0.attn_hc+attn_norm"(%{{.*}} : {{.*}}) -> (%[[X1]], %[[P1]], %[[C1]], %[[N1]] : {{.*}}) {bytes_read = 1030 : i64, bytes_written = 56 : i64, flops = 25 : i64, params = {hc_eps = 9.9999999999999995E-7 : f64, input_norm_eps = 9.9999999999999995E-7 : f64, norm_eps = 1.000000e-05 : f64, sinkhorn_iters = 20 : i64}, states = [], weights = [@fn, @base, @scale, @attn_norm]}
// CHECK-NEXT: plan.alloc "y1"
// CHECK-NEXT: plan.step "add" "blk.0.uses_n1"(%[[N1]], %[[N1]]
// CHECK-NEXT: plan.alloc "s1"
// CHECK-NEXT: plan.alloc "x2"
// CHECK-NEXT: plan.alloc "p2"
// CHECK-NEXT: plan.alloc "c2"
// CHECK-NEXT: %[[N2:.*]] = plan.alloc "n2"
// CHECK-NEXT: plan.step "mhc_pre" "blk.0.attn_hc.post+ffn_hc+ffn_norm"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : {{.*}}) -> (%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[N2]] : {{.*}}) {bytes_read = 1130 : i64, bytes_written = 96 : i64, flops = 35 : i64, params = {}, states = [], weights = [@fn, @base, @scale, @ffn_norm]}
// CHECK-NEXT: plan.alloc "n3"
// CHECK-NEXT: plan.step "rms_norm" "blk.0.second_norm"(
// CHECK-NEXT: plan.step "mhc_pre" "blk.1.attn_hc"(
// CHECK-NEXT: plan.step "add" "blk.1.between"(
// CHECK-NEXT: plan.step "rms_norm" "blk.1.attn_norm"(
// CHECK-NEXT: plan.step "mhc_pre" "blk.2.unweighted"(
// CHECK-NEXT: plan.step "rms_norm" "blk.2.attn_norm"(
// CHECK-NEXT: plan.step "mhc_pre" "blk.3.grouped"(
// CHECK-NEXT: plan.step "rms_norm" "blk.3.attn_norm"(
// CHECK-NEXT: plan.step "mhc_pre" "blk.4.in_place"(
// CHECK-NEXT: plan.step "rms_norm" "blk.4.attn_norm"(
// CHECK-NEXT: plan.step "mhc_pre" "blk.5.other_buffer"(
// CHECK-NEXT: plan.step "rms_norm" "blk.5.attn_norm"(
// CHECK-LABEL: plan.program @prefill_c512
// CHECK: plan.step "mhc_pre" "blk.0.attn_hc+attn_norm"({{.*}}) -> ({{.*}}) {bytes_read = 1030 : i64
// CHECK-NOT: "rms_norm"

module {
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.weight @fn {checkpoint = "fn", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 24, 20>, rank_shape = array<i64: 24, 20>, shard = "replicated", shard_dim = 0 : i64, size = 960 : i64}
  plan.weight @base {checkpoint = "base", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 24>, rank_shape = array<i64: 24>, shard = "replicated", shard_dim = 0 : i64, size = 48 : i64}
  plan.weight @scale {checkpoint = "scale", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 3>, rank_shape = array<i64: 3>, shard = "replicated", shard_dim = 0 : i64, size = 6 : i64}
  plan.weight @attn_norm {checkpoint = "attn_norm", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 5>, rank_shape = array<i64: 5>, shard = "replicated", shard_dim = 0 : i64, size = 10 : i64}
  plan.weight @ffn_norm {checkpoint = "ffn_norm", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 5>, rank_shape = array<i64: 5>, shard = "replicated", shard_dim = 0 : i64, size = 10 : i64}
  plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %s0 = plan.alloc "s0" : <[1, 4, 5], bf16>
    %x1 = plan.alloc "x1" : <[1, 5], bf16>
    %p1 = plan.alloc "p1" : <[1, 4], f32>
    %c1 = plan.alloc "c1" : <[1, 4, 4], f32>
    plan.step "mhc_pre" "blk.0.attn_hc"(%s0 : !plan.buffer<[1, 4, 5], bf16>) -> (%x1, %p1, %c1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {hc_eps = 1.0e-6 : f64, norm_eps = 1.0e-5 : f64, sinkhorn_iters = 20 : i64}, states = [], weights = [@fn, @base, @scale]}
    %n1 = plan.alloc "n1" : <[1, 5], bf16>
    plan.step "rms_norm" "blk.0.attn_norm"(%x1 : !plan.buffer<[1, 5], bf16>) -> (%n1 : !plan.buffer<[1, 5], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {eps = 1.0e-6 : f64}, states = [], weights = [@attn_norm]}
    %y1 = plan.alloc "y1" : <[1, 5], bf16>
    plan.step "add" "blk.0.uses_n1"(%n1, %n1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 5], bf16>) -> (%y1 : !plan.buffer<[1, 5], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    %s1 = plan.alloc "s1" : <[1, 4, 5], bf16>
    %x2 = plan.alloc "x2" : <[1, 5], bf16>
    %p2 = plan.alloc "p2" : <[1, 4], f32>
    %c2 = plan.alloc "c2" : <[1, 4, 4], f32>
    plan.step "mhc_pre" "blk.0.attn_hc.post+ffn_hc"(%y1, %p1, %c1, %s0 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>, !plan.buffer<[1, 4, 5], bf16>) -> (%x2, %p2, %c2, %s1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>, !plan.buffer<[1, 4, 5], bf16>) {bytes_read = 1100 : i64, bytes_written = 86 : i64, flops = 30 : i64, params = {}, states = [], weights = [@fn, @base, @scale]}
    %n2 = plan.alloc "n2" : <[1, 5], bf16>
    plan.step "rms_norm" "blk.0.ffn_norm"(%x2 : !plan.buffer<[1, 5], bf16>) -> (%n2 : !plan.buffer<[1, 5], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {}, states = [], weights = [@ffn_norm]}
    %n3 = plan.alloc "n3" : <[1, 5], bf16>
    plan.step "rms_norm" "blk.0.second_norm"(%x2 : !plan.buffer<[1, 5], bf16>) -> (%n3 : !plan.buffer<[1, 5], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {}, states = [], weights = [@ffn_norm]}
    plan.step "mhc_pre" "blk.1.attn_hc"(%s1 : !plan.buffer<[1, 4, 5], bf16>) -> (%x1, %p1, %c1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {}, states = [], weights = [@fn, @base, @scale]}
    plan.step "add" "blk.1.between"(%x2, %x2 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 5], bf16>) -> (%y1 : !plan.buffer<[1, 5], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    plan.step "rms_norm" "blk.1.attn_norm"(%x1 : !plan.buffer<[1, 5], bf16>) -> (%n1 : !plan.buffer<[1, 5], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {}, states = [], weights = [@attn_norm]}
    plan.step "mhc_pre" "blk.2.unweighted"(%s1 : !plan.buffer<[1, 4, 5], bf16>) -> (%x1, %p1, %c1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {}, states = [], weights = [@fn, @base, @scale]}
    plan.step "rms_norm" "blk.2.attn_norm"(%x1 : !plan.buffer<[1, 5], bf16>) -> (%n1 : !plan.buffer<[1, 5], bf16>) {bytes_read = 20 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {}, states = [], weights = []}
    plan.step "mhc_pre" "blk.3.grouped"(%s1 : !plan.buffer<[1, 4, 5], bf16>) -> (%x1, %p1, %c1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {}, states = [], weights = [@fn, @base, @scale]}
    plan.step "rms_norm" "blk.3.attn_norm"(%x1 : !plan.buffer<[1, 5], bf16>) -> (%n1 : !plan.buffer<[1, 5], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {group = 1 : i64}, states = [], weights = [@attn_norm]}
    plan.step "mhc_pre" "blk.4.in_place"(%s1 : !plan.buffer<[1, 4, 5], bf16>) -> (%x1, %p1, %c1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {}, states = [], weights = [@fn, @base, @scale]}
    plan.step "rms_norm" "blk.4.attn_norm"(%x1 : !plan.buffer<[1, 5], bf16>) -> (%x1 : !plan.buffer<[1, 5], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {}, states = [], weights = [@attn_norm]}
    plan.step "mhc_pre" "blk.5.other_buffer"(%s1 : !plan.buffer<[1, 4, 5], bf16>) -> (%x1, %p1, %c1 : !plan.buffer<[1, 5], bf16>, !plan.buffer<[1, 4], f32>, !plan.buffer<[1, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {}, states = [], weights = [@fn, @base, @scale]}
    plan.step "rms_norm" "blk.5.attn_norm"(%x2 : !plan.buffer<[1, 5], bf16>) -> (%n1 : !plan.buffer<[1, 5], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {}, states = [], weights = [@attn_norm]}
  }
  plan.program @prefill_c512 attributes {batch = 1 : i64, kind = "prefill", rows = 512 : i64} {
    %s0 = plan.alloc "s0" : <[512, 4, 5], bf16>
    %x1 = plan.alloc "x1" : <[512, 5], bf16>
    %p1 = plan.alloc "p1" : <[512, 4], f32>
    %c1 = plan.alloc "c1" : <[512, 4, 4], f32>
    plan.step "mhc_pre" "blk.0.attn_hc"(%s0 : !plan.buffer<[512, 4, 5], bf16>) -> (%x1, %p1, %c1 : !plan.buffer<[512, 5], bf16>, !plan.buffer<[512, 4], f32>, !plan.buffer<[512, 4, 4], f32>) {bytes_read = 1000 : i64, bytes_written = 46 : i64, flops = 20 : i64, params = {}, states = [], weights = [@fn, @base, @scale]}
    %n1 = plan.alloc "n1" : <[512, 5], bf16>
    plan.step "rms_norm" "blk.0.attn_norm"(%x1 : !plan.buffer<[512, 5], bf16>) -> (%n1 : !plan.buffer<[512, 5], bf16>) {bytes_read = 30 : i64, bytes_written = 10 : i64, flops = 5 : i64, params = {}, states = [], weights = [@attn_norm]}
  }
}
