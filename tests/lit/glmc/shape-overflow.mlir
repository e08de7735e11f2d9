// RUN: glm-opt %s -split-input-file -verify-diagnostics
// Verifier arithmetic on a hostile module's shapes and attributes is checked: an op whose
// expected shape does not fit in int64 is refused, not overflowed (issue 25).

func.func @kda_width(%x: tensor<3x8xf32>, %b: tensor<3x2xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{num_heads x head_dim overflows int64}}
  %o = glm.kda %x, %x, %x, %x, %b, @a, @dt, state @s {num_heads = 4611686018427387904 : i64, head_dim = 4 : i64, lower_bound = -5.0 : f64} : (tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x2xf32>) -> tensor<3x8xf32>
  return %o : tensor<3x8xf32>
}

// -----

glm.weight @ape : tensor<3x4xbf16> {checkpoint = "ape", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.state @keys : tensor<4xf32> {kind = #glm.state_kind<index_keys>}
func.func @indexer_pools(%q: tensor<3x8xf32>, %k: tensor<3x4xf32>, %w: tensor<3x2xf32>) -> tensor<3x9xi32> {
  // expected-error @+1 {{num_heads x head_dim or topk + kpool - 1 overflows int64}}
  %s = glm.dsa_indexer %q, %k, %k, %w, @ape, state @keys {num_heads = 2 : i64, head_dim = 4 : i64, kpool = 3 : i64, topk = 9223372036854775806 : i64} : (tensor<3x8xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x2xf32>) -> tensor<3x9xi32>
  return %s : tensor<3x9xi32>
}

// -----

func.func @gather(%x: tensor<4611686018427387904x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{the gathered dimension overflows int64}}
  %g = glm.all_gather %x {axis = 0 : i64, world = 4 : i64} : tensor<4611686018427387904x8xf32> -> tensor<4x8xf32>
  return %g : tensor<4x8xf32>
}
