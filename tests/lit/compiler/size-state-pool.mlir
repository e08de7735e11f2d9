// RUN: glm-opt %s --plan-assign-arenas=alignment=64 --plan-size-state-pool=pool-tokens=100 | FileCheck %s --check-prefix=TOKENS
// RUN: sed 's/memory_bytes = 0/memory_bytes = 12000/' %s | glm-opt --plan-assign-arenas=alignment=64 --plan-size-state-pool=host-reserve=1000 | FileCheck %s --check-prefix=MEMORY
// RUN: sed 's/memory_bytes = 0/memory_bytes = 600000/' %s | glm-opt --plan-assign-arenas=alignment=64 --plan-size-state-pool | FileCheck %s --check-prefix=CAPPED
// RUN: sed 's/memory_bytes = 0/memory_bytes = 5000/' %s | not glm-opt --plan-assign-arenas=alignment=64 --plan-size-state-pool 2>&1 | FileCheck %s --check-prefix=SMALL
// RUN: not glm-opt %s --plan-assign-arenas=alignment=64 --plan-size-state-pool=pool-tokens=40 2>&1 | FileCheck %s --check-prefix=BELOW
// RUN: glm-opt %s --plan-assign-arenas=alignment=64 --plan-size-state-pool | FileCheck %s --check-prefix=CPU

// max_context (64) is each request's window; the pool (pages of 16 tokens, 1152 B) is sized apart.
// pool-tokens=100: ceil(100 / 16) = 7 pages and a partly filled one per sequence (2).
// TOKENS: plan.arena @state "state" {alignment = 64 : i64, size = 10624 : i64}
// TOKENS: plan.state_pool {{{.*}}page_count = 9 : i64
// TOKENS: plan.state @latent {{{.*}}size = 10368 : i64
// Memory 12000 less a reserve of 1000, weights 384, activations 128, io 128, slots 256: 10104
// bytes, 8 whole pages.
// MEMORY: plan.state_pool {{{.*}}page_count = 8 : i64
// MEMORY: plan.state @keys {{{.*}}size = 9216 : i64
// Plenty of memory: at most every sequence at a full window, 2 x (4 + 1) pages.
// CAPPED: plan.state_pool {{{.*}}page_count = 10 : i64
// SMALL: cpu's 0.00 GiB less a host reserve of 0.00 GiB and the plan's other 0.00 GiB leaves a page pool of 16 tokens, less than one --max-context window of 64 tokens (the largest window that fits is 16
// BELOW: --pool-tokens 40 holds less than one --max-context window of 64 tokens
// A target without memory keeps plan-assign-arenas' pool: one window and a page per sequence.
// CPU: plan.state_pool {{{.*}}page_count = 6 : i64
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
    %out = plan.alloc "out" {io = "logits"} : <[16], f32>
    plan.step "embedding" "x"(%in : !plan.buffer<[4], i32>) -> (%x : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, kernel = "k", params = {}, states = [], weights = [@a]}
    plan.step "dsa_indexer" "y"(%x : !plan.buffer<[16], f32>) -> (%y : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, kernel = "k", params = {kpool = 4 : i64}, states = [@keys], weights = []}
    plan.step "linear" "out"(%y : !plan.buffer<[16], f32>) -> (%out : !plan.buffer<[16], f32>) {bytes_read = 0 : i64, bytes_written = 0 : i64, flops = 0 : i64, kernel = "k", params = {}, states = [], weights = [@b]}
  }
}
