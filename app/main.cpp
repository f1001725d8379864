// pulse: the single binary. Subcommands are wired in app/cli.cpp (see `pulse --help`).
#include <malloc.h>

#include "app/cli.h"

int main(int argc, char** argv) {
  // Every RL step allocates buffers of about the same sizes (patches, payloads, rollouts) and frees them.
  // glibc hands allocations above its mmap threshold back to the kernel on free, so the next step pays a
  // page fault and a kernel zero-fill per 4 KiB again: ~0.5 ms per MB on the VMs measured, more than the
  // PULSESync encoder spends on a MB of patch. Keeping freed memory in the heap (up to the 32 MiB
  // maximum threshold, trimmed past 1 GiB free) makes later steps reuse it. Larger buffers still use
  // mmap; the codec's own scratch buffers are pooled (sync/scratch_buffer.h).
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return pulse::app::run_cli(argc, argv);
}
