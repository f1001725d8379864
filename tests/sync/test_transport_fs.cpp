// Filesystem transport: READY markers after atomic renames, so readers never see partial files; a
// worker replays one-step patches from the folder and confirms through it.
#include <catch2/catch.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "sync/io/atomic_file.h"
#include "sync/hash.h"
#include "sync/patch.h"
#include "sync/transport_fs.h"
#include "sync/version_store.h"
#include "sync/worker_replica.h"
#include "tests/sync/test_transport_util.h"

using namespace pulse::sync;
using pulse::test::ToyModel;

namespace {

/// Versions 0..last of a model, as the trainer's store encodes them (anchor 0 and one-step patches).
struct Published {
  std::vector<std::vector<uint8_t>> patches;  ///< [v] = patch v-1 -> v (v >= 1)
  std::vector<uint8_t> anchor0;
  std::vector<uint64_t> roots;
};

Published make_versions(uint64_t last, int scale) {
  ToyModel model(31, scale);
  VersionStore store("", RetentionPolicy{0, 1}, pulse::test::test_codec());
  Published p;
  p.patches.resize(last + 1);
  p.anchor0 = *store.publish(0, model.views());
  p.roots.push_back(model.root());
  for (uint64_t v = 1; v <= last; ++v) {
    model.step(0.05);
    p.patches[v] = *store.publish(v, model.views());
    p.roots.push_back(model.root());
  }
  return p;
}

}  // namespace

TEST_CASE("fs transport readers never see partial files", "[sync][fs]") {
  const std::string dir = pulse::test::make_temp_dir("fs_transport");
  const uint64_t last = 40;
  const Published pub = make_versions(last, 8);  // ~80k elements: anchor ~160 kB, patches ~10 kB
  FsPublisher publisher(dir);
  FsSubscriber subscriber(dir);
  CHECK_FALSE(subscriber.any_ready());
  CHECK_FALSE(subscriber.try_anchor(0).has_value());

  std::atomic<bool> done{false};
  std::atomic<int> mismatches{0}, seen{0};
  // The reader polls for the next item while the writer publishes: every returned body must be complete.
  std::thread reader([&] {
    for (uint64_t next = 0; next <= last;) {
      const bool finished = done.load();  // read first: once the writer is done, a miss is a real miss
      std::optional<std::vector<uint8_t>> got =
          next == 0 ? subscriber.try_anchor(0) : subscriber.try_patch(next - 1, next);
      if (!got) {
        if (finished) break;
        std::this_thread::yield();
        continue;
      }
      if (*got != (next == 0 ? pub.anchor0 : pub.patches[next])) ++mismatches;
      ++seen;
      ++next;
    }
  });
  publisher.publish_anchor(0, pub.anchor0);
  for (uint64_t v = 1; v <= last; ++v) publisher.publish(v - 1, v, pub.patches[v]);
  done = true;
  reader.join();
  CHECK(mismatches == 0);
  CHECK(seen == static_cast<int>(last + 1));
  CHECK(subscriber.latest_ready() == last);
  CHECK(subscriber.latest_ready_head().root_hash == pub.roots[last]);
  CHECK(subscriber.latest_anchor() == std::optional<uint64_t>(0));

  // No temp files are left behind.
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    CHECK(e.path().filename().string().find(".tmp") == std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("fs transport ignores data without a marker and data that disagrees with its marker",
          "[sync][fs]") {
  const std::string dir = pulse::test::make_temp_dir("fs_partial");
  const Published pub = make_versions(3, 1);
  FsPublisher publisher(dir);
  FsSubscriber subscriber(dir);
  publisher.publish_anchor(0, pub.anchor0);
  publisher.publish(0, 1, pub.patches[1]);

  // A crash between the data rename and the marker: data present, no marker -> not visible.
  const std::string p2 = dir + "/patch-00000000000000000001-00000000000000000002.pulse";
  write_file_atomic(p2, pub.patches[2].data(), pub.patches[2].size());
  CHECK_FALSE(subscriber.try_patch(1, 2).has_value());
  CHECK(subscriber.latest_ready() == 1);
  // A crash mid-write of the temp file: ignored as well.
  std::ofstream(p2 + ".tmp.123.0") << "garbage";
  CHECK(subscriber.latest_ready() == 1);

  // An object-store mount that shows the marker before the whole data: size/hash mismatch -> not visible.
  publisher.publish(1, 2, pub.patches[2]);
  REQUIRE(subscriber.try_patch(1, 2) == std::optional<std::vector<uint8_t>>(pub.patches[2]));
  {
    std::ofstream cut(p2, std::ios::binary | std::ios::trunc);
    cut.write(reinterpret_cast<const char*>(pub.patches[2].data()), pub.patches[2].size() / 2);
  }
  CHECK_FALSE(subscriber.try_patch(1, 2).has_value());

  // Not a patch at all: refused before anything is written.
  CHECK_THROWS_AS(publisher.publish(2, 3, std::vector<uint8_t>(100, 7)), PatchError);
  CHECK_FALSE(std::filesystem::exists(dir + "/patch-00000000000000000002-00000000000000000003.pulse"));

  publisher.remove_before(2);
  CHECK_FALSE(subscriber.try_anchor(0).has_value());
  CHECK_FALSE(subscriber.try_patch(0, 1).has_value());
  std::filesystem::remove_all(dir);
}

TEST_CASE("a worker replays one-step patches from a shared folder and confirms there", "[sync][fs]") {
  const std::string dir = pulse::test::make_temp_dir("fs_worker");
  ToyModel model(32);
  VersionStore store("", RetentionPolicy{5, 1}, pulse::test::test_codec());
  FsPublisher publisher(dir);
  auto publish = [&](uint64_t v) {
    if (v > 0) model.step();
    const Blob patch = store.publish(v, model.views());
    if (v == 0) {
      publisher.publish_anchor(0, *patch);
      return;
    }
    publisher.publish(v - 1, v, *patch);
    if (v % 5 == 0) publisher.publish_anchor(v, *store.anchor(v));
  };
  for (uint64_t v = 0; v <= 7; ++v) publish(v);

  FsPatchSource source(dir, 2.0);
  WorkerReplica worker("w-fs");
  auto st = worker.sync_to(source, source.head().version);
  CHECK(st.used_anchor);  // bootstrap from anchor 5
  CHECK(st.steps == 3);   // anchor 5, then 5->6, 6->7
  CHECK(worker.version() == 7);
  CHECK(worker.root_hash() == model.root());
  const auto confirmations = publisher.confirmations();
  REQUIRE(confirmations.count("w-fs") == 1);
  CHECK(confirmations.at("w-fs").version == 7);
  CHECK(confirmations.at("w-fs").root_hash == model.root());

  // Patches retired from the folder: the worker at 7 falls back to the newest anchor.
  for (uint64_t v = 8; v <= 12; ++v) publish(v);
  publisher.remove_before(10);
  st = worker.sync_to(source, 12);
  CHECK(st.used_anchor);
  CHECK(worker.version() == 12);
  CHECK(worker.root_hash() == model.root());
  CHECK_THROWS_AS(source.confirm("../evil", 1, 2), std::invalid_argument);
  std::filesystem::remove_all(dir);
}
