// RUN: glm-opt %s --plan-assign-arenas=alignment=64 | FileCheck %s

// Weights one after another; per-sequence states get max_seqs slots; paged
// states share pages (the indexer's keys a row per kpool tokens); activation
// buffers reuse bytes once their last reader ran; io buffers stack.

// CHECK: plan.arena @weights "weights" {alignment = 64 : i64, size = 384 : i64}
// CHECK: plan.arena @activations "activations" {alignment = 64 : i64, size = 128 : i64}
// CHECK: plan.arena @state "state" {alignment = 64 : i64, size = 7168 : i64}
// CHECK: plan.arena @io "io" {alignment = 64 : i64, size = 128 : i64}
// The pool: ceil(64 / 16) pages of context plus a partly filled page per sequence; a page holds
// 16 latent rows (1024 B) and 16 / 4 pooled keys (128 B).
// CHECK: plan.state_pool {max_context = 64 : i64, max_sequences = 2 : i64, page_bytes = 1152 : i64, page_count = 6 : i64, page_tokens = 16 : i64, pool_offset = 256 : i64}
// CHECK: plan.weight @a {{{.*}}offset = 0 : i64
// CHECK: plan.weight @b {{{.*}}offset = 128 : i64
// CHECK: plan.state @slot {{{.*}}offset = 0 : i64{{.*}}size = 256 : i64
// CHECK: plan.state @latent {{{.*}}offset = 256 : i64, offset_in_page = 0 : i64{{.*}}size = 6912 : i64
// CHECK: plan.state @keys {{{.*}}offset = 256 : i64, offset_in_page = 1024 : i64{{.*}}size = 6912 : i64
// CHECK: plan.alloc "in" {io = "token_ids", offset = 0 : i64}
// CHECK: plan.alloc "x" {offset = 0 : i64}
// CHECK: plan.alloc "y" {offset = 64 : i64}
// The third buffer is first written after x's last reader: it takes x's bytes.
// CHECK: plan.alloc "z" {offset = 0 : i64}
// CHECK: plan.alloc "out" {io = "logits", offset = 64 : i64}
module {
  plan.target "cpu" {bandwidth_bytes_per_s = 0.0 : f64, memory_bytes = 0 : i64, precision = "f32", shared_memory_per_block = 0 : i64, sm_count = 0 : i64, tp = 1 : i64}
  plan.state_pool {max_context = 64 : i64, max_sequences = 2 : i64, page_tokens = 16 : i64}
  plan.weight @a {checkpoint = "a", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 25>, rank_shape = array<i64: 25>, shard = "replicated", shard_dim = 0 : i64, size = 100 : i64}
  plan.weight @b {checkpoint = "b", element = f32, experts = 0 : i64, format = "float32", global_shape = array<i64: 64>, rank_shape = array<i64: 64>, shard = "replicated", shard_dim = 0 : i64, size = 256 : i64}
  plan.state @slot {element = f32, kind = "kda_recurrent", paged = false, unit_shape = array<i64: 32>}
  plan.state @latent {element = f32, kind = "mla_latent", paged = true, unit_shape = array<i64: 16>}
  plan.state @keys {element = f32, kind = "index_keys", paged = true, unit_shape = array<i64: 8>}
  plan.program @p attributes {batch = 1 : i64, kind = "decode", rows = 1 : i64} {
    %in = plan.alloc "in" {io = "token_ids"} : <[4], i32>
    %x = plan.alloc "x" : <[16], f32>
    %y = plan.alloc "y" : <[16], f32>
    %z = plan.alloc "z" : <[16], f32>
    %out = plan.alloc "out" {io = "logits"} : <[16], f32>
    plan.step "embedding" "x"(%in : !plan.buffer<[4], i32>) -> (%x : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, kernel = "k", params = {}, states = [], weights = [@a]}
    plan.step "dsa_indexer" "y"(%x : !plan.buffer<[16], f32>) -> (%y : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, kernel = "k", params = {kpool = 4 : i64}, states = [@keys], weights = []}
    plan.step "linear" "z"(%y : !plan.buffer<[16], f32>) -> (%z : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, kernel = "k", params = {}, states = [], weights = [@b]}
    plan.step "linear" "out"(%z : !plan.buffer<[16], f32>) -> (%out : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, kernel = "k", params = {}, states = [], weights = [@b]}
  }
}
