// VersionStore: composed patches equal sequential application, anchors, chain-safe retention, confirmations.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "sync/io/atomic_file.h"
#include "sync/hash.h"
#include "sync/patch.h"
#include "sync/transport_source.h"
#include "sync/version_store.h"
#include "sync/worker_replica.h"
#include "tests/sync/test_transport_util.h"

using namespace pulse::sync;
using pulse::test::ToyModel;

namespace {

/// Applies a blob to `state` (bootstrapping from an anchor when empty).
void apply_blob(OwnedTensors& state, const Blob& blob) {
  if (state.empty()) state = OwnedTensors::zeros_like(inspect_patch(blob->data(), blob->size()));
  auto mv = state.mutable_views();
  apply_patch(mv, blob->data(), blob->size(), 1);
}

/// Publishes versions first..last, stepping the model before each after the first; remembers every state.
void publish_range(VersionStore& store, ToyModel& model, uint64_t first, uint64_t last,
                   std::map<uint64_t, OwnedTensors>* states = nullptr) {
  for (uint64_t v = first; v <= last; ++v) {
    if (v != first || store.published()) model.step();
    store.publish(v, model.views());
    if (states) (*states)[v] = OwnedTensors::copy_of(model.views());
  }
}

}  // namespace

TEST_CASE("composed patch equals sequential application", "[sync][version_store]") {
  ToyModel model(1);
  VersionStore store("", RetentionPolicy{5, 3}, pulse::test::test_codec());  // keeps anchors 0, 5, 10
  std::map<uint64_t, OwnedTensors> states;
  publish_range(store, model, 0, 12, &states);
  REQUIRE(store.head().version == 12);
  REQUIRE(store.head().root_hash == model.root());

  // Sequential: anchor 0 + every one-step patch.
  OwnedTensors sequential;
  apply_blob(sequential, store.anchor(0));
  for (uint64_t v = 1; v <= 12; ++v) apply_blob(sequential, store.patch(v - 1, v));
  REQUIRE(root_hash(sequential.views()) == store.head().root_hash);

  // Composed: anchor 0 + one patch 0 -> 12, and the middle span 3 -> 7 applied onto version 3.
  OwnedTensors composed;
  apply_blob(composed, store.anchor(0));
  const Blob p0_12 = store.patch(0, 12);
  const PatchInfo info = inspect_patch(p0_12->data(), p0_12->size());
  CHECK(info.base_version == 0);
  CHECK(info.target_version == 12);
  CHECK_FALSE(info.anchor);
  apply_blob(composed, p0_12);
  CHECK(pulse::test::same_bytes(composed.views(), sequential.views()));

  OwnedTensors mid = states.at(3);
  apply_blob(mid, store.patch(3, 7));
  CHECK(pulse::test::same_bytes(mid.views(), states.at(7).views()));
  CHECK(root_hash(mid.views()) == store.root_hash_of(7));

  // A composed patch is cached: the same bytes come back without another encode.
  const auto before = store.stats();
  CHECK(store.patch(0, 12) == p0_12);
  CHECK(store.stats().composed_cache_hits == before.composed_cache_hits + 1);
  CHECK(store.stats().composed_built == before.composed_built);
}

TEST_CASE("anchors are written every anchor_every versions", "[sync][version_store]") {
  ToyModel model(2);
  VersionStore store("", RetentionPolicy{4, 10}, pulse::test::test_codec());
  publish_range(store, model, 3, 13);  // the first publish (3) is always an anchor
  CHECK(store.anchor_versions() == std::vector<uint64_t>{3, 4, 8, 12});
  CHECK(store.latest_anchor_version() == 12);
  const Blob a = store.anchor(8);
  const PatchInfo info = inspect_patch(a->data(), a->size());
  CHECK(info.anchor);
  CHECK(info.target_version == 8);
  CHECK(info.target_root_hash == store.root_hash_of(8));
  CHECK_THROWS_AS(store.anchor(9), std::out_of_range);
}

TEST_CASE("retention keeps what confirmed workers need and drops the rest", "[sync][version_store]") {
  ToyModel model(3);
  VersionStore store("", RetentionPolicy{5, 1}, pulse::test::test_codec());
  std::map<uint64_t, OwnedTensors> states;
  publish_range(store, model, 0, 2, &states);
  store.confirm("w-slow", 2, store.root_hash_of(2));
  publish_range(store, model, 3, 7, &states);
  store.confirm("w-fast", 7, store.root_hash_of(7));
  publish_range(store, model, 8, 31, &states);

  // w-slow's baseline (2) needs anchor 0 and every patch after it; the newest anchor is kept as well.
  auto anchors = store.anchor_versions();
  CHECK(anchors.front() == 0);
  CHECK(anchors.back() == 30);
  CHECK(store.reconstructible(2));
  OwnedTensors w = states.at(2);
  apply_blob(w, store.patch(2, 31));
  CHECK(root_hash(w.views()) == store.head().root_hash);
  // Intermediate anchors are redundant while the chain from anchor 0 is kept.
  CHECK(anchors == std::vector<uint64_t>{0, 30});

  // Once the slow worker confirms the head, everything before the newest anchor goes.
  store.confirm("w-slow", 31, store.root_hash_of(31));
  store.confirm("w-fast", 31, store.root_hash_of(31));
  model.step();
  store.publish(32, model.views());
  CHECK(store.anchor_versions() == std::vector<uint64_t>{30});
  CHECK_FALSE(store.reconstructible(2));
  CHECK_FALSE(store.reconstructible(29));
  CHECK(store.reconstructible(30));
  CHECK_THROWS_AS(store.patch(2, 32), std::out_of_range);
  CHECK(store.stats().patches_stored == 2);  // 30->31, 31->32
  OwnedTensors w31 = states.at(31);
  apply_blob(w31, store.patch(31, 32));
  CHECK(root_hash(w31.views()) == model.root());

  // A worker that is at 30 still catches up with a composed patch.
  OwnedTensors w30 = states.at(30);
  apply_blob(w30, store.patch(30, 32));
  CHECK(root_hash(w30.views()) == model.root());
}

TEST_CASE("retention without workers keeps keep_anchors anchors", "[sync][version_store]") {
  ToyModel model(4);
  VersionStore store("", RetentionPolicy{3, 2}, pulse::test::test_codec());
  publish_range(store, model, 0, 14);
  CHECK(store.anchor_versions() == std::vector<uint64_t>{9, 12});
  CHECK(store.reconstructible(10));
  CHECK_FALSE(store.reconstructible(8));
  // A worker that confirms a dropped version does not resurrect it: it must take an anchor.
  store.confirm("late", 5, store.root_hash_of(5));
  CHECK_THROWS_AS(store.patch(5, 14), std::out_of_range);
}

TEST_CASE("version store rejects bad versions, hashes and ranges", "[sync][version_store]") {
  ToyModel model(5);
  VersionStore store("", RetentionPolicy{}, pulse::test::test_codec());
  CHECK_FALSE(store.published());
  CHECK_THROWS_AS(store.latest_anchor_version(), std::out_of_range);
  CHECK_THROWS_AS(store.patch(0, 1), std::invalid_argument);
  publish_range(store, model, 0, 3);
  model.step();
  CHECK_THROWS_AS(store.publish(5, model.views()), std::invalid_argument);
  CHECK_THROWS_AS(store.publish(3, model.views()), std::invalid_argument);
  CHECK_THROWS_AS(store.patch(2, 2), std::invalid_argument);
  CHECK_THROWS_AS(store.patch(3, 1), std::invalid_argument);
  CHECK_THROWS_AS(store.patch(1, 4), std::invalid_argument);  // beyond head
  CHECK_THROWS_AS(store.confirm("w", 2, store.root_hash_of(2) ^ 1), HashMismatchError);
  CHECK_THROWS_AS(store.confirm("w", 9, 0), std::invalid_argument);
  CHECK(store.worker_versions().empty());
  store.confirm("w", 2, store.root_hash_of(2));
  CHECK(store.worker_versions().at("w") == 2);
  store.forget_worker("w");
  CHECK(store.worker_versions().empty());

  // A tensor set with a different layout cannot be published on top.
  ToyModel other(6, 2);
  CHECK_THROWS_AS(store.publish(4, other.views()), PatchError);
}

TEST_CASE("version store files are written atomically and retired with retention", "[sync][version_store]") {
  const std::string dir = pulse::test::make_temp_dir("version_store");
  ToyModel model(7);
  {
    VersionStore store(dir, RetentionPolicy{2, 1}, pulse::test::test_codec());
    publish_range(store, model, 0, 5);
    // Anchor 4 only (keep 1, no workers); patches 4->5 only.
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    REQUIRE(names.size() == 2);
    CHECK(names[0] == "anchor-00000000000000000004.pulse");
    CHECK(names[1] == "patch-00000000000000000004-00000000000000000005.pulse");
    const std::string bytes = read_file(dir + "/" + names[1]);
    const Blob p = store.patch(4, 5);
    CHECK(std::vector<uint8_t>(bytes.begin(), bytes.end()) == *p);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("retention never breaks a confirmed worker's chain (randomized schedule)",
          "[sync][version_store]") {
  ToyModel model(41);
  VersionStore store("", RetentionPolicy{3, 1}, pulse::test::test_codec());
  LocalPatchSource source(store);
  std::vector<WorkerReplica> workers;
  for (int i = 0; i < 4; ++i) workers.emplace_back("w" + std::to_string(i));
  std::vector<int> anchors_after_join(workers.size(), 0);
  std::mt19937 rng(7);
  store.publish(0, model.views());
  for (uint64_t v = 1; v <= 40; ++v) {
    model.step();
    store.publish(v, model.views());
    for (size_t i = 0; i < workers.size(); ++i) {
      if (rng() % (i + 2) != 0) continue;  // worker i syncs with probability 1/(i+2): some fall far behind
      const bool joined = !workers[i].empty();
      const auto st = workers[i].sync_to(source, v);
      if (joined && st.used_anchor) ++anchors_after_join[i];
      REQUIRE(workers[i].root_hash() == store.root_hash_of(v));
    }
    for (const auto& [id, wv] : store.worker_versions()) {
      INFO("worker " << id << " at " << wv << ", head " << v);
      REQUIRE(store.reconstructible(wv));
    }
  }
  for (size_t i = 0; i < workers.size(); ++i) {
    const bool joined = !workers[i].empty();
    if (joined && workers[i].sync_to(source, 40).used_anchor) ++anchors_after_join[i];
    CHECK(pulse::test::same_bytes(workers[i].views(), model.views()));
  }
  // A worker that has confirmed once always catches up by patches: its chain was never dropped.
  CHECK(anchors_after_join == std::vector<int>(workers.size(), 0));
  // While the slowest worker lags, retention still bounds what is kept to its chain.
  CHECK(store.stats().anchors_stored <= 2);
}

TEST_CASE("a version store deletes the files a killed store left in its folder and starts empty",
          "[sync][version_store]") {
  const std::string dir = pulse::test::make_temp_dir("version_store_stale");
  ToyModel model(8);
  {
    VersionStore store(dir, RetentionPolicy{5, 2}, pulse::test::test_codec());
    publish_range(store, model, 0, 7);
  }  // "killed" after publishing 7: anchors 0 and 5, patches 1..7 stay on disk
  // Debris of a crash: a temp file of write_file_atomic and a patch past a gap; and a file that is not ours.
  std::ofstream(dir + "/patch-00000000000000000007-00000000000000000008.pulse.tmp.99.0") << "partial";
  write_file_atomic(dir + "/patch-00000000000000000008-00000000000000000009.pulse", "orphan");
  std::ofstream(dir + "/notes.txt") << "kept";
  std::ofstream(dir + "/anchor-7.pulse") << "not a store name: kept";

  VersionStore store(dir, RetentionPolicy{5, 2}, pulse::test::test_codec());
  CHECK_FALSE(store.published());
  auto names = [&] {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(dir))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  };
  CHECK(names() == std::vector<std::string>{"anchor-7.pulse", "notes.txt"});

  // A resumed trainer publishes its checkpoint's weights as the first version: stored as an anchor.
  store.publish(3, model.views());
  CHECK(store.head().version == 3);
  CHECK(store.head().root_hash == model.root());
  CHECK(names() ==
        std::vector<std::string>{"anchor-00000000000000000003.pulse", "anchor-7.pulse", "notes.txt"});
  const std::string bytes = read_file(dir + "/anchor-00000000000000000003.pulse");
  CHECK(std::vector<uint8_t>(bytes.begin(), bytes.end()) == *store.anchor(3));
  std::filesystem::remove_all(dir);
}

TEST_CASE("publish_encoded: a patch encoded elsewhere gives the store publish()'s state",
          "[sync][version_store]") {
  ToyModel a(3), b(3);  // the same weights, stepped alike
  VersionStore direct("", RetentionPolicy{4, 2}, pulse::test::test_codec());
  VersionStore encoded("", RetentionPolicy{4, 2}, pulse::test::test_codec());
  direct.publish(0, a.views());
  encoded.publish(0, b.views());
  for (uint64_t v = 1; v <= 9; ++v) {
    const OwnedTensors base = OwnedTensors::copy_of(b.views());
    a.step();
    b.step();
    const Blob want = direct.publish(v, a.views());
    int encodes = 0, checks = 0;
    const Blob got = encoded.publish_encoded(
        v,
        [&](const PatchOptions& opt) {
          ++encodes;
          CHECK(opt.base_version == v - 1);
          CHECK(opt.target_version == v);
          REQUIRE(opt.known_base_root.has_value());
          CHECK(*opt.known_base_root == root_hash(base.views()));
          return encode_patch(base.views(), b.views(), opt);  // as a GPU encoder would: the same bytes
        },
        [&](const std::vector<TensorView>& head) {
          ++checks;
          CHECK(root_hash(head) == b.root());
        });
    CHECK(encodes == 1);
    CHECK(checks == 1);
    CHECK(*got == *want);
    CHECK(encoded.head().version == v);
    CHECK(encoded.head().root_hash == direct.head().root_hash);
    if (v % 4 == 0) CHECK(*encoded.anchor(v) == *direct.anchor(v));
  }
  CHECK(*encoded.patch(5, 9) == *direct.patch(5, 9));  // composed from the stored patches alike

  // Refusals leave the store as it was: a wrong version, a patch for other versions, a corrupt patch,
  // and the check's veto.
  const VersionHead head = encoded.head();
  const OwnedTensors base = OwnedTensors::copy_of(b.views());
  b.step();
  auto good = [&](const PatchOptions& opt) { return encode_patch(base.views(), b.views(), opt); };
  CHECK_THROWS_AS(encoded.publish_encoded(head.version + 2, good), std::invalid_argument);
  CHECK_THROWS_AS(encoded.publish_encoded(head.version + 1,
                                          [&](const PatchOptions& opt) {
                                            PatchOptions other = opt;
                                            other.target_version = opt.target_version + 1;
                                            return encode_patch(base.views(), b.views(), other);
                                          }),
                  std::invalid_argument);
  CHECK_THROWS_AS(encoded.publish_encoded(head.version + 1,
                                          [&](const PatchOptions& opt) {
                                            PatchOptions lie = opt;
                                            lie.known_base_root = 12345;  // not the head's weights
                                            return encode_patch(base.views(), b.views(), lie);
                                          }),
                  PatchError);
  CHECK_THROWS_WITH(encoded.publish_encoded(head.version + 1, good,
                                            [](const std::vector<TensorView>&) {
                                              throw std::runtime_error("non-finite weight");
                                            }),
                    "non-finite weight");
  CHECK(encoded.head().version == head.version);
  CHECK(encoded.head().root_hash == head.root_hash);
  VersionStore fresh("", RetentionPolicy{4, 2}, pulse::test::test_codec());
  CHECK_THROWS_AS(fresh.publish_encoded(0, good), std::logic_error);
}
