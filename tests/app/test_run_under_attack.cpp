// A tiny `pulse run` while dozens of stalling sockets (no token, a byte now and then, never a whole request
// head) sit on both of its servers, the control and the patch port: the run finishes and its steps keep
// their normal time. Before the accept gate (sync/http_gate.h) such sockets held every request thread and
// steps took tens of seconds (the patch port's 30 s read timeout) instead of a fraction of one.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "app/job.h"
#include "app/run/run_files.h"
#include "tests/app/run_test_util.h"
#include "tests/sync/raw_http_util.h"

namespace fs = std::filesystem;
using namespace pulse::test_run;

namespace {

/// The TCP ports this process listens on: LISTEN entries of /proc/self/net/tcp whose socket is one of this
/// process's descriptors (the run's servers pick free ports of their own).
std::set<int> own_listening_ports() {
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/self/fd", ec)) {
    const std::string target = fs::read_symlink(e.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::set<int> ports;
  std::ifstream in("/proc/self/net/tcp");
  std::string line;
  std::getline(in, line);  // the column names
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
    fields >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
    if (state != "0A" || inodes.count(inode) == 0) continue;
    ports.insert(std::stoi(local.substr(local.find(':') + 1), nullptr, 16));
  }
  return ports;
}

}  // namespace

TEST_CASE("a tiny pulse run under dozens of stalling sockets on both servers keeps its step times",
          "[app][e2e][hostile]") {
  ScopedTempDir dir("attack");
  const std::string cfg = write_tiny_config(dir);
  pulse::app::JobOptions o;
  o.config_path = cfg;
  o.overrides = {"run.dir=" + dir.path + "/run"};
  o.quiet = true;

  std::atomic<bool> done{false};
  std::atomic<int> ports_attacked{0};
  std::thread attacker([&] {
    std::map<int, std::vector<pulse::test::RawSocket>> held;  // port -> its stalling sockets
    while (!done) {
      for (int port : own_listening_ports()) {
        auto& socks = held[port];
        try {
          // A socket the gate closed (408 after its head timeout, 503 when over the cap) is replaced.
          for (auto& s : socks)
            if (!s.send("G")) s = pulse::test::RawSocket(port);
          while (socks.size() < 40) {
            socks.emplace_back(port);
            socks.back().send("G");
          }
        } catch (const std::exception&) {  // the server went away between the scan and the connect
        }
      }
      ports_attacked = static_cast<int>(held.size());
      std::this_thread::sleep_for(std::chrono::milliseconds(250));
    }
  });
  int rc = -1;
  try {
    rc = pulse::app::run_job(o);
  } catch (...) {
    done = true;
    attacker.join();
    throw;
  }
  done = true;
  attacker.join();
  REQUIRE(rc == 0);
  CHECK(ports_attacked >= 2);  // the control and the patch server
  const auto rows = pulse::app::MetricsLog::read(dir.path + "/run/metrics.jsonl");
  REQUIRE(rows.size() == 4);
  for (const auto& row : rows) {
    INFO(row.dump());
    // A step of the tiny run takes well under a second alone (a few on a loaded 2-core machine); a stalled
    // server thread costs at least the 5 s head timeout, the old stall 30 s.
    CHECK(row["step_ms"].get<double>() < 5000);
    CHECK(row["bit_identical"] == true);
  }
}
