// `pulse bench wan` (bench/wan_*.h): link specs, the scaling formula, the numbers read from a run's files,
// namespace naming and the stale-set sweep, and the --quick bench end to end. The tests that need root,
// ip and tc (namespaces) say why they did not run when those are missing.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "app/config.h"
#include "bench/wan_bench.h"
#include "bench/wan_net.h"
#include "bench/wan_report.h"
#include "sync/io/atomic_file.h"
#include "tests/app/run_test_util.h"

namespace wan = pulse::bench::wan;
using nlohmann::json;

namespace {

bool any_with_prefix(const std::string& prefix) {
  for (const auto& n : wan::list_namespaces())
    if (n.rfind(prefix + "-", 0) == 0) return true;
  return false;
}

/// A pid that no process has (a child that already exited and was reaped).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

/// Runs `fn` on a thread that first enters network namespace `ns`.
template <typename F>
std::thread in_namespace(const std::string& ns, F fn) {
  return std::thread([ns, fn] {
    const int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || ::setns(fd, CLONE_NEWNET) != 0) return;
    ::close(fd);
    fn();
  });
}

struct TcpProbe {
  double connect_ms = -1, transfer_ms = -1;
  size_t received = 0;
};

/// A server in `server_ns` on addr:29700 reads `bytes` and answers one byte; a client in `client_ns`
/// connects (timed) and sends them (timed until the answer).
TcpProbe tcp_probe(const std::string& server_ns, const std::string& client_ns, const std::string& addr,
                   size_t bytes) {
  TcpProbe p;
  std::atomic<bool> listening{false};
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(29700);
  ::inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  std::thread server = in_namespace(server_ns, [&] {
    const int ls = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    ::setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(ls, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(ls, 1) != 0) {
      listening = true;
      ::close(ls);
      return;
    }
    listening = true;
    const int c = ::accept(ls, nullptr, nullptr);
    std::vector<char> buf(65536);
    while (p.received < bytes) {
      const ssize_t n = ::read(c, buf.data(), buf.size());
      if (n <= 0) break;
      p.received += static_cast<size_t>(n);
    }
    [[maybe_unused]] ssize_t w = ::write(c, "k", 1);
    ::close(c);
    ::close(ls);
  });
  while (!listening) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::thread client = in_namespace(client_ns, [&] {
    const int s = ::socket(AF_INET, SOCK_STREAM, 0);
    const auto t0 = std::chrono::steady_clock::now();
    if (::connect(s, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
      ::close(s);
      return;
    }
    const auto t1 = std::chrono::steady_clock::now();
    p.connect_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    std::vector<char> data(bytes, 'x');
    size_t sent = 0;
    while (sent < bytes) {
      const ssize_t n = ::write(s, data.data() + sent, bytes - sent);
      if (n <= 0) break;
      sent += static_cast<size_t>(n);
    }
    char ack = 0;
    if (::read(s, &ack, 1) == 1)
      p.transfer_ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
    ::close(s);
  });
  client.join();
  if (p.connect_ms < 0) {  // the server still waits in accept(): wake it
    std::thread poke = in_namespace(server_ns, [&] {
      const int s = ::socket(AF_INET, SOCK_STREAM, 0);
      ::connect(s, reinterpret_cast<const sockaddr*>(&sa), sizeof sa);
      ::close(s);
    });
    poke.join();
  }
  server.join();
  return p;
}

}  // namespace

TEST_CASE("bench wan: link specs parse as RATE[s]@DELAY and bad ones are named", "[wan]") {
  const auto a = wan::parse_link("0.2s@50");
  CHECK(a.real_gbit == Approx(0.2));
  CHECK(a.scaled);
  CHECK(a.delay_ms == Approx(50));
  const auto b = wan::parse_link("2.6");
  CHECK(b.real_gbit == Approx(2.6));
  CHECK_FALSE(b.scaled);
  CHECK(b.delay_ms == 0);
  for (const char* bad : {"", "fast", "0.2x@5", "0@5", "0.2@-1", "0.2@5ms"}) {
    try {
      wan::parse_link(bad);
      FAIL("accepted '" << bad << "'");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(std::string("'") + bad + "'") != std::string::npos);
    }
  }
}

TEST_CASE("bench wan: the scaled rate is real rate * dense bytes / 7B dense bytes", "[wan]") {
  CHECK(wan::scaled_gbit(0.2, 7e6) == Approx(0.2 * 7e6 / 14e9));
  CHECK(wan::scaled_gbit(2.6, 14e9) == Approx(2.6));
  const std::string f = wan::scaling_formula(7e6);
  CHECK(f.find("7000000") != std::string::npos);
  CHECK(f.find("real rate * 0.0005") != std::string::npos);
  CHECK(wan::mtu_for_rate(1e5) == 1500);
  CHECK(wan::mtu_for_rate(0.2e9) == 50000);
  CHECK(wan::mtu_for_rate(2.6e9) == 65000);
}

TEST_CASE("bench wan: namespace names carry the owner pid and other names are not the bench's", "[wan]") {
  CHECK(wan::namespace_name("pulsewan", 123, "w0") == "pulsewan-123-w0");
  CHECK(wan::namespace_owner("pulsewan", "pulsewan-123-w0") == 123);
  CHECK(wan::namespace_owner("pulsewan", "pulsewan-123-work") == 123);
  for (const char* other : {"pulsewan", "pulsewan-", "pulsewan-x1-w0", "pulsewan-12", "pulsewan-12-",
                            "pulsewanx-12-w0", "other-12-w0", "pulsewan--w0"})
    CHECK(wan::namespace_owner("pulsewan", other) == -1);
}

TEST_CASE("bench wan: sync numbers from the trainer's rows and the workers' applied events", "[wan]") {
  std::vector<json> rows;
  for (int s = 0; s < 4; ++s)
    rows.push_back(json{{"step", s},
                        {"step_ms", s == 0 ? 5000.0 : 1000.0},
                        {"train_ms", 300.0},
                        {"encode_ms", 20.0},
                        {"generate_ms", 500.0},
                        {"bit_identical", true}});
  std::vector<std::vector<json>> events(2);
  for (int w = 0; w < 2; ++w) {
    events[w].push_back(json{{"event", "registered"}});
    for (int v = 0; v <= 4; ++v)  // version 0: the bootstrap; 1: step 0's (skipped with it)
      events[w].push_back(json{{"event", "applied"},
                               {"version", v},
                               {"bytes", v <= 1 ? 1e7 : 1000.0 * (w + 1)},
                               {"ms", v <= 1 ? 9e4 : 100.0 * (w + 1)},
                               {"fetch_ms", v <= 1 ? 9e4 : 80.0 * (w + 1)}});
  }
  wan::WanRun run;
  run.path = "sync";
  wan::fill_sync_run(run, rows, events);
  CHECK(run.steps == 3);
  CHECK(*run.step_ms == Approx(1000));
  CHECK(*run.trainer_wait_ms == Approx(180));  // 1000 - 300 - 20 - 500
  CHECK(*run.busy_trainer == Approx(0.82));
  CHECK(*run.worker_wait_ms == Approx(150));  // mean of 100 and 200
  CHECK(*run.busy_workers == Approx(0.85));
  CHECK(*run.transfer_ms == Approx(120));
  CHECK(*run.bytes_per_step == Approx(1500));
  CHECK(run.bit_identical);
  rows[2]["bit_identical"] = false;
  wan::WanRun bad;
  wan::fill_sync_run(bad, rows, events);
  CHECK_FALSE(bad.bit_identical);
}

TEST_CASE("bench wan: loco numbers per outer round from rank 0's rows", "[wan]") {
  std::vector<json> rows;
  for (int s = 0; s < 4; ++s) {
    json r{{"step", s},
           {"step_ms", 1000.0},
           {"comm_payload_bytes", s % 2 ? 4000.0 : 0.0},
           {"bit_identical", true}};
    if (s % 2) r["outer_step_ms"] = 500.0 * (s + 1) / 2;  // rounds end at steps 1 and 3: 500, 1000 ms
    rows.push_back(r);
  }
  wan::WanRun run;
  run.path = "loco";
  run.mode = "pulseloco";
  wan::fill_loco_run(run, rows, 2);
  CHECK(run.rounds == 2);
  CHECK(*run.comm_ms_per_round == Approx(750));
  CHECK(*run.bytes_per_round == Approx(4000));
  CHECK(*run.transfer_ms == Approx(375));
  CHECK(*run.busy_trainer == Approx(1 - 750.0 / 2750.0));
  const json j = wan::wan_json({run}, 7e6);
  const auto& r = j.at("runs").at(0);
  for (const char* key : {"path", "mode", "link_gbit", "scaled", "delay_ms", "step_ms", "busy_trainer",
                          "busy_workers", "transfer_ms", "bytes_per_step", "bit_identical"})
    CHECK(r.contains(key));
  CHECK(r.at("busy_workers").is_null());
  CHECK(j.at("formula").get<std::string>().find("7B") != std::string::npos);
}

TEST_CASE("bench wan: the report of one path draws that path's plot only", "[wan]") {
  pulse::test_run::ScopedTempDir dir("wan-report");
  wan::WanRun sync_run;
  sync_run.path = "sync";
  sync_run.mode = "pulsesync";
  sync_run.busy_trainer = 0.5;
  sync_run.busy_workers = 0.9;
  wan::WanRun loco_run;
  loco_run.path = "loco";
  loco_run.mode = "pulseloco";
  loco_run.comm_ms_per_round = 250;
  const auto svgs = [](const std::string& html) {
    size_t n = 0;
    for (auto at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) ++n;
    return n;
  };
  // A sync-only bench once failed here: the empty comm plot on a log scale made gnuplot refuse the script.
  wan::write_wan_html(dir.path + "/sync.html", {sync_run}, 6e6);
  CHECK(svgs(pulse::sync::read_file(dir.path + "/sync.html")) == 1);
  wan::write_wan_html(dir.path + "/loco.html", {loco_run}, 6e6);
  CHECK(svgs(pulse::sync::read_file(dir.path + "/loco.html")) == 1);
  wan::write_wan_html(dir.path + "/both.html", {sync_run, loco_run}, 6e6);
  CHECK(svgs(pulse::sync::read_file(dir.path + "/both.html")) == 2);
}

TEST_CASE("bench wan: sync.dense needs an anchor at every version", "[wan]") {
  CHECK_THROWS_WITH(pulse::app::parse_config("", "t.toml", {"sync.dense=true"}),
                    Catch::Contains("sync.dense") && Catch::Contains("anchor_every = 1"));
  const auto c = pulse::app::parse_config("", "t.toml", {"sync.dense=true", "sync.anchor_every=1"});
  CHECK(c.sync.dense);
}

TEST_CASE(
    "bench wan: stale sets of a killed bench are swept, live and foreign ones kept, and a taken name is "
    "refused",
    "[wan][netns]") {
  if (const std::string why = wan::missing_prerequisites(); !why.empty()) {
    WARN("skipped: " << why);
    return;
  }
  const std::string prefix = "pwtest" + std::to_string(::getpid() % 100000);
  const std::string dead = wan::namespace_name(prefix, dead_pid(), "t");
  const std::string alive = wan::namespace_name(prefix, ::getpid() == 1 ? 2 : 1, "t");  // init is alive
  const std::string foreign = prefix + "-notabench";
  pulse::test_run::ScopedTempDir tmp("wan-sweep");
  const std::string stale_dir = tmp.path + "/" + wan::namespace_name(prefix, dead_pid(), "work");
  std::filesystem::create_directories(stale_dir);
  for (const auto& n : {dead, alive, foreign}) wan::run_tool({"ip", "netns", "add", n});
  struct Cleanup {  // the test's own namespaces go whatever happens
    std::vector<std::string> names;
    ~Cleanup() {
      const auto now = wan::list_namespaces();
      for (const auto& n : names)
        if (std::find(now.begin(), now.end(), n) != now.end()) wan::run_tool({"ip", "netns", "delete", n});
    }
  } cleanup{{dead, alive, foreign}};
  const int removed = wan::sweep_stale(prefix, tmp.path);
  CHECK_THROWS_WITH(wan::Namespace{alive}, Catch::Contains("already exists") && Catch::Contains(alive));
  const auto names = wan::list_namespaces();
  CHECK(removed == 1);
  CHECK(std::find(names.begin(), names.end(), dead) == names.end());
  CHECK(std::find(names.begin(), names.end(), alive) != names.end());
  CHECK(std::find(names.begin(), names.end(), foreign) != names.end());
  CHECK_FALSE(std::filesystem::exists(stale_dir));
}

TEST_CASE("bench wan: a link carries TCP at its shaped rate with its delay and is gone afterwards",
          "[wan][netns]") {
  if (const std::string why = wan::missing_prerequisites(); !why.empty()) {
    WARN("skipped: " << why);
    return;
  }
  const std::string prefix = "pwlink" + std::to_string(::getpid() % 100000);
  {
    wan::Namespace a(wan::namespace_name(prefix, ::getpid(), "a")),
        b(wan::namespace_name(prefix, ::getpid(), "b"));
    wan::Link link(0, a.name(), b.name(), 50, 1500);
    link.shape(8e6);  // 1 MB/s
    // A TCP connect takes one round trip (two one-way delays); 1 MB then takes about a second at 1 MB/s.
    const TcpProbe p = tcp_probe(a.name(), b.name(), link.hub_addr(), 1 << 20);
    CHECK(p.connect_ms >= 95);
    CHECK(p.connect_ms < 400);
    CHECK(p.transfer_ms >= 800);
    CHECK(p.transfer_ms < 3000);
    CHECK(p.received == (1 << 20));
    CHECK(link.relayed_bytes() >= (1u << 20));
  }
  CHECK_FALSE(any_with_prefix(prefix));
}

TEST_CASE("bench wan --quick: both paths over a delayed link, bit-identical, nothing left behind",
          "[wan][netns][e2e]") {
  if (const std::string why = wan::missing_prerequisites(); !why.empty()) {
    WARN("skipped: " << why);
    return;
  }
  pulse::test_run::ScopedTempDir dir("wan-quick");
  const std::string prefix = "pwquick" + std::to_string(::getpid() % 100000);
  const pid_t pid = pulse::test_run::spawn_pulse(
      {"bench", "wan", "--quick", "--json", "--prefix", prefix, "--out", dir.path + "/out"},
      dir.path + "/bench");
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(600)) {
      ::kill(pid, SIGTERM);  // the bench removes what it made on SIGTERM
      ::waitpid(pid, &status, 0);
      FAIL("bench wan --quick ran past 600 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  INFO(pulse::sync::read_file(dir.path + "/bench.err"));
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  const json j = json::parse(pulse::sync::read_file(dir.path + "/bench.out"));
  const auto& runs = j.at("runs");
  REQUIRE(runs.size() == 4);
  std::map<std::string, json> by_mode;
  for (const auto& r : runs) {
    by_mode[r.at("mode").get<std::string>()] = r;
    CHECK(r.at("complete").get<bool>());
    CHECK(r.at("bit_identical").get<bool>());
    CHECK(r.at("delay_ms").get<double>() == 50);
  }
  // Dense ships the whole model each step, PULSESync only the changed elements.
  CHECK(by_mode.at("dense").at("bytes_per_step").get<double>() >
        5 * by_mode.at("pulsesync").at("bytes_per_step").get<double>());
  CHECK(by_mode.at("diloco").at("bytes_per_round").get<double>() >
        by_mode.at("pulseloco").at("bytes_per_round").get<double>());
  // The defaults: asynchronous sync runs (workers prefetch), pulseloco with ULP value coding.
  CHECK(by_mode.at("pulsesync").at("max_lag") == 1);
  CHECK(by_mode.at("dense").at("max_lag") == 1);
  CHECK(by_mode.at("pulseloco").at("values") == "ulp");
  CHECK(by_mode.at("diloco").at("values").is_null());
  CHECK(std::filesystem::exists(dir.path + "/out/report.html"));
  CHECK_FALSE(any_with_prefix(prefix));
}
