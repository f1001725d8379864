#include "rl/process_group.h"

#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

// NCCL: only with a LibTorch that has it (its targets define USE_C10D_NCCL; Debian's 1.13 ships the header
// but not the library) and the opt-in PULSE_NCCL (see process_group.h).
#if defined(USE_C10D_NCCL) && defined(PULSE_NCCL)
#define PULSE_WITH_NCCL 1
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#else
#define PULSE_WITH_NCCL 0
#endif

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>

namespace pulse::rl {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::chrono::milliseconds to_ms(double s) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::max(1.0, s * 1000.0)));
}

std::string format_seconds(double s) {
  std::ostringstream o;
  if (s >= 100) {  // whole seconds: precision 3 would print 1800 as 1.8e+03
    o << static_cast<long long>(s + 0.5);
    return o.str();
  }
  o.precision(s < 10 ? 2 : 3);
  o << s;
  return o.str();
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  long x = std::strtol(v, &end, 10);
  if (errno || *end || x < INT32_MIN || x > INT32_MAX)
    throw std::invalid_argument(std::string("environment variable ") + name + "='" + v +
                                "' is not an integer");
  return static_cast<int>(x);
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// An exception's message without c10's multi-line backtrace.
std::string error_text(const std::exception& e) {
  if (const auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

// ---- options ------------------------------------------------------------------------------------------

GroupOptions GroupOptions::from_env(double timeout_s) {
  GroupOptions o;
  o.timeout_s = timeout_s;
  const bool has_rank = std::getenv("RANK") && *std::getenv("RANK");
  const bool has_world = std::getenv("WORLD_SIZE") && *std::getenv("WORLD_SIZE");
  if (has_rank != has_world)
    throw std::invalid_argument("environment: RANK and WORLD_SIZE must be set together (torchrun sets both)");
  o.rank = env_int("RANK", 0);
  o.world_size = env_int("WORLD_SIZE", 1);
  o.local_rank = env_int("LOCAL_RANK", o.rank);
  o.local_world_size = env_int("LOCAL_WORLD_SIZE", o.world_size);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) o.master_addr = a;
  o.master_port = env_int("MASTER_PORT", 29500);
  o.validate();
  return o;
}

void GroupOptions::validate() const {
  if (world_size < 1)
    throw std::invalid_argument("world_size must be >= 1, got " + std::to_string(world_size));
  if (rank < 0 || rank >= world_size)
    throw std::invalid_argument("rank must be in 0.." + std::to_string(world_size - 1) + ", got " +
                                std::to_string(rank));
  if (local_rank < 0)
    throw std::invalid_argument("local_rank must be >= 0, got " + std::to_string(local_rank));
  if (world_size > 1 && (master_port < 1 || master_port > 65535))
    throw std::invalid_argument("master_port must be in 1..65535, got " + std::to_string(master_port));
  if (world_size > 1 && master_addr.empty()) throw std::invalid_argument("master_addr is empty");
  if (!(timeout_s > 0) || timeout_s > 1e6)
    throw std::invalid_argument("timeout_s must be in (0, 1e6] seconds, got " + std::to_string(timeout_s));
}

GroupError::GroupError(const std::string& message, int rank, std::string op, int peer_rank, bool timed_out)
    : std::runtime_error(message),
      rank_(rank),
      op_(std::move(op)),
      peer_rank_(peer_rank),
      timed_out_(timed_out) {}

CommCounters& CommCounters::operator+=(const CommCounters& o) {
  calls += o.calls;
  payload_bytes += o.payload_bytes;
  wire_bytes += o.wire_bytes;
  seconds += o.seconds;
  return *this;
}

CommCounters CommStats::total() const {
  CommCounters t;
  t += allreduce;
  t += broadcast;
  t += exchange;
  t += allgather;
  t += barrier;
  return t;
}

uint64_t TrainerGroup::broadcast_wire_bytes(int rank, int root, int world, uint64_t bytes) {
  // gloo/broadcast.cc: virtual rank v = (rank - root) mod W; in round i (bit i, from the LSB) the ranks
  // whose bits above i are clear take part, and v sends to v ^ (1 << i) when bit i of v is clear.
  if (world <= 1) return 0;
  const uint64_t v = static_cast<uint64_t>((rank - root + world) % world), w = static_cast<uint64_t>(world);
  size_t dim = 0;
  while ((uint64_t{1} << dim) < w) ++dim;
  uint64_t mask = (uint64_t{1} << dim) - 1, sends = 0;
  for (size_t i = 0; i < dim; ++i) {
    mask ^= uint64_t{1} << i;
    if ((v & mask) != 0) continue;
    const uint64_t peer = v ^ (uint64_t{1} << i);
    if (peer >= w) continue;
    if ((v & (uint64_t{1} << i)) == 0) ++sends;
  }
  return sends * bytes;
}

// ---- the group ----------------------------------------------------------------------------------------

struct TrainerGroup::Impl {
  GroupOptions opt;
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg;
#if PULSE_WITH_NCCL
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> nccl;  // CUDA tensors' all-reduces (cuda_device >= 0)
#endif
  CommStats stats;
  std::string broken;  // the first failure, "" while healthy

  // Heartbeat: its own store connection and thread (so that a stuck collective never delays it).
  c10::intrusive_ptr<c10d::TCPStore> hb_store;
  std::thread hb_thread;
  std::mutex hb_mutex;
  std::condition_variable hb_cv;
  bool hb_stop = false;
  std::atomic<bool> hb_store_failed{false};
  double hb_interval_s = 1;

  static std::string hb_key(int r) {
    return "pulse/heartbeat/" + std::to_string(r);
  }

  void start_heartbeat() {
    hb_interval_s = std::clamp(opt.timeout_s / 10, 0.1, 1.0);
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(opt.master_port);
    so.isServer = false;
    so.waitWorkers = false;
    so.timeout = to_ms(std::max(1.0, 3 * hb_interval_s));
    hb_store = c10::make_intrusive<c10d::TCPStore>(opt.master_addr, so);
    hb_store->add(hb_key(opt.rank), 1);
    hb_thread = std::thread([this] {
      std::unique_lock<std::mutex> lock(hb_mutex);
      while (!hb_stop) {
        hb_cv.wait_for(lock, to_ms(hb_interval_s), [this] { return hb_stop; });
        if (hb_stop) break;
        lock.unlock();
        try {
          hb_store->add(hb_key(opt.rank), 1);
        } catch (const std::exception&) {
          hb_store_failed = true;  // rank 0's store is gone: nothing more to beat for
        }
        lock.lock();
        if (hb_store_failed) break;
      }
    });
  }

  void stop_heartbeat() {
    {
      std::lock_guard<std::mutex> lock(hb_mutex);
      hb_stop = true;
    }
    hb_cv.notify_all();
    if (hb_thread.joinable()) hb_thread.join();
  }

  // Ranks whose heartbeat did not move over a few intervals. Sets `store_gone` when rank 0's store
  // cannot be reached (rank 0 died or hangs).
  std::vector<int> silent_peers(bool& store_gone) {
    store_gone = false;
    std::vector<int> silent;
    if (!hb_store) return silent;
    auto read = [&](std::vector<int64_t>& out) {
      out.assign(static_cast<size_t>(opt.world_size), 0);
      for (int r = 0; r < opt.world_size; ++r)
        if (r != opt.rank) out[static_cast<size_t>(r)] = hb_store->add(hb_key(r), 0);
    };
    try {
      if (hb_store_failed) throw std::runtime_error("heartbeat store failed");
      std::vector<int64_t> a, b;
      read(a);
      std::this_thread::sleep_for(to_ms(3.5 * hb_interval_s));
      read(b);
      for (int r = 0; r < opt.world_size; ++r)
        if (r != opt.rank && a[static_cast<size_t>(r)] == b[static_cast<size_t>(r)]) silent.push_back(r);
    } catch (const std::exception&) {
      store_gone = true;
      silent.clear();
      if (opt.rank != 0) silent.push_back(0);
    }
    return silent;
  }

  // Turns a c10d/Gloo exception into a GroupError naming this rank, the operation and the peer.
  [[noreturn]] void fail(const std::string& op, const std::string& label, Clock::time_point t0,
                         const std::string& cause) {
    const double elapsed = seconds_since(t0);
    const std::string lc = lower(cause);
    const bool closed =
        lc.find("closed by peer") != std::string::npos || lc.find("connection reset") != std::string::npos ||
        lc.find("broken pipe") != std::string::npos || lc.find("connection refused") != std::string::npos;
    const bool timed_out =
        !closed && (lc.find("timed out") != std::string::npos || lc.find("timeout") != std::string::npos);
    bool store_gone = false;
    std::vector<int> peers = silent_peers(store_gone);
    if (peers.empty() && opt.world_size == 2) peers.push_back(1 - opt.rank);
    std::ostringstream m;
    m << "rank " << opt.rank << ": " << op << " of '" << label << "' failed after " << format_seconds(elapsed)
      << " s: ";
    const std::string who =
        peers.size() == 1 ? "peer rank " + std::to_string(peers[0]) : "peer ranks " + join_ranks(peers);
    if (peers.empty()) {
      m << (closed      ? "a peer closed the connection"
            : timed_out ? "timed out"
                        : "error")
        << " (peer rank not determined: every peer's heartbeat is alive)";
    } else if (closed) {
      m << who << " closed the connection";
    } else if (timed_out) {
      m << "timed out after " << format_seconds(opt.timeout_s) << " s waiting for " << who;
    } else {
      m << who << " failed";
    }
    if (!peers.empty() && store_gone) m << " (rank 0's TCPStore is unreachable)";
    if (!peers.empty() && !store_gone && opt.world_size > 2) m << " (its heartbeat stopped)";
    m << " [c10d: " << cause << "]";
    broken = m.str();
    throw GroupError(broken, opt.rank, op, peers.size() == 1 ? peers[0] : -1, timed_out);
  }

  // Runs one collective: checks the group is healthy, times it, accounts it, converts failures.
  void run(CommCounters& c, const std::string& op, const std::string& label, uint64_t payload, uint64_t wire,
           const std::function<void()>& body) {
    if (!broken.empty())
      throw GroupError("rank " + std::to_string(opt.rank) + ": " + op + " of '" + label +
                           "' refused: the group is broken by an earlier failure: " + broken,
                       opt.rank, op, -1, false);
    const auto t0 = Clock::now();
    if (opt.world_size > 1) {
      try {
        body();
      } catch (const GroupError&) {
        throw;
      } catch (const std::exception& e) {
        fail(op, label, t0, error_text(e));
      }
    }
    c.calls += 1;
    c.payload_bytes += payload;
    c.wire_bytes += opt.world_size > 1 ? wire : 0;
    c.seconds += seconds_since(t0);
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& work) {
    work->wait();
    if (!work->isSuccess() && work->exception()) std::rethrow_exception(work->exception());
  }

  void bcast(at::Tensor t, int root) {
    std::vector<at::Tensor> ts{std::move(t)};
    c10d::BroadcastOptions bo;
    bo.rootRank = root;
    wait(pg->broadcast(ts, bo));
  }

  std::vector<int64_t> allgather_raw(const std::vector<int64_t>& values) {
    const auto k = static_cast<int64_t>(values.size());
    std::vector<int64_t> out(static_cast<size_t>(k * opt.world_size));
    if (k == 0) return out;
    std::vector<at::Tensor> in{torch::from_blob(const_cast<int64_t*>(values.data()), {k}, torch::kInt64)};
    std::vector<std::vector<at::Tensor>> outs(1);
    for (int r = 0; r < opt.world_size; ++r)
      outs[0].push_back(torch::from_blob(out.data() + static_cast<size_t>(r * k), {k}, torch::kInt64));
    wait(pg->allgather(outs, in));
    return out;
  }
};

TrainerGroup::TrainerGroup(const GroupOptions& options) : impl_(std::make_unique<Impl>()) {
  options.validate();
  impl_->opt = options;
  auto& o = impl_->opt;
  if (o.world_size == 1) return;
  const auto t0 = Clock::now();
  std::string stage = o.rank == 0 ? "hosting the TCPStore and waiting for every rank to join"
                                  : "connecting to rank 0's TCPStore and waiting for every rank to join";
  std::vector<int> missing;  // ranks that had not joined the store when the rendezvous timed out
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(o.master_port);
    so.isServer = o.rank == 0;
    so.numWorkers = static_cast<size_t>(o.world_size);
    // Not TCPStore's own wait for the workers: it cannot say who is missing (and LibTorch 1.13's server
    // returns from it after the timeout without an error). Each rank sets a key of its own instead and
    // waits for everyone's, so that a timeout names the ranks that never joined.
    so.waitWorkers = false;
    so.timeout = to_ms(o.timeout_s);
    impl_->store = c10::make_intrusive<c10d::TCPStore>(o.master_addr, so);
    const auto joined_key = [](int r) { return "pulse/joined/" + std::to_string(r); };
    // Rank 0's verdict when it gives up: the other ranks (whose clocks started later) read it before its
    // store closes, so that they too name the missing ranks instead of reporting a broken connection.
    const std::string gave_up_key = "pulse/rendezvous-failed";
    impl_->store->set(joined_key(o.rank), std::vector<uint8_t>{1});
    std::vector<std::string> keys;
    for (int r = 0; r < o.world_size; ++r) keys.push_back(joined_key(r));
    std::string verdict;  // why this rank gives up, when it does
    try {
      while (!impl_->store->check(keys)) {
        if (o.rank != 0 && impl_->store->check({gave_up_key})) {
          const std::vector<uint8_t> why = impl_->store->get(gave_up_key);
          verdict = "rank 0 gave up: " + std::string(why.begin(), why.end());
          break;
        }
        if (seconds_since(t0) >= o.timeout_s) {
          for (int r = 0; r < o.world_size; ++r)
            if (!impl_->store->check({joined_key(r)})) missing.push_back(r);
          verdict = "timed out: " + std::string(missing.size() == 1 ? "rank " : "ranks ") +
                    join_ranks(missing) + " never joined";
          if (o.rank == 0) {
            impl_->store->set(gave_up_key, std::vector<uint8_t>(verdict.begin(), verdict.end()));
            std::this_thread::sleep_for(std::chrono::milliseconds(200));  // 10 polls of the others
          }
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (const std::exception& e) {  // the store's connection failed
      if (o.rank == 0) throw;
      throw std::runtime_error(
          "lost rank 0's TCPStore while waiting for the other ranks (rank 0 gave up or exited): " +
          error_text(e));
    }
    if (!verdict.empty()) throw std::runtime_error(verdict);
    stage = "connecting the Gloo mesh (every rank must join)";
    auto gloo = c10d::ProcessGroupGloo::Options::create(to_ms(o.timeout_s));
    if (is_loopback(o.master_addr)) {
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else {
      gloo->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    gloo->threads = 2;
    impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, o.rank, o.world_size, gloo);
#if PULSE_WITH_NCCL
    if (o.cuda_device >= 0) {
      stage = "creating the NCCL process group (GPU " + std::to_string(o.cuda_device) + ")";
      auto nccl = c10d::ProcessGroupNCCL::Options::create();
      nccl->timeout = to_ms(o.timeout_s);
      c10::intrusive_ptr<c10d::Store> prefixed =
          c10::make_intrusive<c10d::PrefixStore>("pulse-nccl", impl_->store);
      impl_->nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, o.rank, o.world_size, nccl);
    }
#endif
    stage = "starting the heartbeat";
    if (o.heartbeat) impl_->start_heartbeat();
  } catch (const std::exception& e) {
    impl_->stop_heartbeat();
    throw GroupError("rank " + std::to_string(o.rank) + ": rendezvous of " + std::to_string(o.world_size) +
                         " ranks at " + o.master_addr + ":" + std::to_string(o.master_port) +
                         " failed after " + format_seconds(seconds_since(t0)) + " s (timeout " +
                         format_seconds(o.timeout_s) + " s) while " + stage + ": " + error_text(e),
                     o.rank, "rendezvous", missing.size() == 1 ? missing[0] : -1,
                     lower(error_text(e)).find("timeout") != std::string::npos ||
                         lower(error_text(e)).find("timed out") != std::string::npos);
  }
}

TrainerGroup::~TrainerGroup() {
  impl_->stop_heartbeat();
#if PULSE_WITH_NCCL
  impl_->nccl.reset();
#endif
  impl_->pg.reset();
  impl_->hb_store.reset();
  impl_->store.reset();
}

int TrainerGroup::rank() const {
  return impl_->opt.rank;
}
int TrainerGroup::world_size() const {
  return impl_->opt.world_size;
}
const GroupOptions& TrainerGroup::options() const {
  return impl_->opt;
}
const CommStats& TrainerGroup::stats() const {
  return impl_->stats;
}
void TrainerGroup::reset_stats() {
  impl_->stats = CommStats{};
}

bool TrainerGroup::nccl_built() {
  return PULSE_WITH_NCCL != 0;
}

bool TrainerGroup::nccl_active() const {
#if PULSE_WITH_NCCL
  return impl_->nccl.defined();
#else
  return false;
#endif
}

void TrainerGroup::allreduce_sum(at::Tensor& tensor, const std::string& label) {
  const bool device_ok = tensor.device().is_cpu() || tensor.device().is_cuda();
  if (tensor.scalar_type() != torch::kFloat32 || !device_ok || !tensor.is_contiguous())
    throw std::invalid_argument("allreduce_sum of '" + label +
                                "': needs a contiguous CPU or CUDA float32 tensor, got " +
                                std::string(c10::toString(tensor.scalar_type())) + " on " +
                                tensor.device().str() + (tensor.is_contiguous() ? "" : " (non-contiguous)"));
  if (tensor.device().is_cpu()) {
    allreduce_sum(tensor.data_ptr<float>(), static_cast<size_t>(tensor.numel()), label);
    return;
  }
#if PULSE_WITH_NCCL
  if (impl_->nccl) {
    auto& im = *impl_;
    const uint64_t n = static_cast<uint64_t>(tensor.numel()) * sizeof(float);
    const uint64_t w = static_cast<uint64_t>(im.opt.world_size);
    im.run(im.stats.allreduce, "allreduce", label, n, 2 * (w - 1) * n / w, [&] {
      if (tensor.numel() == 0) return;
      std::vector<at::Tensor> ts{tensor};
      c10d::AllreduceOptions ao;
      ao.reduceOp = c10d::ReduceOp::SUM;
      // The current stream waits for NCCL's; wait() throws the collective's failure. Not im.wait():
      // LibTorch 2.x's WorkNCCL::isSuccess() throws NotImplementedError ("... is deprecated").
      im.nccl->allreduce(ts, ao)->wait();
    });
    return;
  }
#endif
  at::Tensor host = tensor.to(torch::kCPU);  // Gloo through host memory
  allreduce_sum(host.data_ptr<float>(), static_cast<size_t>(host.numel()), label);
  tensor.copy_(host);
}

void TrainerGroup::allreduce_sum(float* data, size_t count, const std::string& label) {
  auto& im = *impl_;
  const uint64_t n = count * sizeof(float), w = static_cast<uint64_t>(im.opt.world_size);
  im.run(im.stats.allreduce, "allreduce", label, n, 2 * (w - 1) * n / w, [&] {
    if (count == 0) return;
    std::vector<at::Tensor> ts{torch::from_blob(data, {static_cast<int64_t>(count)}, torch::kFloat32)};
    c10d::AllreduceOptions ao;
    ao.reduceOp = c10d::ReduceOp::SUM;
    im.wait(im.pg->allreduce(ts, ao));
  });
}

std::vector<uint8_t> TrainerGroup::broadcast_bytes(const std::vector<uint8_t>& bytes, int root,
                                                   const std::string& label) {
  auto& im = *impl_;
  const int w = im.opt.world_size;
  if (root < 0 || root >= w)
    throw std::invalid_argument("broadcast_bytes of '" + label + "': root " + std::to_string(root) +
                                " is not a rank of a world of " + std::to_string(w));
  const bool is_root = im.opt.rank == root;
  std::vector<uint8_t> out;
  if (is_root) out = bytes;
  int64_t size = is_root ? static_cast<int64_t>(bytes.size()) : 0;
  uint64_t wire = 0;
  im.run(im.stats.broadcast, "broadcast", label, is_root ? 8 + bytes.size() : 0, 0, [&] {
    im.bcast(torch::from_blob(&size, {1}, torch::kInt64), root);
    if (size < 0) throw std::runtime_error("root sent a negative size " + std::to_string(size));
    if (!is_root) out.resize(static_cast<size_t>(size));
    if (size > 0) im.bcast(torch::from_blob(out.data(), {size}, torch::kUInt8), root);
    wire = broadcast_wire_bytes(im.opt.rank, root, w, 8) +
           broadcast_wire_bytes(im.opt.rank, root, w, static_cast<uint64_t>(size));
  });
  im.stats.broadcast.wire_bytes += wire;
  return out;
}

std::vector<std::vector<uint8_t>> TrainerGroup::exchange_bytes(const uint8_t* data, size_t size,
                                                               const std::string& label) {
  auto& im = *impl_;
  const int w = im.opt.world_size, me = im.opt.rank;
  std::vector<std::vector<uint8_t>> out(static_cast<size_t>(w));
  out[static_cast<size_t>(me)].assign(data, data + size);
  uint64_t wire = 0;
  im.run(im.stats.exchange, "exchange", label, 8 + size, 0, [&] {
    const auto sizes = im.allgather_raw({static_cast<int64_t>(size)});
    wire += static_cast<uint64_t>(w - 1) * 8;
    for (int r = 0; r < w; ++r) {
      const int64_t n = sizes[static_cast<size_t>(r)];
      if (n < 0) throw std::runtime_error("rank " + std::to_string(r) + " announced a negative size");
      if (n == 0) continue;
      auto& buf = out[static_cast<size_t>(r)];
      if (r != me) buf.resize(static_cast<size_t>(n));
      im.bcast(torch::from_blob(buf.data(), {n}, torch::kUInt8), r);
      wire += broadcast_wire_bytes(me, r, w, static_cast<uint64_t>(n));
    }
  });
  im.stats.exchange.wire_bytes += wire;
  return out;
}

std::vector<int64_t> TrainerGroup::allgather_i64(const std::vector<int64_t>& values,
                                                 const std::string& label) {
  auto& im = *impl_;
  const uint64_t n = values.size() * sizeof(int64_t);
  std::vector<int64_t> out;
  im.run(im.stats.allgather, "allgather", label, n, static_cast<uint64_t>(im.opt.world_size - 1) * n,
         [&] { out = im.allgather_raw(values); });
  if (im.opt.world_size == 1) out = values;
  return out;
}

void TrainerGroup::barrier(const std::string& label) {
  auto& im = *impl_;
  im.run(im.stats.barrier, "barrier", label, 0, 0, [&] { im.wait(im.pg->barrier()); });
}

}  // namespace pulse::rl
