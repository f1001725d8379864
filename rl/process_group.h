// A trainer process group for multi-trainer runs (DDP, DiLoCo, PULSELoCo): c10d's TCPStore for the
// rendezvous (rank 0 hosts it) and c10d's ProcessGroupGloo for the collectives, both from LibTorch. No
// collective protocol of our own: every byte between ranks goes through a c10d call.
// Tensors: CPU FP32 go through Gloo. CUDA FP32 (run.device = cuda) go through NCCL when this build has it
// (nccl_built(): a LibTorch with NCCL, whose targets define USE_C10D_NCCL, AND the opt-in PULSE_NCCL=1 at
// configure time, e.g. -DCMAKE_CXX_FLAGS=-DPULSE_NCCL=1; the NCCL branch has not run on a GPU yet) and
// GroupOptions::cuda_device names this rank's GPU; otherwise through a host copy over Gloo (always works;
// Debian's LibTorch 1.13 has neither CUDA nor NCCL). Bytes (broadcast/exchange/allgather) always use Gloo.
//
// Configured like torchrun: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
// (GroupOptions::from_env), or explicitly. world_size 1 needs no network: no store, no Gloo, every
// operation is a local no-op or copy.
//
// Accounting (CommStats): every operation counts
//   payload bytes  what this rank hands to the collective (its input buffer, plus the 8-byte size words
//                  that broadcast_bytes / exchange_bytes send first);
//   wire bytes     an estimate of what this rank sends on the wire under the algorithm Gloo 2022 runs:
//                  allreduce: ring (reduce-scatter + allgather), 2 (W-1)/W * n per rank;
//                  broadcast: binomial tree from the root, (number of tree children of this rank) * n,
//                             which is ceil(log2 W) * n at most (the root) and (W-1)/W * n on average;
//                  allgather: ring, (W-1) * n per rank for an n-byte contribution;
//                  exchange:  an allgather of the W int64 sizes, then one broadcast per rank with a
//                             non-empty buffer of exactly its bytes (no padding), so every rank receives
//                             sum_{j != r} n_j and the group sends (W-1) * sum_j n_j in total;
//                  barrier:   0 (Gloo's barrier is a few empty messages).
//   At world_size 1 wire bytes are 0.
//
// Faults: every collective, the rendezvous and the store use GroupOptions::timeout_s. A failure (timeout,
// peer closed the connection, store unreachable) is rethrown as GroupError naming this rank, the operation,
// the caller's label and, where it can be told, the peer rank. The peer is found by a heartbeat: each rank
// increments a counter in the TCPStore every heartbeat interval from its own thread and store connection;
// after a failure the counters are read twice, a few intervals apart, and the ranks whose counter did not
// move (or rank 0 when its store is gone) are named. With world_size 2 the other rank is the only peer.
// After a failure the group is broken: every later call throws GroupError at once.
//
// Thread safety: a TrainerGroup is used from one thread at a time (collectives must be issued in the same
// order on every rank anyway). stats() may be read by that same thread only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace at {
class Tensor;
}

namespace pulse::rl {

/// Where the group meets and how long any single operation may take.
struct GroupOptions {
  int rank = 0;                           ///< this process, 0..world_size-1
  int world_size = 1;                     ///< number of trainer processes
  int local_rank = 0;                     ///< rank on this node (informational)
  int local_world_size = 1;               ///< processes on this node (informational)
  std::string master_addr = "127.0.0.1";  ///< host of rank 0's TCPStore
  int master_port = 29500;                ///< port of rank 0's TCPStore (1..65535)
  double timeout_s = 300;                 ///< rendezvous, store and every collective, seconds (> 0)
  bool heartbeat = true;                  ///< run the heartbeat that names a dead or hung peer
  /// This rank's GPU (run.device = cuda: LOCAL_RANK's device), -1 = none. With nccl_built(), an NCCL
  /// process group is created beside the Gloo one (on the same TCPStore, under the prefix "pulse-nccl")
  /// for the all-reduces of CUDA tensors.
  int cuda_device = -1;

  /// torchrun's environment: RANK, WORLD_SIZE (both required together; absent: a world of 1),
  /// LOCAL_RANK, LOCAL_WORLD_SIZE (default: RANK and WORLD_SIZE), MASTER_ADDR (default 127.0.0.1),
  /// MASTER_PORT (default 29500). Throws std::invalid_argument naming the variable on a malformed value.
  static GroupOptions from_env(double timeout_s = 300);

  /// Throws std::invalid_argument naming the field when a value is out of range.
  void validate() const;
};

/// A failed group operation. what(): "rank R: OP of 'LABEL' failed after S s: CAUSE".
class GroupError : public std::runtime_error {
 public:
  GroupError(const std::string& message, int rank, std::string op, int peer_rank, bool timed_out);
  int rank() const { return rank_; }             ///< this process's rank
  const std::string& op() const { return op_; }  ///< "allreduce", "broadcast", "exchange", ...
  int peer_rank() const { return peer_rank_; }   ///< the peer at fault, -1 when not determined
  bool timed_out() const { return timed_out_; }  ///< the operation ran into the timeout

 private:
  int rank_;
  std::string op_;
  int peer_rank_;
  bool timed_out_;
};

/// Counters of one kind of operation (see the file comment for payload vs wire bytes).
struct CommCounters {
  uint64_t calls = 0;
  uint64_t payload_bytes = 0;  ///< bytes this rank handed to the collectives
  uint64_t wire_bytes = 0;     ///< estimated bytes this rank sent on the wire
  double seconds = 0;          ///< wall time inside the operations
  CommCounters& operator+=(const CommCounters& o);
};

/// Per-operation counters since construction or reset_stats().
struct CommStats {
  CommCounters allreduce, broadcast, exchange, allgather, barrier;
  CommCounters total() const;
};

/// A c10d Gloo process group with byte accounting and rank-naming errors. Construction is the
/// rendezvous: it blocks until all world_size ranks have joined (or throws GroupError after timeout_s).
class TrainerGroup {
 public:
  explicit TrainerGroup(const GroupOptions& options);
  ~TrainerGroup();
  TrainerGroup(const TrainerGroup&) = delete;
  TrainerGroup& operator=(const TrainerGroup&) = delete;

  int rank() const;
  int world_size() const;
  const GroupOptions& options() const;

  /// In-place sum over ranks of a contiguous FP32 tensor (any shape; same shape on every rank). CPU: Gloo.
  /// CUDA: NCCL when nccl_active(), else a host copy summed over Gloo and copied back. Throws
  /// std::invalid_argument for another dtype or device or a non-contiguous tensor; GroupError on a
  /// failure. `label` names the data in errors ("pseudo-gradient").
  void allreduce_sum(at::Tensor& tensor, const std::string& label);

  /// In-place sum over ranks of `count` FP32 values at `data` (same count on every rank).
  void allreduce_sum(float* data, size_t count, const std::string& label);

  /// Rank `root`'s bytes on every rank: the root passes its buffer, the others' `bytes` are ignored (pass
  /// {}). Sizes need not be known in advance: the root's size is broadcast first (one int64), then exactly
  /// its bytes (skipped when empty).
  std::vector<uint8_t> broadcast_bytes(const std::vector<uint8_t>& bytes, int root, const std::string& label);

  /// Variable-size exchange, exact sizes, no padding: returns W buffers, [r] = rank r's `size` bytes
  /// (this rank's own entry is a copy of its input). Any size is allowed on any rank, 0 included.
  std::vector<std::vector<uint8_t>> exchange_bytes(const uint8_t* data, size_t size,
                                                   const std::string& label);
  std::vector<std::vector<uint8_t>> exchange_bytes(const std::vector<uint8_t>& bytes,
                                                   const std::string& label) {
    return exchange_bytes(bytes.data(), bytes.size(), label);
  }

  /// Allgather of small int64 vectors: every rank passes the same number k of values; returns W * k values
  /// in rank order (rank r's at [r*k, (r+1)*k)).
  std::vector<int64_t> allgather_i64(const std::vector<int64_t>& values, const std::string& label);

  /// Waits until every rank has reached the barrier.
  void barrier(const std::string& label);

  const CommStats& stats() const;
  void reset_stats();

  /// Whether this binary was built with the NCCL branch (USE_C10D_NCCL and PULSE_NCCL, see above).
  static bool nccl_built();
  /// Whether CUDA tensors are all-reduced over NCCL in this group (nccl_built(), cuda_device >= 0 and
  /// world_size > 1).
  bool nccl_active() const;

  /// Bytes rank `rank` sends in Gloo's binomial-tree broadcast of `bytes` from `root` in a world of
  /// `world` (the wire model above; exposed for tests and reports).
  static uint64_t broadcast_wire_bytes(int rank, int root, int world, uint64_t bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pulse::rl
