// WorkerReplica catch-up over an in-process source: late join, missed versions, retired base, corrupted
// patches (rejected with weights untouched, fetched again).
#include <catch2/catch.hpp>

#include "sync/hash.h"
#include "sync/patch.h"
#include "sync/transport_source.h"
#include "sync/version_store.h"
#include "sync/worker_replica.h"
#include "tests/sync/test_transport_util.h"

using namespace pulse::sync;
using pulse::test::publish_to;
using pulse::test::ToyModel;

namespace {

/// Flips one byte in the next `corrupt_patches` patches (and every anchor when `corrupt_anchors`).
class CorruptingSource : public LocalPatchSource {
 public:
  CorruptingSource(VersionStore& store, int corrupt_patches, bool corrupt_anchors = false)
      : LocalPatchSource(store), left_(corrupt_patches), anchors_(corrupt_anchors) {}
  std::vector<uint8_t> patch(uint64_t from, uint64_t to) override {
    auto bytes = LocalPatchSource::patch(from, to);
    ++patch_calls;
    if (left_ != 0) {
      if (left_ > 0) --left_;
      bytes[bytes.size() / 2] ^= 0x10;
    }
    return bytes;
  }
  std::vector<uint8_t> anchor(uint64_t version) override {
    auto bytes = LocalPatchSource::anchor(version);
    ++anchor_calls;
    if (anchors_) bytes[bytes.size() / 2] ^= 0x10;
    return bytes;
  }
  int patch_calls = 0, anchor_calls = 0;

 private:
  int left_;  ///< < 0 = corrupt forever
  bool anchors_;
};

}  // namespace

TEST_CASE("a worker joining at version 10 catches up through an anchor and a composed patch",
          "[sync][worker]") {
  ToyModel model(11);
  VersionStore store("", RetentionPolicy{4, 2}, pulse::test::test_codec());
  publish_to(store, model, 10);
  LocalPatchSource source(store);
  WorkerReplica worker("w-late");
  REQUIRE(worker.empty());

  auto st = worker.sync_to(source, 10);
  CHECK(st.used_anchor);  // newest anchor is 8, then the composed patch 8 -> 10
  CHECK(st.steps == 2);
  CHECK(worker.version() == 10);
  CHECK(worker.root_hash() == store.head().root_hash);
  CHECK(root_hash(worker.views()) == model.root());
  CHECK(pulse::test::same_bytes(worker.views(), model.views()));
  CHECK(store.worker_versions().at("w-late") == 10);

  // It then misses three versions and catches up with one composed patch, no anchor.
  publish_to(store, model, 13);
  st = worker.sync_to(source, 13);
  CHECK_FALSE(st.used_anchor);
  CHECK(st.steps == 1);
  CHECK(st.from == 10);
  CHECK(st.to == 13);
  CHECK(worker.root_hash() == model.root());
  CHECK(store.worker_versions().at("w-late") == 13);

  // Already there: nothing fetched.
  st = worker.sync_to(source, 13);
  CHECK(st.steps == 0);
  CHECK(st.bytes == 0);
}

TEST_CASE("a worker whose base was retired falls back to the newest anchor", "[sync][worker]") {
  ToyModel model(12);
  VersionStore store("", RetentionPolicy{3, 1}, pulse::test::test_codec());
  publish_to(store, model, 2);
  LocalPatchSource source(store);
  WorkerReplica worker("w-gone");
  worker.sync_to(source, 2);
  REQUIRE(worker.version() == 2);
  store.forget_worker("w-gone");  // e.g. declared dead by the trainer; retention may now drop its base
  publish_to(store, model, 11);
  REQUIRE_FALSE(store.reconstructible(2));

  const auto st = worker.sync_to(source, 11);
  CHECK(st.used_anchor);
  CHECK(worker.version() == 11);
  CHECK(worker.root_hash() == model.root());
}

TEST_CASE("a corrupted patch is rejected, the weights stay intact, and it is fetched again",
          "[sync][worker]") {
  ToyModel model(13);
  VersionStore store("", RetentionPolicy{10, 2}, pulse::test::test_codec());
  publish_to(store, model, 3);
  WorkerReplica worker("w-corrupt");
  {
    LocalPatchSource clean(store);
    worker.sync_to(clean, 3);
  }
  publish_to(store, model, 5);

  CorruptingSource once(store, 1);
  const auto st = worker.sync_to(once, 5);
  CHECK(st.rejected == 1);
  CHECK(once.patch_calls == 2);
  CHECK_FALSE(st.used_anchor);
  CHECK(worker.root_hash() == model.root());
  CHECK(store.worker_versions().at("w-corrupt") == 5);

  // A source that corrupts every patch and anchor: sync fails, the replica stays bit-exact at version 5.
  publish_to(store, model, 7);
  CorruptingSource always(store, -1, true);
  CHECK_THROWS_AS(worker.sync_to(always, 7), PatchError);
  CHECK(worker.version() == 5);
  CHECK(root_hash(worker.views()) == store.root_hash_of(5));
  CHECK(store.worker_versions().at("w-corrupt") == 5);  // never confirmed 7
}
