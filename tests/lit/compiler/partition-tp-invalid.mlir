// RUN: glm-opt %s --glm-partition-tp=tp=2 --split-input-file --verify-diagnostics

// Sizes that do not divide by the rank count are refused, naming the weight.
// expected-error @+1 {{'glm.weight' op dimension 0 (3) does not split across 2 ranks}}
glm.weight @odd : tensor<3x8xbf16> {checkpoint = "odd", format = #glm.format<bfloat16>, shard = #glm.shard<column>}

// -----

// A row-split weight needs its input split along the features it contracts.
glm.weight @down : tensor<8x16xbf16> {checkpoint = "down", format = #glm.format<bfloat16>, shard = #glm.shard<row, 1>}
func.func @row(%x: tensor<2x16xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{a row-split weight needs its input split along its features}}
  %y = glm.linear %x, @down : tensor<2x16xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
