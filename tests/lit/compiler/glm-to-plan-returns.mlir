// RUN: not glm-opt %s --glm-to-plan="target=cpu precision=f32" --split-input-file 2>&1 | FileCheck %s

// A program's returned values are its io slots by position: logits, the sampler's ids and
// logprobs, an MTP head's ids. Anything else is refused, naming the value.
// CHECK: error: 'func.func' op returns 2 values; a program returns its logits, the sampler's ids and logprobs, and an MTP head's ids
module attributes {glm.tp = 1 : i64} {
  glm.weight @head : tensor<10x8xbf16> {checkpoint = "head", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
  glm.state @counts : tensor<10xf32> {kind = #glm.state_kind<token_counts>}
  func.func @decode_b1_r1(%tokens: tensor<1xi32>, %h: tensor<1x8xf32>) -> (tensor<1x10xf32>, tensor<1x21xi32>) attributes {glm.program = {batch = 1 : i64, kind = "decode", rows = 1 : i64}} {
    %l = glm.linear %h, @head : tensor<1x8xf32> -> tensor<1x10xf32>
    %t, %lp = glm.sample %l, counts @counts : tensor<1x10xf32> -> tensor<1x21xi32>, tensor<1x21xf32>
    return %l, %t : tensor<1x10xf32>, tensor<1x21xi32>
  }
}

// -----

// CHECK: error: 'func.func' op returns value 2 as sampled_logprobs, which is not what it computes
module attributes {glm.tp = 1 : i64} {
  glm.weight @head : tensor<10x8xbf16> {checkpoint = "head", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
  glm.state @counts : tensor<10xf32> {kind = #glm.state_kind<token_counts>}
  func.func @decode_b1_r1(%tokens: tensor<1xi32>, %h: tensor<1x8xf32>) -> (tensor<1x10xf32>, tensor<1x21xi32>, tensor<1x21xi32>) attributes {glm.program = {batch = 1 : i64, kind = "decode", rows = 1 : i64}} {
    %l = glm.linear %h, @head : tensor<1x8xf32> -> tensor<1x10xf32>
    %t, %lp = glm.sample %l, counts @counts : tensor<1x10xf32> -> tensor<1x21xi32>, tensor<1x21xf32>
    return %l, %t, %t : tensor<1x10xf32>, tensor<1x21xi32>, tensor<1x21xi32>
  }
}
