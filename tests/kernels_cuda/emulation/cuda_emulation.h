// A CPU emulation of the CUDA subset kernels/*.cu and their host code use, so that tests/kernels_cuda
// (every GPU kernel against its CPU reference, bit for bit) also runs where there is no GPU, CI included
// (target test_kernels_cuda_emulated; this header is force-included before every source of it).
//
// Model: every CUDA thread is a fiber on one OS thread (a stack of its own, switched by a few
// instructions, cuda_emulation.cpp). A block's fibers run round-robin, each until its next sync point
// (__syncthreads, a warp shuffle); blocks run one after another; a launch returns when the grid is done,
// so every stream is synchronous. __shared__ variables are function statics (one block at a time uses
// them). Device memory is host memory from malloc, filled with 0xA5 (cudaMalloc promises no contents:
// a kernel that reads memory nobody wrote gets garbage, as on a GPU whose allocator reuses memory).
// PULSE_CUDA_EMULATION_REVERSE=1 runs the blocks, and the fibers between sync points, in reverse order.
//
// What it checks: the kernels' arithmetic, indexing, scans, compaction and validation logic, launch
// shapes (a block over 1024 threads or a grid over the limits fails the launch), barriers every thread
// of a block reaches (a deadlock aborts naming the block), and the host code's calls. What it cannot:
// timing, occupancy, races between threads that a real GPU interleaves (only the two orders above are
// tried), the memory model, and code that relies on warp lock-step without a sync. Not for production:
// nothing in pulse's binaries includes it.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#define PULSE_CUDA_EMULATION 1
#define __CUDACC__ 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __shared__ static
#define __restrict__

// ---- vector types ---------------------------------------------------------------------------------
struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
static inline float4 make_float4(float a, float b, float c, float d) {
  return {a, b, c, d};
}
constexpr int warpSize = 32;

// ---- runtime API (static: never confused with a real libcudart linked into the same binary) ----------
typedef int cudaError_t;
enum : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9
};
struct CUstream_st;
typedef CUstream_st* cudaStream_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};

namespace pulse::cuda_emulation {
/// The error the next cudaGetLastError returns (a failed launch sets it).
cudaError_t& last_error();
}  // namespace pulse::cuda_emulation

static inline const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument (emulated)";
    case cudaErrorMemoryAllocation:
      return "out of memory (emulated)";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument (emulated)";
    default:
      return "unknown error (emulated)";
  }
}
static inline cudaError_t cudaGetLastError() {
  const cudaError_t e = pulse::cuda_emulation::last_error();
  pulse::cuda_emulation::last_error() = cudaSuccess;
  return e;
}
static inline cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
static inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::malloc(n ? n : 1);
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xA5, n ? n : 1);
  return cudaSuccess;
}
template <typename T>
static inline cudaError_t cudaMalloc(T** p, size_t n) {
  return cudaMalloc(reinterpret_cast<void**>(p), n);
}
static inline cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}
static inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  if (n) std::memmove(d, s, n);
  return cudaSuccess;
}
static inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k,
                                          cudaStream_t = nullptr) {
  return cudaMemcpy(d, s, n, k);
}
static inline cudaError_t cudaMemset(void* p, int v, size_t n) {
  if (n) std::memset(p, v, n);
  return cudaSuccess;
}
static inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t = nullptr) {
  return cudaMemset(p, v, n);
}
static inline cudaError_t cudaStreamSynchronize(cudaStream_t) {
  return cudaSuccess;
}
static inline cudaError_t cudaDeviceSynchronize() {
  return cudaSuccess;
}

// ---- fibers and launches --------------------------------------------------------------------------
namespace pulse::cuda_emulation {

/// A barrier over n participants; exited participants count as arrived (as on sm_70+).
struct Sync {
  int n = 0, arrived = 0, exited = 0;
  uint64_t generation = 0;
  bool or_acc = false, last_or = false;
  alignas(16) unsigned char lanes[32][16];  ///< a warp's shuffle exchange
};

/// The thread (fiber) running now, its block's barriers and the launch geometry.
uint3& thread_idx();
uint3& block_idx();
dim3& block_dim();
dim3& grid_dim();
Sync& block_sync();
Sync& warp_sync();  ///< the running thread's warp
/// Waits at `s` until every participant arrived; returns the OR of their `pred`.
bool wait_at(Sync& s, bool pred = false);

/// Runs body() as every thread of `grid` x `block` (synchronously); a launch over CUDA's limits sets
/// last_error() to cudaErrorInvalidConfiguration and runs nothing.
void run_grid(dim3 grid, dim3 block, void (*body)(void*), void* arg);

/// PULSE_LAUNCH's object: Launch(grid, block, stream, kernel)(args...) runs kernel(args...) on the grid.
template <typename K>
struct Launch {
  dim3 grid, block;
  K kernel;
  template <typename G, typename B>
  Launch(G g, B b, cudaStream_t, K k) : grid(dim3(g)), block(dim3(b)), kernel(k) {}
  template <typename... A>
  void operator()(A... args) {
    auto body = [&] { kernel(args...); };
    using Body = decltype(body);
    run_grid(
        grid, block, [](void* p) { (*static_cast<Body*>(p))(); }, &body);
  }
};
template <typename G, typename B, typename K>
Launch(G, B, cudaStream_t, K) -> Launch<K>;

}  // namespace pulse::cuda_emulation

#define PULSE_LAUNCH(grid, block, stream, ...) \
  ::pulse::cuda_emulation::Launch((grid), (block), (stream), [](auto... a_) { __VA_ARGS__(a_...); })

#define threadIdx (::pulse::cuda_emulation::thread_idx())
#define blockIdx (::pulse::cuda_emulation::block_idx())
#define blockDim (::pulse::cuda_emulation::block_dim())
#define gridDim (::pulse::cuda_emulation::grid_dim())

// ---- device functions -------------------------------------------------------------------------------
static inline void __syncthreads() {
  pulse::cuda_emulation::wait_at(pulse::cuda_emulation::block_sync());
}
static inline int __syncthreads_or(int pred) {
  return pulse::cuda_emulation::wait_at(pulse::cuda_emulation::block_sync(), pred != 0) ? 1 : 0;
}
/// __shfl_up_sync over a whole warp of 32 (the only form kernels/*.cu use; others abort).
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32) {
  static_assert(sizeof(T) <= 16, "a shuffle of a type over 16 bytes");
  if (mask != 0xffffffffu || width != 32) {
    std::fprintf(stderr, "cuda emulation: only full-warp shuffles are emulated\n");
    std::abort();
  }
  pulse::cuda_emulation::Sync& w = pulse::cuda_emulation::warp_sync();
  const unsigned lane = (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) % 32;
  std::memcpy(w.lanes[lane], &v, sizeof(T));
  pulse::cuda_emulation::wait_at(w);
  T r = v;
  if (lane >= d) std::memcpy(&r, w.lanes[lane - d], sizeof(T));
  pulse::cuda_emulation::wait_at(w);  // the exchange is read before the next shuffle overwrites it
  return r;
}
static inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return static_cast<unsigned long long>((static_cast<unsigned __int128>(a) * b) >> 64);
}
static inline int __popc(unsigned x) {
  return __builtin_popcount(x);
}
static inline int __ffs(int x) {
  return __builtin_ffs(x);
}
static inline int __clz(int x) {
  return x ? __builtin_clz(static_cast<unsigned>(x)) : 32;
}
static inline int __clzll(long long x) {
  return x ? __builtin_clzll(static_cast<unsigned long long>(x)) : 64;
}
static inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, 4);
  return u;
}
static inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Single rounded operations, never fused into an FMA (volatile stops the contraction).
static inline float __fadd_rn(float a, float b) {
  volatile float r = a + b;
  return r;
}
static inline float __fsub_rn(float a, float b) {
  volatile float r = a - b;
  return r;
}
static inline float __fmul_rn(float a, float b) {
  volatile float r = a * b;
  return r;
}
static inline float __fdiv_rn(float a, float b) {
  volatile float r = a / b;
  return r;
}
// One OS thread runs every fiber, and a fiber is never switched inside these: plain operations are atomic.
template <typename T, typename V>
static inline T atomicMin(T* p, V v) {
  const T o = *p;
  if (static_cast<T>(v) < o) *p = static_cast<T>(v);
  return o;
}
template <typename T, typename V>
static inline T atomicOr(T* p, V v) {
  const T o = *p;
  *p = static_cast<T>(o | static_cast<T>(v));
  return o;
}
template <typename A, typename B>
static inline std::common_type_t<A, B> min(A a, B b) {
  return a < b ? a : b;
}
template <typename A, typename B>
static inline std::common_type_t<A, B> max(A a, B b) {
  return a < b ? b : a;
}
