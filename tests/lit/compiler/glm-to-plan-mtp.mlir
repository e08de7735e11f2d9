// RUN: glm-opt %s --glm-to-plan="target=sm_121a precision=bf16 max-seqs=1 max-context=256" | FileCheck %s

// A prefill program with an MTP head (models/glm53/Builder.cpp's shape, at toy widths): the trunk's
// head runs on the last row, the MTP head's first ops on every row after it, then on its last row.
//
// The steps on the picked row read the last_rows step's positions; the head's next_embedding, on
// every row, reads the program's.
// CHECK: %[[POS:.*]] = plan.alloc "positions" {io = "positions"} : <[4], i32>
// CHECK: %[[SAMPLING:.*]] = plan.alloc "sampling_params" {io = "sampling_params"}
// CHECK: %[[PICKED:.*]] = plan.alloc "last.positions" : <[1], i32>
// CHECK: %[[DRAWN:.*]] = plan.alloc "next.0" {io = "sampled_ids"} : <[1, 21], i32>
// CHECK: plan.step "sample" "next"(%{{.*}}, %[[PICKED]],
// One table row a token: the ids, draws, positions and sampling words (180 bytes) and 4 rows of 16.
// CHECK: plan.step "next_embedding" "mtp.embed"(%{{.*}}, %[[DRAWN]], %[[POS]], %[[SAMPLING]] : {{.*}}) {bytes_read = 244 : i64, {{.*}}params = {follow_input = true}, {{.*}}weights = [@emb]}
// CHECK: plan.step "linear" "mtp.u"
// CHECK: %[[MTP_PICKED:.*]] = plan.alloc "mtp.last.positions" : <[1], i32>
// The head's bf16 logits widen for its sampler as the trunk's do, into a buffer that is no io slot;
// its draws are the plan's DraftIds.
// CHECK: %[[NARROW:.*]] = plan.alloc "mtp.logits.bf16" : <[1, 10], bf16>
// CHECK: %[[WIDE:.*]] = plan.alloc "mtp.logits" : <[1, 10], f32>
// CHECK: plan.step "convert" "mtp.logits.f32"(%[[NARROW]] : {{.*}}) -> (%[[WIDE]] :
// CHECK: %[[GUESS:.*]] = plan.alloc "mtp.sample.0" {io = "draft_ids"} : <[1, 21], i32>
// CHECK: plan.alloc "mtp.sample.1" : <[1, 21], f32>
// CHECK: plan.step "sample" "mtp.sample"(%[[WIDE]], %[[MTP_PICKED]], {{.*}}) -> (%[[GUESS]], {{.*}}params = {greedy}

module attributes {glm.tp = 1 : i64} {
  glm.weight @emb : tensor<10x8xbf16> {checkpoint = "emb", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
  glm.weight @w : tensor<8x8xbf16> {checkpoint = "w", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
  glm.weight @head : tensor<10x8xbf16> {checkpoint = "head", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
  glm.state @counts : tensor<10xf32> {kind = #glm.state_kind<token_counts>}
  func.func @prefill_c4(%tokens: tensor<4xi32> loc("tokens")) -> (tensor<1x10xf32>, tensor<1x21xi32>, tensor<1x21xf32>, tensor<1x21xi32>) attributes {glm.program = {batch = 1 : i64, kind = "prefill", rows = 4 : i64, logits = "last_row"}} {
    glm.count_tokens %tokens, counts @counts : tensor<4xi32> loc("count")
    %e = glm.embedding %tokens, @emb : tensor<4xi32> -> tensor<4x8xf32> loc("embed")
    %h = glm.linear %e, @w : tensor<4x8xf32> -> tensor<4x8xf32> loc("h")
    %hl = glm.last_rows %h : tensor<4x8xf32> -> tensor<1x8xf32> loc("last")
    %l = glm.linear %hl, @head : tensor<1x8xf32> -> tensor<1x10xf32> loc("logits")
    %t, %lp = glm.sample %l, counts @counts : tensor<1x10xf32> -> tensor<1x21xi32>, tensor<1x21xf32> loc("next")
    %n = glm.next_embedding %tokens, %t, @emb {follow_input = true} : tensor<4xi32>, tensor<1x21xi32> -> tensor<4x8xf32> loc("mtp.embed")
    %u = glm.linear %n, @w : tensor<4x8xf32> -> tensor<4x8xf32> loc("mtp.u")
    %ul = glm.last_rows %u : tensor<4x8xf32> -> tensor<1x8xf32> loc("mtp.last")
    %ml = glm.linear %ul, @head : tensor<1x8xf32> -> tensor<1x10xf32> loc("mtp.logits")
    %dt, %dlp = glm.sample %ml, counts @counts {greedy} : tensor<1x10xf32> -> tensor<1x21xi32>, tensor<1x21xf32> loc("mtp.sample")
    return %l, %t, %lp, %dt : tensor<1x10xf32>, tensor<1x21xi32>, tensor<1x21xf32>, tensor<1x21xi32>
  }
}
