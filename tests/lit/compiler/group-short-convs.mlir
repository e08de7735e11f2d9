// RUN: glm-opt %s --plan-group-short-convs | FileCheck %s

// Convs of one step context, one window and one weight type become one short_conv step of their
// parts at the first one's place (x_0..x_P-1, then the context; weights, states and results in
// part order; bytes summed), 4 parts at most: q, k, v and a. Not `late`, whose input a step in
// between writes (what a CPU plan's interleaved projections would be before plan-group-linears):
// it starts a group of its own at its place, which b, c and d join. Never `wide` (a window of 3)
// or `other` (another slots buffer); e is left alone, after two full groups.

// CHECK-LABEL: plan.program @decode_b1_r1
// CHECK: %[[Q:.*]] = plan.alloc "yq"
// CHECK-NEXT: %[[K:.*]] = plan.alloc "yk"
// CHECK-NEXT: %[[V:.*]] = plan.alloc "yv"
// CHECK-NEXT: %[[A:.*]] = plan.alloc "ya"
// CHECK-NEXT: plan.step "short_conv" "blk.0.q+k+v+a"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[POS:.*]], %[[SLOTS:.*]] : {{.*}}) -> (%[[Q]], %[[K]], %[[V]], %[[A]] : {{.*}}) {bytes_read = 40 : i64, bytes_written = 4 : i64, {{.*}} states = [@q.state, @k.state, @v.state, @a.state], weights = [@q, @k, @v, @a]}
// CHECK: plan.step "swiglu" "blk.0.makes_late"
// CHECK: plan.step "short_conv" "blk.0.late+b+c+d"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[POS]], %[[SLOTS]] : {{.*}} states = [@late.state, @b.state, @c.state, @d.state]
// CHECK-NEXT: plan.alloc "ywide"
// CHECK-NEXT: plan.step "short_conv" "blk.0.wide"
// CHECK-NEXT: plan.alloc "yother"
// CHECK-NEXT: plan.step "short_conv" "blk.0.other"
// CHECK-NEXT: plan.alloc "ye"
// CHECK-NEXT: plan.step "short_conv" "blk.0.e"
// CHECK-NOT: plan.step
module {
  plan.target "sm_90a" {bandwidth_bytes_per_s = 4.8e12 : f64, memory_bytes = 0 : i64, precision = "bf16", shared_memory_per_block = 232448 : i64, sm_count = 132 : i64, tp = 1 : i64}
  plan.weight @q {checkpoint = "q", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 8, 1, 4>, rank_shape = array<i64: 8, 1, 4>, shard = "replicated", shard_dim = 0 : i64, size = 128 : i64}
  plan.weight @k {checkpoint = "k", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 8, 1, 4>, rank_shape = array<i64: 8, 1, 4>, shard = "replicated", shard_dim = 0 : i64, size = 128 : i64}
  plan.weight @v {checkpoint = "v", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 8, 1, 4>, rank_shape = array<i64: 8, 1, 4>, shard = "replicated", shard_dim = 0 : i64, size = 128 : i64}
  plan.weight @late {checkpoint = "late", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 8, 1, 4>, rank_shape = array<i64: 8, 1, 4>, shard = "replicated", shard_dim = 0 : i64, size = 128 : i64}
  plan.weight @wide {checkpoint = "wide", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 8, 1, 3>, rank_shape = array<i64: 8, 1, 3>, shard = "replicated", shard_dim = 0 : i64, size = 96 : i64}
  plan.weight @other {checkpoint = "other", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 8, 1, 4>, rank_shape = array<i64: 8, 1, 4>, shard = "replicated", shard_dim = 0 : i64, size = 128 : i64}
  plan.weight @a {checkpoint = "a", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 8, 1, 4>, rank_shape = array<i64: 8, 1, 4>, shard = "replicated", shard_dim = 0 : i64, size = 128 : i64}
  plan.weight @b {checkpoint = "b", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 8, 1, 4>, rank_shape = array<i64: 8, 1, 4>, shard = "replicated", shard_dim = 0 : i64, size = 128 : i64}
  plan.weight @c {checkpoint = "c", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 8, 1, 4>, rank_shape = array<i64: 8, 1, 4>, shard = "replicated", shard_dim = 0 : i64, size = 128 : i64}
  plan.weight @d {checkpoint = "d", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 8, 1, 4>, rank_shape = array<i64: 8, 1, 4>, shard = "replicated", shard_dim = 0 : i64, size = 128 : i64}
  plan.weight @e {checkpoint = "e", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 8, 1, 4>, rank_shape = array<i64: 8, 1, 4>, shard = "replicated", shard_dim = 0 : i64, size = 128 : i64}
  plan.state @q.state {element = bf16, kind = "conv_window", paged = false, size = 192 : i64, unit_shape = array<i64: 3, 8>}
  plan.state @k.state {element = bf16, kind = "conv_window", paged = false, size = 192 : i64, unit_shape = array<i64: 3, 8>}
  plan.state @v.state {element = bf16, kind = "conv_window", paged = false, size = 192 : i64, unit_shape = array<i64: 3, 8>}
  plan.state @late.state {element = bf16, kind = "conv_window", paged = false, size = 192 : i64, unit_shape = array<i64: 3, 8>}
  plan.state @wide.state {element = bf16, kind = "conv_window", paged = false, size = 192 : i64, unit_shape = array<i64: 3, 8>}
  plan.state @other.state {element = bf16, kind = "conv_window", paged = false, size = 192 : i64, unit_shape = array<i64: 3, 8>}
  plan.state @a.state {element = bf16, kind = "conv_window", paged = false, size = 192 : i64, unit_shape = array<i64: 3, 8>}
  plan.state @b.state {element = bf16, kind = "conv_window", paged = false, size = 192 : i64, unit_shape = array<i64: 3, 8>}
  plan.state @c.state {element = bf16, kind = "conv_window", paged = false, size = 192 : i64, unit_shape = array<i64: 3, 8>}
  plan.state @d.state {element = bf16, kind = "conv_window", paged = false, size = 192 : i64, unit_shape = array<i64: 3, 8>}
  plan.state @e.state {element = bf16, kind = "conv_window", paged = false, size = 192 : i64, unit_shape = array<i64: 3, 8>}
  plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %pos = plan.alloc "positions" : <[1], i32>
    %slots = plan.alloc "slots" : <[1], i32>
    %slots2 = plan.alloc "slots2" : <[1], i32>
    %g = plan.alloc "g" : <[1, 16], bf16>
    %xq = plan.alloc "xq" : <[1, 8], bf16>
    %xk = plan.alloc "xk" : <[1, 8], bf16>
    %xv = plan.alloc "xv" : <[1, 8], bf16>
    %xwide = plan.alloc "xwide" : <[1, 8], bf16>
    %xother = plan.alloc "xother" : <[1, 8], bf16>
    %xa = plan.alloc "xa" : <[1, 8], bf16>
    %xb = plan.alloc "xb" : <[1, 8], bf16>
    %xc = plan.alloc "xc" : <[1, 8], bf16>
    %xd = plan.alloc "xd" : <[1, 8], bf16>
    %xe = plan.alloc "xe" : <[1, 8], bf16>
    %yq = plan.alloc "yq" : <[1, 8], bf16>
    plan.step "short_conv" "blk.0.q"(%xq, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%yq : !plan.buffer<[1, 8], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 0 : i64, params = {}, states = [@q.state], weights = [@q]}
    %xlate = plan.alloc "xlate" : <[1, 8], bf16>
    plan.step "swiglu" "blk.0.makes_late"(%g : !plan.buffer<[1, 16], bf16>) -> (%xlate : !plan.buffer<[1, 8], bf16>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, params = {}, states = [], weights = []}
    %ylate = plan.alloc "ylate" : <[1, 8], bf16>
    plan.step "short_conv" "blk.0.late"(%xlate, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%ylate : !plan.buffer<[1, 8], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 0 : i64, params = {}, states = [@late.state], weights = [@late]}
    %yk = plan.alloc "yk" : <[1, 8], bf16>
    plan.step "short_conv" "blk.0.k"(%xk, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%yk : !plan.buffer<[1, 8], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 0 : i64, params = {}, states = [@k.state], weights = [@k]}
    %ywide = plan.alloc "ywide" : <[1, 8], bf16>
    plan.step "short_conv" "blk.0.wide"(%xwide, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%ywide : !plan.buffer<[1, 8], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 0 : i64, params = {}, states = [@wide.state], weights = [@wide]}
    %yother = plan.alloc "yother" : <[1, 8], bf16>
    plan.step "short_conv" "blk.0.other"(%xother, %pos, %slots2 : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%yother : !plan.buffer<[1, 8], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 0 : i64, params = {}, states = [@other.state], weights = [@other]}
    %yv = plan.alloc "yv" : <[1, 8], bf16>
    plan.step "short_conv" "blk.0.v"(%xv, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%yv : !plan.buffer<[1, 8], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 0 : i64, params = {}, states = [@v.state], weights = [@v]}
    %ya = plan.alloc "ya" : <[1, 8], bf16>
    plan.step "short_conv" "blk.0.a"(%xa, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%ya : !plan.buffer<[1, 8], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 0 : i64, params = {}, states = [@a.state], weights = [@a]}
    %yb = plan.alloc "yb" : <[1, 8], bf16>
    plan.step "short_conv" "blk.0.b"(%xb, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%yb : !plan.buffer<[1, 8], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 0 : i64, params = {}, states = [@b.state], weights = [@b]}
    %yc = plan.alloc "yc" : <[1, 8], bf16>
    plan.step "short_conv" "blk.0.c"(%xc, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%yc : !plan.buffer<[1, 8], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 0 : i64, params = {}, states = [@c.state], weights = [@c]}
    %yd = plan.alloc "yd" : <[1, 8], bf16>
    plan.step "short_conv" "blk.0.d"(%xd, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%yd : !plan.buffer<[1, 8], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 0 : i64, params = {}, states = [@d.state], weights = [@d]}
    %ye = plan.alloc "ye" : <[1, 8], bf16>
    plan.step "short_conv" "blk.0.e"(%xe, %pos, %slots : !plan.buffer<[1, 8], bf16>, !plan.buffer<[1], i32>, !plan.buffer<[1], i32>) -> (%ye : !plan.buffer<[1, 8], bf16>) {bytes_read = 10 : i64, bytes_written = 1 : i64, flops = 0 : i64, params = {}, states = [@e.state], weights = [@e]}
  }
}
