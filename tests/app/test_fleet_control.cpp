// The control server's membership (app/wire/control.h) driven by hand-written members over loopback HTTP: leases,
// reassignment of a dead member's shares, replacement by name, 409 while full, 410 for unknown keys, the
// no-worker timeout, and registration that waits for a trainer that is not up yet. No model: fast.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "app/config.h"
#include "app/wire/control.h"
#include "app/trainer/publisher.h"
#include "app/worker/worker.h"
#include "sync/httplib_config.h"
#include "sync/transport_fs.h"
#include "sync/transport_source.h"
#include "tests/app/run_test_util.h"

using namespace pulse;
using Clock = std::chrono::steady_clock;

namespace {

app::ControlServer make_server(int64_t workers, double lease_s, double no_worker_s = 600) {
  return app::ControlServer("127.0.0.1", 0, "secret", app::RegisterReply{}, "tok", workers,
                            app::FleetPolicy{workers, lease_s, no_worker_s});
}

std::vector<app::JobWork> shares(int n, int prompts_each) {
  std::vector<app::JobWork> out(static_cast<size_t>(n));
  for (auto& w : out) w.problems.resize(static_cast<size_t>(prompts_each));
  return out;
}

/// A member's answer for every share it was given.
void answer(app::ControlClient& c, const app::Job& job) {
  for (const auto& w : job.work) {
    app::WorkerReport r;
    r.seq = job.seq;
    r.share = w.share;
    r.version = job.version;
    r.root_hash = "00";
    c.report(r);
  }
}

}  // namespace

TEST_CASE("fleet: a dead member's shares go to the live one after its lease, ids, 409, 410", "[app][fleet]") {
  auto server = make_server(2, 0.6);
  server.start();
  app::ControlClient a(server.url(), "secret", 5, 0), b(server.url(), "secret", 5, 0);
  const app::RegisterReply ra = a.register_worker("");
  const app::RegisterReply rb = b.register_worker("gpu-b");
  CHECK(ra.worker_id == "w0");
  CHECK(rb.worker_id == "gpu-b");
  CHECK(ra.key != rb.key);
  CHECK(ra.lease_s == 0.6);
  // Full: a third member waits (409) and gives up after its wait.
  app::ControlClient c(server.url(), "secret", 5, 0);
  int waits = 0;
  CHECK_THROWS_WITH(
      c.register_worker("", 0.3,
                        [&](const std::string& why) {
                          ++waits;
                          CHECK_THAT(why, Catch::Contains("HTTP 409") && Catch::Contains("2 live workers"));
                        }),
      Catch::Contains("gave up"));
  CHECK(waits >= 1);
  // A wrong token is refused at once (no waiting).
  app::ControlClient intruder(server.url(), "wrong", 5, 0);
  CHECK_THROWS_WITH(intruder.register_worker("", 60), Catch::Contains("HTTP 401"));

  const uint64_t id = server.post_job(app::JobKind::Generate, 3, 7, shares(2, 5));
  const app::Job ja = a.next_job(0);
  const app::Job jb = b.next_job(0);
  REQUIRE(ja.work.size() == 1);
  REQUIRE(jb.work.size() == 1);
  CHECK(ja.work[0].share == 0);
  CHECK(jb.work[0].share == 1);
  answer(a, ja);
  // b dies (no report, no heartbeat): after the lease its share goes to a, at the same version.
  const auto t0 = Clock::now();
  std::thread keep_a_alive([&] {
    for (int i = 0; i < 20; ++i) {
      a.heartbeat();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  const app::Job again = a.next_job(ja.seq);
  const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
  keep_a_alive.join();
  CHECK(waited >= 0.5);
  CHECK(waited < 3.0);
  REQUIRE(again.work.size() == 1);
  CHECK(again.work[0].share == 1);
  CHECK(again.version == 3);
  CHECK(again.work[0].problems.size() == 5);
  answer(a, again);
  const auto reports = server.wait_job(id, {});
  REQUIRE(reports.size() == 2);
  CHECK(reports[0].worker_id == "w0");
  CHECK(reports[1].worker_id == "w0");
  CHECK(reports[1].share == 1);
  const app::FleetEvents ev = server.events();
  CHECK(ev.joins == 2);
  CHECK(ev.drops == 1);
  CHECK(ev.reassigned_shares == 1);
  CHECK(ev.reassigned_prompts == 5);
  CHECK(ev.live == 1);
  // The dead member's key is unknown now: 410 (it would register again), saying the lease was missed.
  CHECK_THROWS_WITH(b.heartbeat(), Catch::Contains("HTTP 410") && Catch::Contains("lease of 0.6 s missed") &&
                                       !Catch::Contains(app::kReplacedMarker));
  // Its place is free again; a member registering a live member's name replaces it at once, and the
  // replaced one is told so (its worker stops instead of taking the name back).
  app::ControlClient a2(server.url(), "secret", 5, 0);
  CHECK(a2.register_worker("w0").worker_id == "w0");
  CHECK_THROWS_WITH(a.heartbeat(), Catch::Contains("HTTP 410") &&
                                       Catch::Contains(std::string(app::kReplacedMarker) + " 'w0'"));
  CHECK_THROWS_WITH(a.next_job(again.seq), Catch::Contains(app::kReplacedMarker));
  CHECK(server.live_ids() == std::vector<std::string>{"w0"});
  server.stop();
}

TEST_CASE("fleet: members that took the stop job are not dropped when their lease runs out", "[app][fleet]") {
  // The trainer's final Pass@1 runs after the stop job: its members left when told to, so no drop warning.
  auto server = make_server(1, 0.3);
  server.start();
  app::ControlClient a(server.url(), "secret", 5, 0);
  a.register_worker("");
  std::thread stopper([&] { server.post_stop(5); });
  const app::Job job = a.next_job(0);
  stopper.join();
  CHECK(job.kind == app::JobKind::Stop);
  std::this_thread::sleep_for(std::chrono::milliseconds(900));  // three leases; the sweeper runs every 100 ms
  CHECK(server.events().drops == 0);
  server.stop();
}

TEST_CASE("fleet: a late member syncs before it gets work, sync jobs wait for every live member",
          "[app][fleet]") {
  auto server = make_server(2, 5);
  server.start();
  app::ControlClient a(server.url(), "secret", 5, 0);
  a.register_worker("a");
  const uint64_t id = server.post_job(app::JobKind::Sync, 4, 0, {});
  const app::Job ja = a.next_job(0);
  CHECK(ja.kind == app::JobKind::Sync);
  CHECK(ja.work.empty());
  // b joins before a reported: the sync now waits for both.
  app::ControlClient b(server.url(), "secret", 5, 0);
  b.register_worker("b");
  app::WorkerReport ra;
  ra.seq = ja.seq;
  ra.version = 4;
  a.report(ra);
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    auto reports = server.wait_job(id, {});
    CHECK(reports.size() == 2);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_FALSE(done);
  const app::Job jb = b.next_job(0);
  app::WorkerReport rb;
  rb.seq = jb.seq;
  rb.version = 4;
  b.report(rb);
  waiter.join();
  CHECK(done);
  // A generate job with both live: round-robin in slot order; a member with nothing left waits.
  server.post_job(app::JobKind::Generate, 4, 1, shares(2, 1));
  CHECK(a.next_job(jb.seq).work.at(0).share == 0);
  CHECK(b.next_job(jb.seq).work.at(0).share == 1);
  server.stop();
}

TEST_CASE("fleet: with no live member the trainer's wait fails after no_worker_timeout_s", "[app][fleet]") {
  auto server = make_server(1, 0.3, 1.0);
  server.start();
  app::ControlClient a(server.url(), "secret", 5, 0);
  a.register_worker("");
  const uint64_t id = server.post_job(app::JobKind::Generate, 1, 2, shares(1, 3));
  const auto t0 = Clock::now();
  CHECK_THROWS_WITH(server.wait_job(id, {}), Catch::Contains("no inference worker alive") &&
                                                 Catch::Contains("no_worker_timeout_s") &&
                                                 Catch::Contains("step 2"));
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  CHECK(s > 1.0);  // lease 0.3 s + timeout 1 s
  CHECK(s < 4.0);
  server.stop();
}

TEST_CASE("fleet: a member started before the trainer registers once it listens", "[app][fleet]") {
  // A free port, then nothing listening on it for a while.
  int port = 0;
  {
    auto probe = make_server(1, 5);
    probe.start();
    port = probe.port();
    probe.stop();
  }
  app::RegisterReply reply;
  std::vector<std::string> waits;
  std::thread member([&] {
    app::ControlClient c("http://127.0.0.1:" + std::to_string(port), "secret", 5, 0);
    reply = c.register_worker("early", 30, [&](const std::string& why) { waits.push_back(why); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  app::ControlServer server("127.0.0.1", port, "secret", app::RegisterReply{}, "tok", 1);
  server.start();
  member.join();
  CHECK(reply.worker_id == "early");
  REQUIRE_FALSE(waits.empty());
  CHECK_THAT(waits[0], Catch::Contains("not reachable"));
  server.stop();
}

TEST_CASE("fleet: a second trainer cannot listen on the control port a live one holds", "[app][fleet]") {
  auto first = make_server(1, 5);
  first.start();
  app::ControlServer second("127.0.0.1", first.port(), "secret", app::RegisterReply{}, "tok", 1);
  CHECK_THROWS_WITH(second.start(), Catch::Contains("cannot bind 127.0.0.1:" + std::to_string(first.port())));
  first.stop();
}

TEST_CASE("fleet: temp folders of killed workers are swept, live ones kept", "[app][fleet]") {
  test_run::ScopedTempDir dir("fleet-sweep");
  // A process that is gone: a child that exited.
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  REQUIRE(::waitpid(dead, nullptr, 0) == dead);
  const std::string stale = dir.path + "/pulse-worker-" + std::to_string(dead) + "-abc123";
  const std::string live = dir.path + "/pulse-worker-" + std::to_string(::getppid()) + "-def456";
  const std::string other = dir.path + "/pulse-worker-notapid";
  for (const auto& p : {stale, live, other}) std::filesystem::create_directories(p + "/sub");
  CHECK(app::sweep_stale_worker_dirs(dir.path) == 1);
  CHECK_FALSE(std::filesystem::exists(stale));
  CHECK(std::filesystem::exists(live));
  CHECK(std::filesystem::exists(other));
}

TEST_CASE("fleet: the fs folder keeps the store's anchors and the chain a live worker still needs",
          "[app][fleet][fs]") {
  test_run::ScopedTempDir dir("fleet-fs-retention");
  app::Config config;
  config.transport.kind = app::TransportKind::Fs;
  config.transport.dir = dir.path + "/shared";
  config.sync.retention.anchor_every = 2;
  config.sync.retention.keep_anchors = 1;
  std::vector<uint16_t> w(256, 0x3F80);
  auto view = [&] {
    return std::vector<sync::TensorView>{sync::TensorView{
        "model.w", sync::DType::BF16, {256}, reinterpret_cast<const uint8_t*>(w.data()), w.size() * 2}};
  };
  app::Publisher pub(config, dir.path, "", 0);
  pub.publish_first(0, view());
  std::vector<std::string> live = {"slow"};
  pub.set_live_workers([&] { return live; });
  sync::FsPatchSource(config.transport.dir).confirm("slow", 1, 0);  // live, lagging at version 1
  sync::FsPatchSource(config.transport.dir).confirm("dead", 0, 0);  // not live: does not hold anything
  auto names = [&] {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(config.transport.dir))
      if (e.is_regular_file() && e.path().extension() == ".ready") out.insert(e.path().stem().string());
    return out;
  };
  auto v = [](unsigned long long x) {
    char b[32];
    std::snprintf(b, sizeof b, "%020llu", x);
    return std::string(b);
  };
  auto patch = [&](int a, int b) { return "patch-" + v(a) + "-" + v(b) + ".pulse"; };
  for (int version = 1; version <= 6; ++version) {
    w[static_cast<size_t>(version)] = 0x4000;
    pub.publish(static_cast<uint64_t>(version), view());
  }
  // keep_anchors = 1: the store keeps anchor 6 only; the folder also keeps slow's chain from version 1.
  CHECK(names() == std::set<std::string>{"anchor-" + v(6) + ".pulse", patch(1, 2), patch(2, 3), patch(3, 4),
                                         patch(4, 5), patch(5, 6)});
  // Once slow is gone (dropped), the next publish prunes to what the store keeps.
  live.clear();
  w[7] = 0x4000;
  pub.publish(7, view());
  CHECK(names() == std::set<std::string>{"anchor-" + v(6) + ".pulse", patch(6, 7)});
  pub.stop();
}
