#include "bench/wan_net.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace fs = std::filesystem;

namespace pulse::bench::wan {
namespace {

bool on_path(const std::string& tool) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/sbin:/usr/bin:/sbin:/bin");
  std::string d;
  while (std::getline(dirs, d, ':'))
    if (!d.empty() && ::access((d + "/" + tool).c_str(), X_OK) == 0) return true;
  return false;
}

std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) {
      out.append(buf, static_cast<size_t>(n));
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      break;
    }
  }
  return out;
}

/// Opens (creating) tun device `dev` inside namespace `ns`, non-blocking. A thread of its own enters the
/// namespace, so that the bench's other threads stay where they are.
int open_tun_in(const std::string& ns, const std::string& dev) {
  int fd = -1;
  std::string error;
  std::thread([&] {
    const std::string ns_path = "/run/netns/" + ns;
    const int nsfd = ::open(ns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0) {
      error = "cannot open " + ns_path + ": " + std::strerror(errno);
      return;
    }
    const int rc = ::setns(nsfd, CLONE_NEWNET);
    ::close(nsfd);
    if (rc != 0) {
      error = "cannot enter namespace " + ns + ": " + std::strerror(errno);
      return;
    }
    fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      error = std::string("cannot open /dev/net/tun: ") + std::strerror(errno);
      return;
    }
    ifreq ifr{};
    ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
    std::strncpy(ifr.ifr_name, dev.c_str(), IFNAMSIZ - 1);
    if (::ioctl(fd, TUNSETIFF, &ifr) != 0) {
      error = "cannot create tun device " + dev + " in " + ns + ": " + std::strerror(errno);
      ::close(fd);
      fd = -1;
    }
  }).join();
  if (fd < 0) throw std::runtime_error("bench wan: " + error);
  return fd;
}

std::string fmt_int(double x) {
  return std::to_string(static_cast<long long>(std::llround(x)));
}

}  // namespace

std::string missing_prerequisites() {
  if (::geteuid() != 0)
    return "needs root (it creates network namespaces and tc qdiscs); run it as root, e.g. sudo pulse bench "
           "wan";
  for (const char* tool : {"ip", "tc"})
    if (!on_path(tool))
      return std::string("needs `") + tool + "` (iproute2) on PATH; install the Debian package iproute2";
  if (::access("/dev/net/tun", R_OK | W_OK) != 0) return "needs /dev/net/tun (the tun driver) for its links";
  return "";
}

std::string run_tool(const std::vector<std::string>& argv) {
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0)
    throw std::runtime_error("bench wan: cannot run `" + cmd + "`: pipe: " + std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (auto& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(out[1]);
  ::close(err[1]);
  if (rc != 0) {
    ::close(out[0]);
    ::close(err[0]);
    throw std::runtime_error("bench wan: cannot run `" + cmd + "`: " + std::strerror(rc));
  }
  // stderr is small (an error line); stdout is read first and may be long (ip netns pids).
  std::string o = read_all(out[0]);
  std::string e = read_all(err[0]);
  ::close(out[0]);
  ::close(err[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
    throw std::runtime_error("bench wan: `" + cmd + "` failed: " + (e.empty() ? "no message" : e));
  }
  return o;
}

std::string namespace_name(const std::string& prefix, pid_t owner, const std::string& host) {
  return prefix + "-" + std::to_string(owner) + "-" + host;
}

long namespace_owner(const std::string& prefix, const std::string& name) {
  if (name.size() <= prefix.size() + 1 || name.compare(0, prefix.size(), prefix) != 0 ||
      name[prefix.size()] != '-')
    return -1;
  const size_t begin = prefix.size() + 1, dash = name.find('-', begin);
  if (dash == std::string::npos || dash == begin || dash + 1 >= name.size()) return -1;
  long pid = 0;
  for (size_t i = begin; i < dash; ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > 100000000) return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid > 0 ? pid : -1;
}

std::vector<std::string> list_namespaces() {
  std::vector<std::string> names;
  std::stringstream lines(run_tool({"ip", "netns", "list"}));
  std::string line;
  while (std::getline(lines, line)) {
    const std::string name = line.substr(0, line.find(' '));
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

namespace {

/// SIGKILLs every process in namespace `ns` (ip netns pids) and waits up to 2 s for them to go.
void kill_namespace_processes(const std::string& ns) {
  for (int round = 0; round < 40; ++round) {
    std::string pids;
    try {
      pids = run_tool({"ip", "netns", "pids", ns});
    } catch (const std::exception&) {
      return;
    }
    std::stringstream s(pids);
    long pid = 0;
    bool any = false;
    while (s >> pid)
      if (pid > 1 && pid != ::getpid()) {
        ::kill(static_cast<pid_t>(pid), SIGKILL);
        any = true;
      }
    if (!any) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace

int sweep_stale(const std::string& prefix, const std::string& tmp_dir) {
  int removed = 0;
  std::vector<long> dead;
  for (const auto& name : list_namespaces()) {
    const long pid = namespace_owner(prefix, name);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // its bench is alive
    kill_namespace_processes(name);
    try {
      run_tool({"ip", "netns", "delete", name});
      ++removed;
    } catch (const std::exception&) {
      // Someone else removed it meanwhile.
    }
    dead.push_back(pid);
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(tmp_dir, ec)) {
    const std::string name = e.path().filename().string();
    const long pid = namespace_owner(prefix, name);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
  }
  return removed;
}

Namespace::Namespace(std::string name) : name_(std::move(name)) {
  const auto names = list_namespaces();
  if (std::find(names.begin(), names.end(), name_) != names.end())
    throw std::runtime_error("bench wan: network namespace '" + name_ +
                             "' already exists and was not made by this bench; remove it (ip netns delete " +
                             name_ + ") or pick another --prefix");
  run_tool({"ip", "netns", "add", name_});
  try {
    run_tool({"ip", "-n", name_, "link", "set", "lo", "up"});
  } catch (...) {
    try {
      run_tool({"ip", "netns", "delete", name_});
    } catch (const std::exception&) {
    }
    throw;
  }
}

Namespace::~Namespace() {
  kill_namespace_processes(name_);
  try {
    run_tool({"ip", "netns", "delete", name_});
  } catch (const std::exception&) {
    // Nothing left to do in a destructor; the next bench sweeps a leftover (its owner pid is gone).
  }
}

int mtu_for_rate(double bits_per_s) {
  const double two_ms = bits_per_s / 8 * 0.002;
  return static_cast<int>(std::clamp(two_ms, 1500.0, 65000.0));
}

std::string Link::hub_addr() const {
  return "10.77." + std::to_string(index_) + ".1";
}
std::string Link::leaf_addr() const {
  return "10.77." + std::to_string(index_) + ".2";
}
std::string Link::hub_dev() const {
  return "pw" + std::to_string(index_) + "h";
}
std::string Link::leaf_dev() const {
  return "pw" + std::to_string(index_) + "l";
}

Link::Link(int index, const std::string& hub, const std::string& leaf, double delay_ms, int mtu)
    : index_(index), hub_(hub), leaf_(leaf), delay_ms_(delay_ms), mtu_(mtu) {
  if (index < 0 || index > 255) throw std::invalid_argument("bench wan: link index must be 0..255");
  try {
    hub_fd_ = open_tun_in(hub_, hub_dev());
    leaf_fd_ = open_tun_in(leaf_, leaf_dev());
    const struct {
      std::string ns, dev, addr, peer;
    } sides[] = {{hub_, hub_dev(), hub_addr(), leaf_addr()}, {leaf_, leaf_dev(), leaf_addr(), hub_addr()}};
    for (const auto& s : sides) {
      run_tool({"ip", "-n", s.ns, "addr", "add", s.addr, "peer", s.peer, "dev", s.dev});
      run_tool({"ip", "-n", s.ns, "link", "set", "dev", s.dev, "mtu", std::to_string(mtu), "up"});
    }
  } catch (...) {
    if (hub_fd_ >= 0) ::close(hub_fd_);
    if (leaf_fd_ >= 0) ::close(leaf_fd_);
    throw;
  }
  threads_[0] = std::thread([this] { relay(hub_fd_, leaf_fd_, 0); });
  threads_[1] = std::thread([this] { relay(leaf_fd_, hub_fd_, 1); });
}

Link::~Link() {
  stop_ = true;
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  // Closing a non-persistent tun device's only descriptor removes the device.
  ::close(hub_fd_);
  ::close(leaf_fd_);
}

void Link::shape(double bits_per_s) {
  const double bytes_per_s = bits_per_s / 8;
  // The bucket holds 2 MTUs or 5 ms of the rate, whichever is more (tbf drops packets above the bucket);
  // the queue holds half a second of the rate (at least 128 KiB) so that TCP sees a deep, lossless pipe.
  const double burst = std::max(2.0 * mtu_ + 1000, bytes_per_s * 0.005);
  const double limit = std::max(131072.0, bytes_per_s * 0.5) + burst;
  for (const auto& [ns, dev] : {std::pair{hub_, hub_dev()}, std::pair{leaf_, leaf_dev()}})
    run_tool({"tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate",
              fmt_int(bits_per_s) + "bit", "burst", fmt_int(burst), "limit", fmt_int(limit)});
}

void Link::relay(int from_fd, int to_fd, int direction) {
  using Clock = std::chrono::steady_clock;
  struct Packet {
    Clock::time_point due;
    std::vector<uint8_t> bytes;
  };
  std::deque<Packet> queue;  // in arrival order, so in due order (one delay for all)
  const auto delay =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(delay_ms_));
  std::vector<uint8_t> buf(65536);
  while (!stop_) {
    int timeout_ms = 50;  // the stop flag is seen within this
    if (!queue.empty()) {
      const auto wait =
          std::chrono::duration_cast<std::chrono::microseconds>(queue.front().due - Clock::now());
      timeout_ms = std::clamp(static_cast<int>((wait.count() + 999) / 1000), 0, 50);
    }
    pollfd p{from_fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, timeout_ms);
    if (rc > 0 && (p.revents & POLLIN)) {
      for (;;) {
        const ssize_t n = ::read(from_fd, buf.data(), buf.size());
        if (n <= 0) break;
        queue.push_back({Clock::now() + delay, std::vector<uint8_t>(buf.begin(), buf.begin() + n)});
      }
    }
    const auto now = Clock::now();
    while (!queue.empty() && queue.front().due <= now) {
      const auto& pkt = queue.front().bytes;
      // A full receive queue on the other side drops the packet, as a router would; TCP resends it.
      if (::write(to_fd, pkt.data(), pkt.size()) > 0) relayed_[direction] += pkt.size();
      queue.pop_front();
    }
  }
}

}  // namespace pulse::bench::wan
