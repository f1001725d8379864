// WorkerReplica::SyncStats::applied_patches: the replica hands over exactly the patch blobs it applied, in
// order (never an anchor, never a rejected blob), and applying them to a copy of the weights at the sync's
// base reproduces the replica's bytes (what a worker's GPU copy does, app/worker/device_weights.h).
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

/// Records every blob it serves; one-step patches only when `composed` is false; flips a byte in the next
/// `corrupt` patches.
class RecordingSource : public LocalPatchSource {
 public:
  RecordingSource(VersionStore& store, bool composed, int corrupt = 0)
      : LocalPatchSource(store), composed_(composed), corrupt_(corrupt) {}
  std::vector<uint8_t> patch(uint64_t from, uint64_t to) override {
    auto bytes = LocalPatchSource::patch(from, to);
    if (corrupt_ > 0) {
      --corrupt_;
      bytes[bytes.size() / 2] ^= 0x10;
      rejected.push_back(bytes);
    } else {
      patches.push_back(bytes);
    }
    return bytes;
  }
  std::vector<uint8_t> anchor(uint64_t version) override {
    auto bytes = LocalPatchSource::anchor(version);
    anchors.push_back(bytes);
    return bytes;
  }
  bool serves_composed() const override { return composed_; }
  std::vector<std::vector<uint8_t>> patches, rejected, anchors;

 private:
  bool composed_;
  int corrupt_;
};

}  // namespace

TEST_CASE("the replica hands over the patches it applied, in order, and none for an anchor",
          "[sync][worker]") {
  ToyModel model(31);
  VersionStore store("", RetentionPolicy{100, 2}, pulse::test::test_codec());
  publish_to(store, model, 0);
  WorkerReplica worker("w-handover");

  // Bootstrap: the anchor is applied, nothing is handed over.
  RecordingSource boot(store, true);
  auto st = worker.sync_to(boot, 0);
  CHECK(st.used_anchor);
  CHECK(st.steps == 1);
  CHECK(boot.anchors.size() == 1);
  CHECK(st.applied_patches.empty());

  // Three one-step patches 0 -> 1 -> 2 -> 3: handed over as served, in order; applied in that order to a
  // copy of the weights at version 0 they give the replica's bytes.
  OwnedTensors follower = OwnedTensors::copy_of(worker.views());
  publish_to(store, model, 3);
  RecordingSource steps(store, false);
  st = worker.sync_to(steps, 3);
  CHECK_FALSE(st.used_anchor);
  CHECK(st.steps == 3);
  REQUIRE(steps.patches.size() == 3);
  REQUIRE(st.applied_patches.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    INFO("patch " << i);
    CHECK(st.applied_patches[i] == steps.patches[i]);
    const PatchInfo info = inspect_patch(st.applied_patches[i].data(), st.applied_patches[i].size());
    CHECK_FALSE(info.anchor);
    CHECK(info.base_version == i);
    CHECK(info.target_version == i + 1);
    auto mv = follower.mutable_views();
    CHECK(apply_patch(mv, st.applied_patches[i].data(), st.applied_patches[i].size()));
  }
  CHECK(pulse::test::same_bytes(follower.views(), worker.views()));
  CHECK(root_hash(follower.views()) == worker.root_hash());

  // A corrupted patch is rejected and fetched again: only the good copy is handed over.
  publish_to(store, model, 5);
  RecordingSource corrupt(store, true, 1);
  st = worker.sync_to(corrupt, 5);
  CHECK(st.rejected == 1);
  REQUIRE(corrupt.rejected.size() == 1);
  REQUIRE(corrupt.patches.size() == 1);
  REQUIRE(st.applied_patches.size() == 1);
  CHECK(st.applied_patches[0] == corrupt.patches[0]);
  CHECK(st.applied_patches[0] != corrupt.rejected[0]);
  auto mv = follower.mutable_views();
  CHECK(apply_patch(mv, st.applied_patches[0].data(), st.applied_patches[0].size()));
  CHECK(pulse::test::same_bytes(follower.views(), worker.views()));

  // Already at the target: nothing applied, nothing handed over.
  RecordingSource idle(store, true);
  st = worker.sync_to(idle, 5);
  CHECK(st.steps == 0);
  CHECK(st.applied_patches.empty());
  CHECK(idle.patches.empty());
}

TEST_CASE("after an anchor only the patches applied since it are handed over", "[sync][worker]") {
  ToyModel model(32);
  VersionStore store("", RetentionPolicy{4, 2}, pulse::test::test_codec());
  publish_to(store, model, 10);
  WorkerReplica worker("w-late");
  // Joining at 10: the newest anchor is 8, then the composed patch 8 -> 10.
  RecordingSource source(store, true);
  const auto st = worker.sync_to(source, 10);
  CHECK(st.used_anchor);
  CHECK(st.steps == 2);
  REQUIRE(source.anchors.size() == 1);
  REQUIRE(st.applied_patches.size() == 1);
  CHECK(st.applied_patches[0] == source.patches.at(0));
  const PatchInfo info = inspect_patch(st.applied_patches[0].data(), st.applied_patches[0].size());
  CHECK(info.base_version == 8);
  CHECK(info.target_version == 10);
  for (const auto& blob : st.applied_patches) CHECK(blob != source.anchors[0]);
}
