// RUN: glm-opt %s | glm-opt | FileCheck %s
// RUN: glm-opt %s --mlir-print-op-generic | glm-opt | FileCheck %s

// Every glm op parses, verifies against the weights and states it names, and
// prints back to text that parses again. Shapes are a toy KDA + DSA + MoE layer:
// H 8, S 2 streams, 2 heads.

glm.weight @emb : tensor<16x8xbf16> {checkpoint = "model.language_model.embed_tokens.weight", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @hc_fn : tensor<8x16xbf16> {checkpoint = "l0.hc_attn_fn", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @hc_base : tensor<8xbf16> {checkpoint = "l0.hc_attn_base", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @hc_scale : tensor<3xbf16> {checkpoint = "l0.hc_attn_scale", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @norm : tensor<8xbf16> {checkpoint = "l0.input_layernorm.weight", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @q : tensor<8x8xbf16> {checkpoint = "l0.q_proj.weight", format = #glm.format<bfloat16>, shard = #glm.shard<column, 0>}
glm.weight @conv : tensor<8x1x4xf32> {checkpoint = "l0.q_conv1d.weight", format = #glm.format<float32>, shard = #glm.shard<column, 0>}
glm.weight @a_log : tensor<2xf32> {checkpoint = "l0.A_log", format = #glm.format<float32>, shard = #glm.shard<head, 0>}
glm.weight @dt_bias : tensor<8xf32> {checkpoint = "l0.dt_bias", format = #glm.format<float32>, shard = #glm.shard<column, 0>}
glm.weight @o_norm : tensor<4xbf16> {checkpoint = "l0.o_norm.weight", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @wk : tensor<4x8xbf16> {checkpoint = "l3.indexer.wk.weight", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @kv_a : tensor<4x8xbf16> {checkpoint = "l3.kv_a_proj_with_mqa.weight", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @ape : tensor<4x4xbf16> {checkpoint = "l3.ape", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @kv_b : tensor<16x4xbf16> {checkpoint = "l3.kv_b_proj.weight", format = #glm.format<bfloat16>, shard = #glm.shard<head, 0>}
glm.weight @router : tensor<4x8xbf16> {checkpoint = "l3.mlp.gate.weight", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @router_bias : tensor<4xf32> {checkpoint = "l3.mlp.gate.e_score_correction_bias", format = #glm.format<float32>, shard = #glm.shard<replicated>}
glm.weight @gate : tensor<4x6x8xbf16> {checkpoint = "l3.mlp.experts.{e}.gate_proj.weight", format = #glm.format<exl3>, shard = #glm.shard<expert, 0>}
glm.weight @up : tensor<4x6x8xbf16> {checkpoint = "l3.mlp.experts.{e}.up_proj.weight", format = #glm.format<exl3>, shard = #glm.shard<expert, 0>}
glm.weight @down : tensor<4x8x6xbf16> {checkpoint = "l3.mlp.experts.{e}.down_proj.weight", format = #glm.format<exl3>, shard = #glm.shard<expert, 0>}
glm.state @conv_state : tensor<3x8xf32> {kind = #glm.state_kind<conv_window>}
glm.state @kda_state : tensor<2x4x4xf32> {kind = #glm.state_kind<kda_recurrent>}
glm.state @index_state : tensor<4xf32> {kind = #glm.state_kind<index_keys>}
glm.state @latent_state : tensor<4xf32> {kind = #glm.state_kind<mla_latent>}
glm.state @counts : tensor<16xf32> {kind = #glm.state_kind<token_counts>}

// CHECK-LABEL: func.func @layer
func.func @layer(%ids: tensor<3xi32>) -> (tensor<3x2x8xf32>, tensor<3x21xi32>) {
  // CHECK: glm.count_tokens %{{.*}}, counts @counts
  glm.count_tokens %ids, counts @counts : tensor<3xi32>
  // CHECK: glm.embedding %{{.*}}, @emb
  %e = glm.embedding %ids, @emb : tensor<3xi32> -> tensor<3x8xf32>
  // CHECK: glm.expand_streams
  %x = glm.expand_streams %e : tensor<3x8xf32> -> tensor<3x2x8xf32>
  // CHECK: glm.mhc_pre %{{.*}}, @hc_fn, @hc_base, @hc_scale {hc_eps = 9.9999999999999995E-7 : f64, norm_eps = 1.000000e-05 : f64, sinkhorn_iters = 20 : i64}
  %in, %post, %comb = glm.mhc_pre %x, @hc_fn, @hc_base, @hc_scale {norm_eps = 1.0e-5 : f64, hc_eps = 1.0e-6 : f64, sinkhorn_iters = 20 : i64} : (tensor<3x2x8xf32>) -> (tensor<3x8xf32>, tensor<3x2xf32>, tensor<3x2x2xf32>)
  // CHECK: glm.rms_norm %{{.*}}, @norm
  %n = glm.rms_norm %in, @norm {eps = 1.0e-5 : f64} : tensor<3x8xf32>
  // CHECK: glm.rms_norm %{{.*}} {eps
  %u = glm.rms_norm %in {eps = 1.0e-5 : f64, group = 4 : i64} : tensor<3x8xf32>
  // CHECK: glm.linear %{{.*}}, @q :
  %q0 = glm.linear %n, @q : tensor<3x8xf32> -> tensor<3x8xf32>
  // CHECK: glm.short_conv %{{.*}}, @conv, state @conv_state
  %q = glm.short_conv %q0, @conv, state @conv_state : tensor<3x8xf32>
  %b = glm.linear %n, @q : tensor<3x8xf32> -> tensor<3x8xf32>
  %beta = glm.stream_mean %x : tensor<3x2x8xf32> -> tensor<3x8xf32>
  // CHECK: glm.concat
  %bh = glm.concat %q0, %q0 : tensor<3x8xf32>, tensor<3x8xf32> -> tensor<3x16xf32>
  // CHECK: glm.kda {{.*}} state @kda_state
  %o = glm.kda %q, %q, %q, %b, %post, @a_log, @dt_bias, state @kda_state {num_heads = 2 : i64, head_dim = 4 : i64, lower_bound = -5.0 : f64} : (tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x2xf32>) -> tensor<3x8xf32>
  // CHECK: glm.gated_norm
  %g = glm.gated_norm %o, %b, @o_norm {eps = 1.0e-5 : f64, group = 4 : i64} : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  // CHECK: glm.mhc_post
  %r = glm.mhc_post %g, %post, %comb, %x : (tensor<3x8xf32>, tensor<3x2xf32>, tensor<3x2x2xf32>, tensor<3x2x8xf32>) -> tensor<3x2x8xf32>
  // CHECK: glm.dsa_indexer {{.*}} state @index_state
  %ki = glm.linear %n, @wk : tensor<3x8xf32> -> tensor<3x4xf32>
  %c = glm.linear %n, @kv_a : tensor<3x8xf32> -> tensor<3x4xf32>
  %sel = glm.dsa_indexer %q, %ki, %ki, %post, @ape, state @index_state {num_heads = 2 : i64, head_dim = 4 : i64, kpool = 4 : i64, topk = 8 : i64} : (tensor<3x8xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x2xf32>) -> tensor<3x11xi32>
  // CHECK: glm.mla_sparse_attention {{.*}} state @latent_state
  %att = glm.mla_sparse_attention %q, %c, %sel, @kv_b, state @latent_state {num_heads = 2 : i64, qk_head_dim = 4 : i64, v_head_dim = 4 : i64, scale = 0.5 : f64} : (tensor<3x8xf32>, tensor<3x4xf32>, tensor<3x11xi32>) -> tensor<3x8xf32>
  // CHECK: glm.moe_router
  %ids2, %w = glm.moe_router %att, @router, @router_bias {top_k = 2 : i64, n_group = 1 : i64, topk_group = 1 : i64, norm_topk_prob = true, scaling = 2.5 : f64} : (tensor<3x8xf32>) -> (tensor<3x2xi32>, tensor<3x2xf32>)
  // CHECK: glm.moe_experts
  %y = glm.moe_experts %att, %ids2, %w, @gate, @up, @down {limit = 10.0 : f64} : (tensor<3x8xf32>, tensor<3x2xi32>, tensor<3x2xf32>) -> tensor<3x8xf32>
  // CHECK: glm.swiglu
  %s = glm.swiglu %y, %y {limit = 10.0 : f64} : tensor<3x8xf32>
  // CHECK: glm.add
  %sum = glm.add %s, %y : tensor<3x8xf32>
  // CHECK: glm.all_reduce
  %red = glm.all_reduce %sum {world = 2 : i64} : tensor<3x8xf32>
  // CHECK: glm.all_gather
  %gath = glm.all_gather %red {axis = 1 : i64, world = 2 : i64} : tensor<3x8xf32> -> tensor<3x16xf32>
  // CHECK: glm.sample {{.*}} counts @counts
  %tok, %lp = glm.sample %gath, counts @counts {greedy} : tensor<3x16xf32> -> tensor<3x21xi32>, tensor<3x21xf32>
  // CHECK: glm.last_rows {{.*}} : tensor<3x8xf32> -> tensor<1x8xf32>
  %last = glm.last_rows %sum : tensor<3x8xf32> -> tensor<1x8xf32>
  // The MTP head's input: each row's draw, or (following the input) the next row's token.
  // CHECK: glm.next_embedding %{{.*}}, %{{.*}}, @emb {follow_input = false} : tensor<3xi32>, tensor<3x21xi32> -> tensor<3x8xf32>
  %next = glm.next_embedding %ids, %tok, @emb {follow_input = false} : tensor<3xi32>, tensor<3x21xi32> -> tensor<3x8xf32>
  // CHECK: glm.next_embedding %{{.*}}, %{{.*}}, @emb {follow_input = true} : tensor<3xi32>, tensor<3x21xi32> -> tensor<3x8xf32>
  %nextIn = glm.next_embedding %ids, %tok, @emb {follow_input = true} : tensor<3xi32>, tensor<3x21xi32> -> tensor<3x8xf32>
  return %r, %tok : tensor<3x2x8xf32>, tensor<3x21xi32>
}
