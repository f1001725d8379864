// Regression: a replica whose weights went bad (a flipped element in a tensor the next patch leaves
// alone) rejects that patch and falls back to the newest anchor (sync/worker_replica.h). When the anchor
// is at the replica's own version, applying it under the replica's trusted root was a no-op "without
// looking" (ApplyOptions::trusted_root), so the anchor never repaired the weights: the replica stayed
// corrupted and sync_to failed for good. The anchor fallback must check the weights themselves.
#include <catch2/catch.hpp>

#include "sync/hash.h"
#include "sync/patch.h"
#include "sync/transport_source.h"
#include "sync/version_store.h"
#include "sync/worker_replica.h"
#include "tests/sync/test_transport_util.h"

using namespace pulse::sync;
using pulse::test::ToyModel;

namespace {

/// The replica's tensor `name`, writable.
MutableTensorView tensor_of(WorkerReplica& worker, const std::string& name) {
  for (const auto& w : worker.weights())
    if (w.name == name) return w;
  FAIL("replica lacks " << name);
  return {};
}

}  // namespace

TEST_CASE("a corrupted replica at an anchor's version is repaired by the anchor fallback",
          "[sync][regress][worker]") {
  ToyModel model(21);
  VersionStore store("", RetentionPolicy{10, 2}, pulse::test::test_codec());
  store.publish(0, model.views());
  for (uint64_t v = 1; v <= 10; ++v) {
    model.step();
    store.publish(v, model.views());
  }
  REQUIRE(store.latest_anchor_version() == 10);
  LocalPatchSource source(store);
  WorkerReplica worker("w-bitflip");
  worker.sync_to(source, 10);
  REQUIRE(worker.version() == 10);
  REQUIRE(root_hash(worker.views()) == store.root_hash_of(10));

  // One element of model.norm.weight goes bad on the worker.
  MutableTensorView norm = tensor_of(worker, "model.norm.weight");
  norm.data[6] ^= 0x40;
  REQUIRE(root_hash(worker.views()) != store.root_hash_of(10));

  // Version 11 changes only the embedding, so the patch 10 -> 11 leaves model.norm.weight alone and the
  // replica rejects it (its unchanged tensor does not hash to the target): anchor 10 must repair it.
  model.data[0][3] ^= 0x0101;
  store.publish(11, model.views());

  WorkerReplica::SyncStats st;
  REQUIRE_NOTHROW(st = worker.sync_to(source, 11));
  CHECK(st.used_anchor);
  CHECK(worker.version() == 11);
  CHECK(root_hash(worker.views()) == model.root());
  CHECK(worker.root_hash() == model.root());
  CHECK(pulse::test::same_bytes(worker.views(), model.views()));
  CHECK(store.worker_versions().at("w-bitflip") == 11);
}
