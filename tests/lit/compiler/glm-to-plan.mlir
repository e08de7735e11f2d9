// RUN: glm-opt %s --glm-to-plan="target=sm_121a precision=bf16 max-seqs=2 max-context=256" | FileCheck %s
// RUN: glm-opt %s --glm-to-plan="target=cpu precision=f32" | FileCheck %s --check-prefix=F32
// RUN: not glm-opt %s --glm-to-plan="target=sm_75" 2>&1 | FileCheck %s --check-prefix=TARGET

// Each program becomes a plan.program: the token ids and the returned logits
// and sampled ids are io buffers, every other value a buffer named after its
// NameLoc; each op a plan.step with its weights in contract order, its
// parameters and its bytes and FLOPs. Kernels come later (plan-select-kernels).

// CHECK: plan.target "sm_121a" {{.*}}precision = "bf16"{{.*}}tp = 2
// CHECK: plan.state_pool {max_context = 256 : i64, max_sequences = 2 : i64, page_tokens = 64 : i64}
// CHECK: plan.weight @w {checkpoint = "w", element = bf16, experts = 0 : i64, format = "bfloat16", global_shape = array<i64: 16, 8>, rank_shape = array<i64: 8, 8>, shard = "column", shard_dim = 0 : i64, size = 128 : i64}
// CHECK: plan.weight @experts {checkpoint = "e.{e}", element = bf16, experts = 4 : i64, format = "exl3", global_shape = array<i64: 4, 6, 8>, rank_shape = array<i64: 4, 6, 8>, shard = "expert", shard_dim = 0 : i64, size = 34848 : i64}
// CHECK: plan.state @s {element = f32, kind = "kda_recurrent", paged = false, unit_shape = array<i64: 2, 4, 4>}
// The sampler's token counts are i32 in every precision.
// CHECK: plan.state @counts {element = i32, kind = "token_counts", paged = false, unit_shape = array<i64: 10>}
// CHECK: plan.program @decode_b1_r1 attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64}
// CHECK: %[[IDS:.*]] = plan.alloc "tokens" {io = "token_ids"} : <[1], i32>
// The step context: positions, state slots, page tables (256 tokens of context in pages of 64),
// sampling parameters, logit_bias (300 pairs), the token mask (10 tokens: one word).
// CHECK: %[[POS:.*]] = plan.alloc "positions" {io = "positions"} : <[1], i32>
// CHECK: %[[SLOTS:.*]] = plan.alloc "sequence_slots" {io = "sequence_slots"} : <[1], i32>
// CHECK: plan.alloc "page_table" {io = "page_table"} : <[1, 4], i32>
// CHECK: %[[SAMPLING:.*]] = plan.alloc "sampling_params" {io = "sampling_params"} : <[1, 16], i32>
// CHECK: %[[BIAS:.*]] = plan.alloc "logit_bias" {io = "logit_bias"} : <[1, 600], i32>
// CHECK: %[[MASK:.*]] = plan.alloc "token_mask" {io = "token_mask"} : <[1, 1], i32>
// A step without results, named by its location.
// CHECK: plan.step "count_tokens" "count"(%[[IDS]], %[[POS]], %[[SLOTS]], %[[SAMPLING]] : {{.*}}) -> () {{.*}}states = [@counts]
// CHECK: %[[E:.*]] = plan.alloc "embed" : <[1, 8], bf16>
// CHECK: plan.step "embedding" "embed"(%[[IDS]] : !plan.buffer<[1], i32>) -> (%[[E]] : !plan.buffer<[1, 8], bf16>) {bytes_read = 20 : i64, bytes_written = 16 : i64, flops = 0 : i64, params = {}, states = [], weights = [@emb]}
// CHECK: %[[Q:.*]] = plan.alloc "q" : <[1, 8], bf16>
// CHECK: plan.step "linear" "q"(%[[E]] : {{.*}}) -> (%[[Q]] : {{.*}}) {bytes_read = 144 : i64, bytes_written = 16 : i64, flops = 128 : i64, params = {}, states = [], weights = [@w]}
// CHECK: plan.alloc "logits" {io = "logits"} : <[1, 10], f32>
// CHECK: %[[NEXT:.*]] = plan.alloc "next.0" {io = "sampled_ids"} : <[1, 21], i32>
// CHECK: %[[LOGPROBS:.*]] = plan.alloc "next.1" {io = "sampled_logprobs"} : <[1, 21], f32>
// CHECK: plan.step "sample" "next"(%{{.*}}, %[[POS]], %[[SLOTS]], %[[SAMPLING]], %[[BIAS]], %[[MASK]] : {{.*}}) -> (%[[NEXT]], %[[LOGPROBS]] : {{.*}}) {{.*}}states = [@counts]
// CHECK-NOT: func.func
// CHECK-NOT: glm.
// CHECK-NOT: launches
// F32: plan.target "cpu"
// F32: plan.alloc "embed" : <[1, 8], f32>
// F32: plan.step "linear" "q"
// TARGET: glm-to-plan: unknown target 'sm_75'

module attributes {glm.tp = 2 : i64} {
  glm.weight @emb : tensor<10x8xbf16> {checkpoint = "emb", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
  glm.weight @w : tensor<8x8xbf16> {checkpoint = "w", format = #glm.format<bfloat16>, glm.global_shape = array<i64: 16, 8>, shard = #glm.shard<column>}
  glm.weight @head : tensor<10x8xbf16> {checkpoint = "head", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
  glm.weight @experts : tensor<4x6x8xbf16> {checkpoint = "e.{e}", format = #glm.format<exl3>, shard = #glm.shard<expert>}
  glm.state @s : tensor<2x4x4xf32> {kind = #glm.state_kind<kda_recurrent>}
  glm.state @counts : tensor<10xf32> {kind = #glm.state_kind<token_counts>}
  func.func @decode_b1_r1(%tokens: tensor<1xi32> loc("tokens")) -> (tensor<1x10xf32>, tensor<1x21xi32>, tensor<1x21xf32>) attributes {glm.program = {batch = 1 : i64, kind = "decode", rows = 1 : i64}} {
    glm.count_tokens %tokens, counts @counts : tensor<1xi32> loc("count")
    %e = glm.embedding %tokens, @emb : tensor<1xi32> -> tensor<1x8xf32> loc("embed")
    %q = glm.linear %e, @w : tensor<1x8xf32> -> tensor<1x8xf32> loc("q")
    %l = glm.linear %q, @head : tensor<1x8xf32> -> tensor<1x10xf32> loc("logits")
    %t, %lp = glm.sample %l, counts @counts {greedy} : tensor<1x10xf32> -> tensor<1x21xi32>, tensor<1x21xf32> loc("next")
    return %l, %t, %lp : tensor<1x10xf32>, tensor<1x21xi32>, tensor<1x21xf32>
  }
}
