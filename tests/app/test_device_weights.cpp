// A worker's model parameters at its replica's weights (app/worker/device_weights.h). On the CPU: the path
// choice, a CPU model always fully copied and equal to the replica, the device path's whole worker
// sequence with the host apply_patch as the patcher on a CPU BF16 model, the path on the wire and in the
// metrics rows of a tiny BF16 run. On a GPU (skipped with a message without CUDA): the same sequence with
// sync::apply_patch_cuda on CUDA parameters, byte-equal to the host replica after every sync, the FP32
// fallback, and the tiny BF16 run on cuda patching its worker on the device.
#include <torch/cuda.h>
#include <torch/torch.h>
#include "tests/torch_catch.h"

#include <cstring>
#include <map>
#include <random>

#include "app/device.h"
#include "app/job.h"
#include "app/run/run_files.h"
#include "app/wire/messages.h"
#include "app/worker/device_weights.h"
#include "model/transformer.h"
#include "sync/gpu_encode.h"
#include "sync/hash.h"
#include "sync/transport_source.h"
#include "sync/version_store.h"
#include "sync/worker_replica.h"
#include "tests/app/run_test_util.h"
#include "tests/rl/toy_grpo_task.h"
#include "tests/sync/test_transport_util.h"

using namespace pulse;
using app::WeightLoad;

namespace {

/// The trainer's side: BF16 bit patterns named and shaped like a model's parameters, changed sparsely.
struct TrainerWeights {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<uint16_t>> data;
  std::mt19937_64 rng{7};

  explicit TrainerWeights(model::TransformerImpl& m) {
    for (const auto& item : m.named_parameters(true)) {
      at::Tensor t = item.value().detach().to(torch::kCPU, torch::kBFloat16).contiguous();
      names.push_back(item.key());
      shapes.push_back(t.sizes().vec());
      std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
      std::memcpy(bits.data(), t.data_ptr(), 2 * bits.size());
      data.push_back(std::move(bits));
    }
  }
  /// About 2% of every tensor's elements get a new finite BF16 value (at least one each).
  void step() {
    for (auto& t : data) {
      const size_t changes = std::max<size_t>(1, t.size() / 50);
      for (size_t k = 0; k < changes; ++k) {
        const size_t i = static_cast<size_t>(rng() % t.size());
        uint16_t v = t[i];
        while (v == t[i])
          v = static_cast<uint16_t>(((rng() & 1) << 15) | ((118 + rng() % 10) << 7) | (rng() & 0x7f));
        t[i] = v;
      }
    }
  }
  std::vector<sync::TensorView> views() const {
    std::vector<sync::TensorView> out;
    for (size_t i = 0; i < names.size(); ++i)
      out.push_back(sync::TensorView{names[i], sync::DType::BF16, shapes[i],
                                     reinterpret_cast<const uint8_t*>(data[i].data()), 2 * data[i].size()});
    return out;
  }
};

/// The model's parameters as BF16 bytes on the host, by name.
std::map<std::string, std::vector<uint8_t>> param_bytes(model::TransformerImpl& m) {
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& item : m.named_parameters(true)) {
    at::Tensor t = item.value().detach().to(torch::kCPU, torch::kBFloat16).contiguous();
    const auto* p = static_cast<const uint8_t*>(t.data_ptr());
    out[item.key()] = std::vector<uint8_t>(p, p + 2 * t.numel());
  }
  return out;
}

/// Every replica tensor equals the model parameter of that name, byte for byte (and no name is missing).
bool same_as_replica(model::TransformerImpl& m, const sync::WorkerReplica& replica) {
  const auto params = param_bytes(m);
  const auto views = replica.views();
  if (params.size() != views.size()) return false;
  for (const auto& v : views) {
    const auto it = params.find(v.name);
    if (it == params.end() || it->second.size() != v.nbytes ||
        std::memcmp(it->second.data(), v.data, v.nbytes) != 0)
      return false;
  }
  return true;
}

/// Patches one version at a time (so a sync 2 -> 4 hands over two blobs).
class OneStepSource : public sync::LocalPatchSource {
 public:
  using LocalPatchSource::LocalPatchSource;
  bool serves_composed() const override { return false; }
};

/// The tiny run of run_test_util.h in BF16 with one worker and 3 GRPO steps, no Pass@1.
app::JobOptions tiny_bf16_run(const std::string& dir, const std::string& device) {
  app::JobOptions o;
  o.config_path = test_run::write_tiny_config(dir);
  // The config's 100 SFT steps: after them GRPO changes ~50k BF16 elements in a step whose groups do not
  // all score alike (10 SFT steps leave every step at 0).
  o.overrides = {"run.dir=" + dir + "/run", "rl.steps=3",          "eval.before=false",
                 "eval.after=false",        "run.workers=1",       "run.checkpoint_every=0",
                 "model.dtype=bfloat16",    "run.device=" + device};
  o.quiet = true;
  return o;
}

sync::WorkerReplica::SyncStats stats_from(uint64_t from, bool anchor, size_t patches) {
  sync::WorkerReplica::SyncStats st;
  st.from = from;
  st.used_anchor = anchor;
  st.steps = static_cast<int>(patches + (anchor ? 1 : 0));
  st.applied_patches.assign(patches, std::vector<uint8_t>{1, 2, 3});
  return st;
}

/// sync::apply_patch on parameters in host memory: the ParamPatcher that runs ModelWeightLoader's device
/// path on a CPU model (same contract as sync::apply_patch_cuda).
void host_patcher(std::vector<sync::DeviceMutableTensor>& params, const std::vector<uint8_t>& blob,
                  const sync::ApplyOptions& options) {
  std::vector<sync::MutableTensorView> views;
  for (auto& p : params)
    views.push_back(sync::MutableTensorView{p.name, p.dtype, p.shape, reinterpret_cast<uint8_t*>(p.data),
                                            2 * static_cast<size_t>(sync::numel(p.shape))});
  sync::apply_patch(views, blob.data(), blob.size(), options);
}

/// A real worker sequence on `m` through `loader` (which must be able to patch): the bootstrap anchor
/// (a full copy), six syncs of one, two or composed patches (all patched, byte-equal to the replica
/// every time), a parameter gone bad behind the loader's back (the patch fails its target hash, is
/// rolled back, a full copy repairs it), a retired base (an anchor: a full copy), then patches again.
/// Returns the replica.
sync::WorkerReplica run_worker_sequence(model::TransformerImpl& m, app::ModelWeightLoader& loader,
                                        const std::string& worker) {
  torch::manual_seed(5);
  model::Transformer trainer_model(test::toy_config(), torch::kFloat32);
  TrainerWeights tw(*trainer_model);
  sync::VersionStore store("", sync::RetentionPolicy{4, 2}, test::test_codec());
  store.publish(0, tw.views());
  OneStepSource one_step(store);
  sync::LocalPatchSource composed(store);
  sync::WorkerReplica replica(worker);

  auto st = replica.sync_to(composed, 0);
  auto r = loader.load(replica, st);
  CHECK(r.load == WeightLoad::FullCopy);
  CHECK(r.reason == "the device weights are not known to be at a version yet");
  CHECK(same_as_replica(m, replica));

  uint64_t v = 0;
  for (int sync_no = 0; sync_no < 6; ++sync_no) {
    const int versions = 1 + sync_no % 2;
    for (int k = 0; k < versions; ++k) {
      tw.step();
      store.publish(++v, tw.views());
    }
    st = replica.sync_to(sync_no < 3 ? static_cast<sync::PatchSource&>(one_step) : composed, v);
    INFO("sync " << sync_no << " to version " << v);
    REQUIRE_FALSE(st.used_anchor);
    CHECK(st.applied_patches.size() == (sync_no < 3 ? static_cast<size_t>(versions) : 1));
    uint64_t handed = 0;
    for (const auto& b : st.applied_patches) handed += b.size();
    r = loader.load(replica, st);
    CHECK(r.load == WeightLoad::DevicePatch);
    CHECK(r.failure.empty());
    CHECK(r.patch_bytes == handed);
    CHECK(loader.state().version == v);
    CHECK(loader.state().root == replica.root_hash());
    CHECK(replica.root_hash() == store.head().root_hash);
    CHECK(same_as_replica(m, replica));
  }

  // Every element of a parameter goes bad behind the loader's back: the next patch (which changes every
  // tensor) fails its target hash, is rolled back, and the full copy repairs the parameters.
  {
    torch::NoGradGuard no_grad;
    m.named_parameters(true)["model.norm.weight"].add_(1.0);
  }
  REQUIRE_FALSE(same_as_replica(m, replica));
  tw.step();
  store.publish(++v, tw.views());
  st = replica.sync_to(composed, v);
  r = loader.load(replica, st);
  CHECK(r.load == WeightLoad::FullCopy);
  INFO(r.failure);
  CHECK(r.failure.find("device patch apply failed") == 0);
  CHECK(r.failure.find("model.norm.weight") != std::string::npos);
  CHECK(r.reason == r.failure);
  CHECK(same_as_replica(m, replica));
  CHECK(loader.state().version == v);

  // Its base retired: the replica takes an anchor, the parameters get a full copy, then patches again.
  store.forget_worker(worker);
  for (int k = 0; k < 9; ++k) {
    tw.step();
    store.publish(++v, tw.views());
  }
  st = replica.sync_to(composed, v);
  REQUIRE(st.used_anchor);
  r = loader.load(replica, st);
  CHECK(r.load == WeightLoad::FullCopy);
  CHECK(r.reason == "the sync applied an anchor");
  CHECK(same_as_replica(m, replica));
  tw.step();
  store.publish(++v, tw.views());
  st = replica.sync_to(composed, v);
  r = loader.load(replica, st);
  CHECK(r.load == WeightLoad::DevicePatch);
  CHECK(same_as_replica(m, replica));
  return replica;
}

}  // namespace

TEST_CASE("the weight load path: device patches only from a known base without an anchor", "[app][device]") {
  const app::DeviceWeightState at3{true, 3, 0xabc};
  // Already there: nothing to do, whatever the parameters are.
  auto c =
      app::choose_weight_load("the model's parameters are on cpu", at3, stats_from(3, false, 0), 3, 0xabc);
  CHECK(c.load == WeightLoad::None);
  CHECK(c.reason.empty());
  // Usable parameters, known at the sync's base, patches handed over: on the device.
  c = app::choose_weight_load("", at3, stats_from(3, false, 2), 5, 0xdef);
  CHECK(c.load == WeightLoad::DevicePatch);
  CHECK(c.reason.empty());
  // A CPU model: a full copy, naming why.
  c = app::choose_weight_load("the model's parameters are on cpu", at3, stats_from(3, false, 2), 5, 0xdef);
  CHECK(c.load == WeightLoad::FullCopy);
  CHECK(c.reason == "the model's parameters are on cpu");
  // Unknown state (first sync, or a failed load).
  c = app::choose_weight_load("", app::DeviceWeightState{}, stats_from(0, true, 0), 0, 0x1);
  CHECK(c.load == WeightLoad::FullCopy);
  CHECK(c.reason == "the device weights are not known to be at a version yet");
  // An anchor in the sync.
  c = app::choose_weight_load("", at3, stats_from(3, true, 1), 10, 0x2);
  CHECK(c.load == WeightLoad::FullCopy);
  CHECK(c.reason == "the sync applied an anchor");
  // The device is not at the sync's base.
  c = app::choose_weight_load("", at3, stats_from(4, false, 1), 5, 0x2);
  CHECK(c.load == WeightLoad::FullCopy);
  CHECK(c.reason == "the device weights are at version 3, the sync started at 4");
  // Same version but another root: not "already there".
  c = app::choose_weight_load("", app::DeviceWeightState{true, 3, 0x999}, stats_from(3, false, 0), 3, 0xabc);
  CHECK(c.load == WeightLoad::FullCopy);
  CHECK(c.reason == "the sync handed over no patches");
  CHECK(std::string(app::weight_load_name(WeightLoad::DevicePatch)) == "device_patch");
  CHECK(std::string(app::weight_load_name(WeightLoad::FullCopy)) == "full_copy");
  CHECK(std::string(app::weight_load_name(WeightLoad::None)) == "none");
}

TEST_CASE("a CPU model is fully copied at every sync and equals the replica", "[app][device]") {
  for (const auto dtype : {torch::kBFloat16, torch::kFloat32}) {
    INFO("dtype " << c10::toString(dtype));
    torch::manual_seed(3);
    model::Transformer trainer_model(test::toy_config(), torch::kFloat32);
    TrainerWeights tw(*trainer_model);
    sync::VersionStore store("", sync::RetentionPolicy{100, 2}, test::test_codec());
    store.publish(0, tw.views());
    sync::LocalPatchSource source(store);
    sync::WorkerReplica replica("w-cpu");
    model::Transformer m(test::toy_config(), dtype);
    app::ModelWeightLoader loader(*m);
    CHECK(loader.unusable_reason() == "the model's parameters are on cpu");
    CHECK_FALSE(loader.state().known);

    auto st = replica.sync_to(source, 0);
    auto r = loader.load(replica, st);
    CHECK(r.load == WeightLoad::FullCopy);
    CHECK(r.reason == "the model's parameters are on cpu");
    CHECK(r.failure.empty());
    CHECK(loader.state().known);
    CHECK(loader.state().version == 0);
    CHECK(loader.state().root == replica.root_hash());
    CHECK(same_as_replica(*m, replica));

    for (uint64_t v = 1; v <= 2; ++v) {
      tw.step();
      store.publish(v, tw.views());
    }
    st = replica.sync_to(source, 2);
    REQUIRE(st.applied_patches.size() == 1);
    r = loader.load(replica, st);
    CHECK(r.load == WeightLoad::FullCopy);
    CHECK(r.patch_bytes == 0);
    CHECK(loader.state().version == 2);
    CHECK(same_as_replica(*m, replica));

    st = replica.sync_to(source, 2);  // nothing new
    r = loader.load(replica, st);
    CHECK(r.load == WeightLoad::None);
    CHECK(same_as_replica(*m, replica));
  }
}

TEST_CASE("the device path with the host apply_patch on a CPU BF16 model equals the replica after every sync",
          "[app][device]") {
  model::Transformer m(test::toy_config(), torch::kBFloat16);
  app::ModelWeightLoader loader(*m, host_patcher);
  REQUIRE(loader.unusable_reason().empty());
  run_worker_sequence(*m, loader, "w-host");
}

TEST_CASE("GPU: a worker's patches applied to its CUDA parameters equal the host replica after every sync",
          "[app][device][gpu]") {
  std::string why;
  if (!torch::cuda::is_available() || !sync::cuda_encode_available(&why)) {
    WARN("skipped: no CUDA device, a LibTorch without CUDA or a build without PULSE_CUDA ("
         << (torch::cuda::is_available() ? why : "torch::cuda::is_available() is false") << ")");
    return;
  }
  const torch::Device cuda(torch::kCUDA, 0);
  model::Transformer m(test::toy_config(), torch::kBFloat16);
  m->to(cuda);
  app::ModelWeightLoader loader(*m);  // sync::apply_patch_cuda
  INFO(loader.unusable_reason());
  REQUIRE(loader.unusable_reason().empty());
  const sync::WorkerReplica replica = run_worker_sequence(*m, loader, "w-gpu");

  // An FP32 model on the GPU: full copies, naming the dtype.
  model::Transformer fp32(test::toy_config(), torch::kFloat32);
  fp32->to(cuda);
  app::ModelWeightLoader fp32_loader(*fp32);
  CHECK(fp32_loader.unusable_reason().find("not BFloat16") != std::string::npos);
  const auto r = fp32_loader.load(replica, sync::WorkerReplica::SyncStats{});
  CHECK(r.load == WeightLoad::FullCopy);
  CHECK(same_as_replica(*fp32, replica));
}

TEST_CASE("the load path travels in the worker report, a report without it reads as none", "[app][device]") {
  app::SyncReport s;
  s.to = 4;
  s.load = "device_patch";
  const auto back = app::parse_message<app::SyncReport>(nlohmann::json(s), "sync report");
  CHECK(back.load == "device_patch");
  CHECK(back.load_reason.empty());
  s.load = "full_copy";
  s.load_reason = "the sync applied an anchor";
  const auto copy = app::parse_message<app::SyncReport>(nlohmann::json(s), "sync report");
  CHECK(copy.load == "full_copy");
  CHECK(copy.load_reason == "the sync applied an anchor");
  nlohmann::json old = nlohmann::json(s);
  old.erase("load");
  old.erase("load_reason");
  const auto legacy = app::parse_message<app::SyncReport>(old, "sync report");
  CHECK(legacy.load == "none");
  CHECK(legacy.to == 4);
}

TEST_CASE("a tiny BF16 run on the CPU: every worker sync is a full copy, counted in every metrics row",
          "[app][e2e][device]") {
  test_run::ScopedTempDir dir("device-weights-cpu");
  REQUIRE(app::run_job(tiny_bf16_run(dir, "cpu")) == 0);
  const auto rows = app::MetricsLog::read(dir.path + "/run/metrics.jsonl");
  REQUIRE(rows.size() == 3);
  int64_t changed = 0;
  for (const auto& row : rows) {
    INFO(row.dump());
    CHECK(row["bit_identical"] == true);
    CHECK(row["full_copy_loads"] == 1);
    CHECK(row["device_patch_loads"] == 0);
    changed += row["changed"].get<int64_t>();
  }
  // The copies carried updates (a step whose groups all score alike changes nothing: not every step must).
  CHECK(changed > 0);
}

TEST_CASE("GPU: a tiny BF16 run on cuda patches its worker's model on the device, bit-identical",
          "[app][e2e][device][gpu]") {
  std::string why;
  if (!torch::cuda::is_available() || !sync::cuda_encode_available(&why)) {
    WARN("skipped: no CUDA device, a LibTorch without CUDA or a build without PULSE_CUDA ("
         << (torch::cuda::is_available() ? why : app::cuda_unavailable_reason()) << ")");
    return;
  }
  test_run::ScopedTempDir dir("device-weights-cuda");
  REQUIRE(app::run_job(tiny_bf16_run(dir, "cuda")) == 0);
  const auto rows = app::MetricsLog::read(dir.path + "/run/metrics.jsonl");
  REQUIRE(rows.size() == 3);
  int64_t changed = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    INFO("step " << i << ": " << rows[i].dump());
    CHECK(rows[i]["bit_identical"] == true);
    changed += rows[i]["changed"].get<int64_t>();
    // One sync per step; the bootstrap (an anchor: a full copy) may land in the first row.
    CHECK(rows[i]["device_patch_loads"].get<int64_t>() + rows[i]["full_copy_loads"].get<int64_t>() == 1);
    if (i > 0) CHECK(rows[i]["device_patch_loads"] == 1);
  }
  CHECK(changed > 0);
  CHECK(app::read_json(dir.path + "/run/summary.json")["bit_identical_every_step"] == true);
}
