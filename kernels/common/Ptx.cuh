// PTX wrappers the kernels share: streaming and read-only global loads, the sm_80 tensor-core
// mma.sync and its shared-memory helpers, cp.async, and the sm_90 thread-block-cluster barrier and
// distributed shared memory. Compiled by NVRTC only (no CUDA headers), so everything below is
// inline PTX.
#pragma once

#include "kernels/common/DeviceTypes.h"

namespace glm::kernels::ptx {

struct U32x4 {
  uint32_t x, y, z, w;
};

__device__ __forceinline__ U32x4 zero4() { return U32x4{0u, 0u, 0u, 0u}; }

/// A 16-byte load of data read once per call (weights): it bypasses L1, so that the activations
/// every warp re-reads stay there, and has L2 fetch the 256 bytes around it.
__device__ __forceinline__ U32x4 loadStream(const void *p) {
  U32x4 v;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

/// A 16-byte load of read-only data many warps share (activations): cached in L1.
__device__ __forceinline__ U32x4 loadShared16(const void *p) {
  U32x4 v;
  asm("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ void loadShared8(const void *p, uint32_t &a, uint32_t &b) {
  asm("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(a), "=r"(b) : "l"(p));
}

/// d += a · b on the tensor cores: a is 16 x 16 bf16 (row-major fragment), b 16 x 8 bf16
/// (column-major fragment), d 16 x 8 f32.
__device__ __forceinline__ void mmaBf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                        uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// d += a · b on the tensor cores with fp16 inputs: a 16 x 16 (row-major fragment), b 16 x 8
/// (column-major fragment), d 16 x 8 f32.
__device__ __forceinline__ void mmaF16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                       uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/// The shared-memory address of a generic pointer, by the compiler's builtin, which it can fold
/// into the surrounding address arithmetic (an inline-PTX cvta cannot be).
__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], uint32_t address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

/// 16 bytes global -> shared, asynchronously; `bytes` < 16 zero-fills the rest (0: all zero).
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void *src, uint32_t bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes));
}
/// cpAsync16 where `copy`, else nothing at all (not even zeros written), without a branch.
__device__ __forceinline__ void cpAsync16If(bool copy, uint32_t dst, const void *src,
                                            uint32_t bytes) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %3, 0;\n"
               "@p cp.async.cg.shared.global [%0], [%1], 16, %2;\n}" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(static_cast<uint32_t>(copy)));
}
/// 4 bytes global -> shared, asynchronously; `bytes` 0 zero-fills.
__device__ __forceinline__ void cpAsync4(uint32_t dst, const void *src, uint32_t bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(bytes));
}
/// 8 bytes global -> shared, asynchronously; `bytes` < 8 zero-fills the rest.
__device__ __forceinline__ void cpAsync8(uint32_t dst, const void *src, uint32_t bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;"); }
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N));
}

__device__ __forceinline__ void storeShared16(uint32_t address, uint32_t a, uint32_t b, uint32_t c,
                                              uint32_t d) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(address), "r"(a), "r"(b), "r"(c),
               "r"(d));
}

/// A block-wide barrier (barrier 0) that warps may reach from different places in the code, e.g.
/// the two instances of a loop templated on a warp-uniform choice: __syncthreads' aligned form
/// requires every thread to execute the same instruction.
__device__ __forceinline__ void blockSync() { asm volatile("barrier.sync 0;" ::: "memory"); }

/// The dynamic shared memory this launch was given, in bytes.
__device__ __forceinline__ uint32_t dynamicSharedBytes() {
  uint32_t r;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}

// --- thread-block clusters (sm_90+) -------------------------------------------------------------

/// This block's rank within its cluster.
__device__ __forceinline__ unsigned clusterRank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

/// Every thread of every block of the cluster arrives and waits: shared-memory writes before it
/// are visible to the cluster's blocks after it (release / acquire).
__device__ __forceinline__ void clusterSync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::
                   : "memory");
}

/// An f32 in the shared memory of cluster block `rank`, at the offset `address` (sharedAddress of
/// this block's copy of the variable) has in this block.
__device__ __forceinline__ float loadClusterShared(uint32_t address, unsigned rank) {
  uint32_t remote;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

/// The same for a u32, a u64 and an f64.
__device__ __forceinline__ uint32_t loadClusterSharedU32(uint32_t address, unsigned rank) {
  uint32_t remote, v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(v) : "r"(remote) : "memory");
  return v;
}
__device__ __forceinline__ uint64_t loadClusterSharedU64(uint32_t address, unsigned rank) {
  uint32_t remote;
  uint64_t v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
  asm volatile("ld.shared::cluster.u64 %0, [%1];" : "=l"(v) : "r"(remote) : "memory");
  return v;
}

} // namespace glm::kernels::ptx
