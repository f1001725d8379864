// The fibers and the grid loop of the CPU emulation (cuda_emulation.h).
#include "cuda_emulation.h"

#include <sys/mman.h>

#include <algorithm>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

// Switches stacks: saves the callee-saved registers on the current stack, stores its pointer to *save_sp,
// and resumes the stack load_sp (System V x86-64; a new stack starts at `trampoline`, see run_grid).
extern "C" void pulse_cuda_emulation_switch(void** save_sp, void* load_sp);
asm(R"(
.pushsection .text
.globl pulse_cuda_emulation_switch
.type pulse_cuda_emulation_switch,@function
pulse_cuda_emulation_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size pulse_cuda_emulation_switch, .-pulse_cuda_emulation_switch
.popsection
)");

namespace pulse::cuda_emulation {
namespace {

constexpr size_t kStackBytes = 256 << 10;

struct Fiber {
  void* sp = nullptr;
  uint3 tid;
  bool done = false;
};

struct Grid {
  std::vector<Fiber> fibers;
  std::vector<Sync> warps;
  Sync block;
  uint3 block_idx;
  dim3 block_dim, grid_dim;
  Fiber* current = nullptr;
  void* scheduler_sp = nullptr;
  uint64_t progress = 0;  ///< arrivals and exits: unchanged over a whole round = deadlock
  void (*body)(void*) = nullptr;
  void* arg = nullptr;
};

Grid& grid() {
  static Grid g;
  return g;
}

std::vector<char*>& stacks() {
  static std::vector<char*> s;  // kept for the process: reused by every launch
  return s;
}

bool reverse_order() {
  static const bool r = [] {
    const char* v = std::getenv("PULSE_CUDA_EMULATION_REVERSE");
    return v && v[0] == '1';
  }();
  return r;
}

size_t linear(const uint3& t, const dim3& d) {
  return t.x + d.x * (t.y + static_cast<size_t>(d.y) * t.z);
}

void yield() {
  Grid& g = grid();
  pulse_cuda_emulation_switch(&g.current->sp, g.scheduler_sp);
}

void release_if_full(Sync& s) {
  if (s.arrived > 0 && s.arrived + s.exited == s.n) {
    s.arrived = 0;
    s.last_or = s.or_acc;
    s.or_acc = false;
    ++s.generation;
  }
}

[[noreturn]] void trampoline() {
  Grid& g = grid();
  g.body(g.arg);
  g.current->done = true;
  ++g.progress;
  ++g.block.exited;
  ++warp_sync().exited;
  release_if_full(g.block);
  release_if_full(warp_sync());
  void* dead = nullptr;
  pulse_cuda_emulation_switch(&dead, g.scheduler_sp);
  std::abort();  // a finished fiber is never resumed
}

}  // namespace

cudaError_t& last_error() {
  static cudaError_t e = cudaSuccess;
  return e;
}
uint3& thread_idx() {
  return grid().current->tid;
}
uint3& block_idx() {
  return grid().block_idx;
}
dim3& block_dim() {
  return grid().block_dim;
}
dim3& grid_dim() {
  return grid().grid_dim;
}
Sync& block_sync() {
  return grid().block;
}
Sync& warp_sync() {
  Grid& g = grid();
  return g.warps[linear(g.current->tid, g.block_dim) / 32];
}

bool wait_at(Sync& s, bool pred) {
  Grid& g = grid();
  const uint64_t generation = s.generation;
  ++s.arrived;
  s.or_acc = s.or_acc || pred;
  ++g.progress;
  release_if_full(s);
  while (s.generation == generation) yield();
  return s.last_or;
}

void run_grid(dim3 grid_shape, dim3 block, void (*body)(void*), void* arg) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid_shape.x == 0 || grid_shape.y == 0 ||
      grid_shape.z == 0 || grid_shape.x > 0x7fffffffu || grid_shape.y > 65535 || grid_shape.z > 65535) {
    last_error() = cudaErrorInvalidConfiguration;
    return;
  }
  Grid& g = grid();
  if (g.current) {
    std::fprintf(stderr, "cuda emulation: a launch from device code is not emulated\n");
    std::abort();
  }
  while (stacks().size() < threads) {
    void* s = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (s == MAP_FAILED) std::abort();
    stacks().push_back(static_cast<char*>(s));
  }
  g.body = body;
  g.arg = arg;
  g.grid_dim = grid_shape;
  g.block_dim = block;
  g.fibers.assign(threads, Fiber{});
  g.warps.assign((threads + 31) / 32, Sync{});
  const uint64_t blocks = uint64_t{grid_shape.x} * grid_shape.y * grid_shape.z;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t lin = reverse_order() ? blocks - 1 - b : b;
    g.block_idx = uint3{static_cast<unsigned>(lin % grid_shape.x),
                        static_cast<unsigned>(lin / grid_shape.x % grid_shape.y),
                        static_cast<unsigned>(lin / grid_shape.x / grid_shape.y)};
    g.block = Sync{};
    g.block.n = static_cast<int>(threads);
    for (size_t w = 0; w < g.warps.size(); ++w) {
      g.warps[w] = Sync{};
      g.warps[w].n = static_cast<int>(std::min<uint64_t>(32, threads - 32 * w));
    }
    uint64_t t = 0;
    for (unsigned z = 0; z < block.z; ++z)
      for (unsigned y = 0; y < block.y; ++y)
        for (unsigned x = 0; x < block.x; ++x, ++t) {
          Fiber& f = g.fibers[t];
          f.done = false;
          f.tid = uint3{x, y, z};
#if defined(__SANITIZE_ADDRESS__)
          __asan_unpoison_memory_region(stacks()[t],
                                        kStackBytes);  // frames of an earlier block never returned
#endif
          // A fresh stack: trampoline as the return address in a 16-byte aligned slot, below it the six
          // registers pulse_cuda_emulation_switch pops.
          const uintptr_t top =
              (reinterpret_cast<uintptr_t>(stacks()[t]) + kStackBytes - 64) & ~uintptr_t{15};
          void** slot = reinterpret_cast<void**>(top);
          *slot = reinterpret_cast<void*>(&trampoline);
          void** sp = slot - 6;
          std::fill(sp, slot, nullptr);
          f.sp = sp;
        }
    uint64_t live = threads;
    while (live) {
      const uint64_t before = g.progress;
      for (uint64_t k = 0; k < threads; ++k) {
        Fiber& f = g.fibers[reverse_order() ? threads - 1 - k : k];
        if (f.done) continue;
        g.current = &f;
        pulse_cuda_emulation_switch(&g.scheduler_sp, f.sp);
        if (f.done) --live;
      }
      if (live && g.progress == before) {
        std::fprintf(stderr,
                     "cuda emulation: deadlock in block (%u, %u, %u): %llu threads wait at a barrier the "
                     "others never reach\n",
                     g.block_idx.x, g.block_idx.y, g.block_idx.z, static_cast<unsigned long long>(live));
        std::abort();
      }
    }
  }
  g.current = nullptr;
}

}  // namespace pulse::cuda_emulation
