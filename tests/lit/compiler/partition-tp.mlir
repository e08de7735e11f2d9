// RUN: glm-opt %s --glm-partition-tp=tp=2 --split-input-file --mlir-use-nameloc-as-prefix | FileCheck %s
// RUN: glm-opt %s --glm-partition-tp=tp=1 --split-input-file | FileCheck %s --check-prefix=TP1

// A column-split projection feeding a row-split one (the MLP pattern): the
// activation between them stays split, the row-split output is a partial sum,
// and one all-reduce restores it before the replicated norm.

// CHECK-LABEL: module attributes {glm.tp = 2 : i64}
// CHECK: glm.weight @up : tensor<8x8xbf16> {{.*}}glm.global_shape = array<i64: 16, 8>
// CHECK: glm.weight @down : tensor<8x8xbf16> {{.*}}glm.global_shape = array<i64: 8, 16>
// CHECK: glm.weight @norm : tensor<8xbf16>
// CHECK-NOT: global_shape
// CHECK: func.func @mlp
// CHECK: %up = glm.linear %x, @up : tensor<2x8xf32> -> tensor<2x8xf32>
// CHECK: %act = glm.swiglu %up, %up {{.*}} : tensor<2x8xf32>
// CHECK: %down = glm.linear %act, @down : tensor<2x8xf32> -> tensor<2x8xf32>
// CHECK: %down.all_reduce = glm.all_reduce %down {world = 2 : i64} : tensor<2x8xf32>
// CHECK: %norm = glm.rms_norm %down.all_reduce, @norm
// TP1: module attributes {glm.tp = 1 : i64}
// TP1-NOT: all_reduce
glm.weight @up : tensor<16x8xbf16> {checkpoint = "up", format = #glm.format<bfloat16>, shard = #glm.shard<column>}
glm.weight @down : tensor<8x16xbf16> {checkpoint = "down", format = #glm.format<bfloat16>, shard = #glm.shard<row, 1>}
glm.weight @norm : tensor<8xbf16> {checkpoint = "norm", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
func.func @mlp(%x: tensor<2x8xf32> loc("x")) -> tensor<2x8xf32> {
  %up = glm.linear %x, @up : tensor<2x8xf32> -> tensor<2x16xf32> loc("up")
  %act = glm.swiglu %up, %up {limit = 10.0 : f64} : tensor<2x16xf32> loc("act")
  %down = glm.linear %act, @down : tensor<2x16xf32> -> tensor<2x8xf32> loc("down")
  %n = glm.rms_norm %down, @norm {eps = 1.0e-5 : f64} : tensor<2x8xf32> loc("norm")
  return %n : tensor<2x8xf32>
}

// -----

// Routed experts split by expert and a split shared expert: both partial, added
// first, all-reduced once.

// CHECK-LABEL: func.func @moe
// CHECK: glm.moe_router
// CHECK: %experts = glm.moe_experts {{.*}}expert_shards = 2 : i64
// CHECK: %sum = glm.add %experts, %shared_down : tensor<2x8xf32>
// CHECK-NEXT: %sum.all_reduce = glm.all_reduce %sum
// CHECK-NOT: glm.all_reduce
// CHECK: return %sum.all_reduce
glm.weight @router : tensor<4x8xbf16> {checkpoint = "router", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @bias : tensor<4xf32> {checkpoint = "bias", format = #glm.format<float32>, shard = #glm.shard<replicated>}
glm.weight @gate : tensor<4x6x8xbf16> {checkpoint = "g.{e}", format = #glm.format<exl3>, shard = #glm.shard<expert>}
glm.weight @up : tensor<4x6x8xbf16> {checkpoint = "u.{e}", format = #glm.format<exl3>, shard = #glm.shard<expert>}
glm.weight @down : tensor<4x8x6xbf16> {checkpoint = "d.{e}", format = #glm.format<exl3>, shard = #glm.shard<expert>}
glm.weight @sgate : tensor<6x8xbf16> {checkpoint = "sg", format = #glm.format<bfloat16>, shard = #glm.shard<column>}
glm.weight @sdown : tensor<8x6xbf16> {checkpoint = "sd", format = #glm.format<bfloat16>, shard = #glm.shard<row, 1>}
func.func @moe(%x: tensor<2x8xf32> loc("x")) -> tensor<2x8xf32> {
  %ids, %w = glm.moe_router %x, @router, @bias {top_k = 2 : i64, n_group = 1 : i64, topk_group = 1 : i64, norm_topk_prob = true, scaling = 2.5 : f64} : (tensor<2x8xf32>) -> (tensor<2x2xi32>, tensor<2x2xf32>) loc("router")
  %r = glm.moe_experts %x, %ids, %w, @gate, @up, @down {limit = 10.0 : f64} : (tensor<2x8xf32>, tensor<2x2xi32>, tensor<2x2xf32>) -> tensor<2x8xf32> loc("experts")
  %g = glm.linear %x, @sgate : tensor<2x8xf32> -> tensor<2x6xf32> loc("shared_gate")
  %a = glm.swiglu %g, %g {limit = 10.0 : f64} : tensor<2x6xf32> loc("shared_act")
  %s = glm.linear %a, @sdown : tensor<2x6xf32> -> tensor<2x8xf32> loc("shared_down")
  %sum = glm.add %r, %s : tensor<2x8xf32> loc("sum")
  return %sum : tensor<2x8xf32>
}

// -----

// KDA split by heads: projections, conv states, the recurrent state and the
// head count all shrink; a vocabulary-split head is gathered before sampling.

// CHECK: glm.state @conv : tensor<3x4xf32>
// CHECK: glm.state @s : tensor<1x4x4xf32>
// CHECK: glm.state @counts : tensor<12xf32>
// CHECK-LABEL: func.func @kda
// CHECK: %kda = glm.kda {{.*}} {head_dim = 4 : i64, lower_bound = -5.000000e+00 : f64, num_heads = 1 : i64} : (tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x4xf32>, tensor<1x1xf32>) -> tensor<1x4xf32>
// CHECK: %o.all_reduce = glm.all_reduce %o
// CHECK: %logits = glm.linear %o.all_reduce, @head : tensor<1x8xf32> -> tensor<1x6xf32>
// CHECK: %logits.all_gather = glm.all_gather %logits {axis = 1 : i64, world = 2 : i64} : tensor<1x6xf32> -> tensor<1x12xf32>
// CHECK: glm.sample %logits.all_gather
glm.weight @q : tensor<8x8xbf16> {checkpoint = "q", format = #glm.format<bfloat16>, shard = #glm.shard<column>}
glm.weight @conv_w : tensor<8x1x4xf32> {checkpoint = "c", format = #glm.format<float32>, shard = #glm.shard<column>}
glm.weight @b : tensor<2x8xbf16> {checkpoint = "b", format = #glm.format<bfloat16>, shard = #glm.shard<column>}
glm.weight @a_log : tensor<2xf32> {checkpoint = "a", format = #glm.format<float32>, shard = #glm.shard<head>}
glm.weight @dt : tensor<8xf32> {checkpoint = "dt", format = #glm.format<float32>, shard = #glm.shard<column>}
glm.weight @o : tensor<8x8xbf16> {checkpoint = "o", format = #glm.format<bfloat16>, shard = #glm.shard<row, 1>}
glm.weight @head : tensor<12x8xbf16> {checkpoint = "lm_head.weight", format = #glm.format<bfloat16>, shard = #glm.shard<column>}
glm.state @conv : tensor<3x8xf32> {kind = #glm.state_kind<conv_window>}
glm.state @s : tensor<2x4x4xf32> {kind = #glm.state_kind<kda_recurrent>}
glm.state @counts : tensor<12xf32> {kind = #glm.state_kind<token_counts>}
func.func @kda(%x: tensor<1x8xf32> loc("x")) -> tensor<1x21xi32> {
  %q0 = glm.linear %x, @q : tensor<1x8xf32> -> tensor<1x8xf32> loc("q_proj")
  %q = glm.short_conv %q0, @conv_w, state @conv : tensor<1x8xf32> loc("q_conv")
  %b = glm.linear %x, @b : tensor<1x8xf32> -> tensor<1x2xf32> loc("b_proj")
  %k = glm.kda %q, %q, %q, %q, %b, @a_log, @dt, state @s {num_heads = 2 : i64, head_dim = 4 : i64, lower_bound = -5.0 : f64} : (tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x2xf32>) -> tensor<1x8xf32> loc("kda")
  %o = glm.linear %k, @o : tensor<1x8xf32> -> tensor<1x8xf32> loc("o")
  %logits = glm.linear %o, @head : tensor<1x8xf32> -> tensor<1x12xf32> loc("logits")
  %t, %lp = glm.sample %logits, counts @counts {greedy} : tensor<1x12xf32> -> tensor<1x21xi32>, tensor<1x21xf32> loc("sample")
  return %t : tensor<1x21xi32>
}

