// RUN: glm-opt %s -split-input-file -verify-diagnostics

// A linear op whose weight disagrees with its operand shapes.
glm.weight @w : tensor<8x4xbf16> {checkpoint = "w", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
func.func @linear(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'glm.linear' op weight @w has shape [8, 4], expected [8, 8]}}
  %y = glm.linear %x, @w : tensor<2x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// A weight symbol that names nothing.
func.func @missing(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{weight @nowhere does not name a glm.weight}}
  %y = glm.linear %x, @nowhere : tensor<2x8xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// A KDA op pointed at a state of the wrong kind.
glm.weight @a : tensor<2xf32> {checkpoint = "a", format = #glm.format<float32>, shard = #glm.shard<replicated>}
glm.weight @dt : tensor<8xf32> {checkpoint = "dt", format = #glm.format<float32>, shard = #glm.shard<replicated>}
glm.state @s : tensor<2x4x4xf32> {kind = #glm.state_kind<mla_latent>}
func.func @kda_state(%x: tensor<3x8xf32>, %b: tensor<3x2xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{state @s is mla_latent, expected kda_recurrent}}
  %o = glm.kda %x, %x, %x, %x, %b, @a, @dt, state @s {num_heads = 2 : i64, head_dim = 4 : i64, lower_bound = -5.0 : f64} : (tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x2xf32>) -> tensor<3x8xf32>
  return %o : tensor<3x8xf32>
}

// -----

// The KDA gate bound scales a sigmoid into a log decay, so it must be negative.
func.func @kda_bound(%x: tensor<3x8xf32>, %b: tensor<3x2xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{lower_bound must be negative}}
  %o = glm.kda %x, %x, %x, %x, %b, @a, @dt, state @s {num_heads = 2 : i64, head_dim = 4 : i64, lower_bound = 5.0 : f64} : (tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x8xf32>, tensor<3x2xf32>) -> tensor<3x8xf32>
  return %o : tensor<3x8xf32>
}

// -----

// The indexer's top-k counts whole pools.
glm.weight @ape : tensor<4x4xbf16> {checkpoint = "ape", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.state @keys : tensor<4xf32> {kind = #glm.state_kind<index_keys>}
func.func @indexer(%q: tensor<3x8xf32>, %k: tensor<3x4xf32>, %w: tensor<3x2xf32>) -> tensor<3x9xi32> {
  // expected-error @+1 {{topk 6 must be a multiple of kpool 4}}
  %s = glm.dsa_indexer %q, %k, %k, %w, @ape, state @keys {num_heads = 2 : i64, head_dim = 4 : i64, kpool = 4 : i64, topk = 6 : i64} : (tensor<3x8xf32>, tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x2xf32>) -> tensor<3x9xi32>
  return %s : tensor<3x9xi32>
}

// -----

// mHC results must match the stream count.
glm.weight @fn : tensor<8x16xbf16> {checkpoint = "fn", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @base : tensor<8xbf16> {checkpoint = "base", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
glm.weight @scale : tensor<3xbf16> {checkpoint = "scale", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
func.func @mhc(%x: tensor<3x2x8xf32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{comb result has shape [3, 3, 3], expected [3, 2, 2]}}
  %in, %post, %comb = glm.mhc_pre %x, @fn, @base, @scale {norm_eps = 1.0e-5 : f64, hc_eps = 1.0e-6 : f64, sinkhorn_iters = 20 : i64} : (tensor<3x2x8xf32>) -> (tensor<3x8xf32>, tensor<3x2xf32>, tensor<3x3x3xf32>)
  return %in : tensor<3x8xf32>
}

// -----

// An all-gather must multiply exactly its axis by the world size.
func.func @gather(%x: tensor<3x8xf32>) -> tensor<6x8xf32> {
  // expected-error @+1 {{gathers [3, 8] from 2 ranks along 1 into [6, 8]}}
  %y = glm.all_gather %x {axis = 1 : i64, world = 2 : i64} : tensor<3x8xf32> -> tensor<6x8xf32>
  return %y : tensor<6x8xf32>
}

// -----

// A shard dimension outside the weight's rank.
// expected-error @+1 {{shard dimension 2 is outside rank 2}}
glm.weight @bad : tensor<8x4xbf16> {checkpoint = "bad", format = #glm.format<bfloat16>, shard = #glm.shard<column, 2>}

// -----

// last_rows takes [B R, D] to [B, D]: B must divide the rows and D stay.
func.func @last_rows(%x: tensor<6x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'glm.last_rows' op takes [B R, D] to [B, D], not [6, 8] to [4, 8]}}
  %y = glm.last_rows %x : tensor<6x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

glm.state @counts : tensor<12xf32> {kind = #glm.state_kind<token_counts>}
func.func @sample_counts_of_another_vocabulary(%l: tensor<2x16xf32>) {
  // expected-error @+1 {{'glm.sample' op state @counts must count the 16 tokens of the logits, not [12]}}
  %t, %p = glm.sample %l, counts @counts : tensor<2x16xf32> -> tensor<2x21xi32>, tensor<2x21xf32>
  return
}

// -----

glm.state @counts : tensor<16xf32> {kind = #glm.state_kind<token_counts>}
func.func @sample_without_the_alternatives(%l: tensor<2x16xf32>) {
  // expected-error @+1 {{'glm.sample' op takes [N, V] logits to ids and logprobs of [N, 21], not [2, 16] to [2, 1] and [2, 1]}}
  %t, %p = glm.sample %l, counts @counts : tensor<2x16xf32> -> tensor<2x1xi32>, tensor<2x1xf32>
  return
}

// -----

glm.state @s : tensor<16xf32> {kind = #glm.state_kind<kda_recurrent>}
func.func @count_tokens_into_a_recurrent_state(%ids: tensor<3xi32>) {
  // expected-error @+1 {{state @s is kda_recurrent, expected token_counts}}
  glm.count_tokens %ids, counts @s : tensor<3xi32>
  return
}

// -----

// next_embedding: a row per id, and every row's draws unless it follows the input.
glm.weight @emb : tensor<16x8xbf16> {checkpoint = "emb", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
func.func @next_embedding_rows(%ids: tensor<3xi32>, %drawn: tensor<3x21xi32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'glm.next_embedding' op gives 2 rows for 3 ids}}
  %e = glm.next_embedding %ids, %drawn, @emb {follow_input = false} : tensor<3xi32>, tensor<3x21xi32> -> tensor<2x8xf32>
  return %e : tensor<2x8xf32>
}

// -----

glm.weight @emb : tensor<16x8xbf16> {checkpoint = "emb", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
func.func @next_embedding_last_draws(%ids: tensor<3xi32>, %drawn: tensor<1x21xi32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{'glm.next_embedding' op reads the draws of every row [3, 21] (or, following the input, of each sequence's last), not [1, 21]}}
  %e = glm.next_embedding %ids, %drawn, @emb {follow_input = false} : tensor<3xi32>, tensor<1x21xi32> -> tensor<3x8xf32>
  return %e : tensor<3x8xf32>
}

// -----

glm.weight @emb : tensor<16x4xbf16> {checkpoint = "emb", format = #glm.format<bfloat16>, shard = #glm.shard<replicated>}
func.func @next_embedding_width(%ids: tensor<3xi32>, %drawn: tensor<3x21xi32>) -> tensor<3x8xf32> {
  // expected-error @+1 {{weight @emb}}
  %e = glm.next_embedding %ids, %drawn, @emb {follow_input = false} : tensor<3xi32>, tensor<3x21xi32> -> tensor<3x8xf32>
  return %e : tensor<3x8xf32>
}
