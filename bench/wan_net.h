// `pulse bench wan`: emulated hosts and slow links (Linux network namespaces, tun devices, tc, a delaying
// packet relay). Root only; the iproute2 tools `ip` and `tc` do the configuration.
//
// A host is a network namespace named "<prefix>-<pid>-<host>" (pid: the bench process that made it), so a
// later bench can tell its own stale sets (owner gone) from anything else. A link joins a hub host and a
// leaf host with a point-to-point pair of tun devices, 10.77.<link>.1 (hub) and 10.77.<link>.2 (leaf):
// every IP packet one side sends is read by a relay thread of the bench, held for the one-way delay and
// written into the other side's device (one thread per direction). The kernel here has no netem, and a TCP
// relay on fixed ports could not carry Gloo's mesh (its ports are picked at run time), so the delay sits
// below TCP, as on a real long link. The rate is a tc token bucket (tbf) on both devices' egress: what a
// side sends leaves at most at `rate` bit/s before the delay is added.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace pulse::bench::wan {

/// Why the bench cannot run here ("" = it can): not root, `ip` or `tc` not on PATH, no /dev/net/tun.
std::string missing_prerequisites();

/// Runs `argv` (argv[0] on PATH) and returns its stdout. Throws std::runtime_error naming the command and
/// quoting its stderr when it cannot start or exits non-zero.
std::string run_tool(const std::vector<std::string>& argv);

/// "<prefix>-<pid>-<host>".
std::string namespace_name(const std::string& prefix, pid_t owner, const std::string& host);
/// The owner pid of a name of that form with this prefix, or -1 for any other name.
long namespace_owner(const std::string& prefix, const std::string& name);
/// The names `ip netns list` prints (first word of each line).
std::vector<std::string> list_namespaces();

/// Removes the namespaces "<prefix>-<pid>-*" whose pid is gone (a killed bench): kills what still runs
/// in them, deletes them, and removes the folders "<tmp>/<prefix>-<pid>-*" of those pids. Returns the number
/// of namespaces removed. Anything else, and sets whose bench is alive, are left alone.
int sweep_stale(const std::string& prefix, const std::string& tmp_dir);

/// A network namespace this object created (with its loopback up) and deletes: every process still in
/// it gets SIGKILL first. Throws std::runtime_error when the name is already taken.
class Namespace {
 public:
  explicit Namespace(std::string name);
  ~Namespace();
  Namespace(const Namespace&) = delete;
  Namespace& operator=(const Namespace&) = delete;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
};

/// One emulated link between two namespaces (see the file comment). Thread safety: shape()/unshape()
/// from one thread; the relay threads are internal.
class Link {
 public:
  /// Creates devices "pw<index>h" in `hub` and "pw<index>l" in `leaf` (up, addressed, MTU `mtu`) and
  /// starts the relay with `delay_ms` each way. Unshaped until shape(). Throws std::runtime_error.
  Link(int index, const std::string& hub, const std::string& leaf, double delay_ms, int mtu);
  ~Link();
  Link(const Link&) = delete;
  Link& operator=(const Link&) = delete;

  /// Limits both directions to `bits_per_s` (tc tbf on both devices).
  void shape(double bits_per_s);
  std::string hub_addr() const;   ///< "10.77.<index>.1"
  std::string leaf_addr() const;  ///< "10.77.<index>.2"
  std::string hub_dev() const;    ///< "pw<index>h"
  std::string leaf_dev() const;   ///< "pw<index>l"
  uint64_t relayed_bytes() const { return relayed_[0] + relayed_[1]; }

 private:
  void relay(int from_fd, int to_fd, int direction);

  int index_;
  std::string hub_, leaf_;
  double delay_ms_;
  int mtu_;
  int hub_fd_ = -1, leaf_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> relayed_[2] = {0, 0};
  std::thread threads_[2];
};

/// The tbf MTU for a rate: 2 ms of the link's bytes, within 1500..65000 (large packets keep the relay's
/// per-packet work low on fast links; small ones keep a slow link smooth).
int mtu_for_rate(double bits_per_s);

}  // namespace pulse::bench::wan
