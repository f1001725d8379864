// app/run/checkpoints.h: a checkpoint folder appears whole. A killed save leaves only a staging folder, which
// is never taken for a checkpoint and is swept by the next save; saving a step again replaces its folder
// as a whole (no files of the earlier save stay behind); pruning keeps the newest two.
#include "tests/torch_catch.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "app/run/checkpoint_manifest.h"
#include "app/run/checkpoints.h"
#include "model/transformer.h"
#include "rl/optimizer.h"
#include "sync/io/atomic_file.h"
#include "sync/io/safetensors.h"
#include "tests/app/run_test_util.h"
#include "tests/rl/rl_test_util.h"

namespace fs = std::filesystem;
using namespace pulse;
using pulse::test_run::ScopedTempDir;

namespace {
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}
}  // namespace

TEST_CASE("checkpoint folders appear whole and a killed save's staging folder is swept",
          "[checkpoint][resume]") {
  ScopedTempDir run("pulse-ckpt");
  torch::manual_seed(5);
  model::Transformer policy(test::tiny_llama(50), torch::kFloat32);
  rl::MasterAdam opt(*policy, rl::OptimizerConfig{});
  const std::string root = run.path + "/checkpoints";

  // A save of step 3 that was killed midway: a staging folder with a part of a checkpoint.
  fs::create_directories(root + "/step-000003.partial-4242/model");
  sync::write_file_atomic(root + "/step-000003.partial-4242/model/half.bin", std::string("xx"));
  fs::create_directories(root + "/step-000002.aside-77");
  app::CheckpointExtras x;
  x.data_cursor = 17;
  x.write_files = [](const std::string& dir) {
    sync::write_file_atomic(dir + "/outer.txt", std::string("1"));
  };
  app::save_checkpoint(run.path, 3, *policy, opt, x);
  CHECK((names_in(root) == std::vector<std::string>{"LATEST", "step-000003"}));
  CHECK(app::latest_checkpoint(run.path) == 3);
  CHECK(fs::exists(root + "/step-000003/state"));
  CHECK(fs::exists(root + "/step-000003/model"));
  CHECK(fs::exists(root + "/step-000003/outer.txt"));

  // The same step saved again without that file: the folder is replaced, not overwritten file by file.
  x.write_files = nullptr;
  x.data_cursor = 23;
  app::save_checkpoint(run.path, 3, *policy, opt, x);
  CHECK_FALSE(fs::exists(root + "/step-000003/outer.txt"));
  int64_t step = -1;
  CHECK(app::load_checkpoint(run.path, 3, opt, *policy, &step).data_cursor == 23);
  CHECK(step == 3);
  CHECK((names_in(root) == std::vector<std::string>{"LATEST", "step-000003"}));

  // Pruning keeps the newest two checkpoints and never counts a staging folder as one.
  fs::create_directories(root + "/step-000009.partial-1");
  app::save_checkpoint(run.path, 4, *policy, opt, x);
  app::save_checkpoint(run.path, 5, *policy, opt, x);
  CHECK((names_in(root) == std::vector<std::string>{"LATEST", "step-000004", "step-000005"}));
  CHECK(app::latest_checkpoint(run.path) == 5);

  // A re-save of step 5 killed between its two renames (no RENAME_EXCHANGE): the checkpoint LATEST names
  // is at step-000005.aside-PID; finding the latest puts it back, whole.
  fs::rename(root + "/step-000005", root + "/step-000005.aside-31");
  CHECK(app::latest_checkpoint(run.path) == 5);
  CHECK(fs::exists(root + "/step-000005/state"));
  CHECK((names_in(root) == std::vector<std::string>{"LATEST", "step-000004", "step-000005"}));
}

TEST_CASE("resuming rewrites a checkpoint's damaged HF model from the restored masters",
          "[checkpoint][resume]") {
  ScopedTempDir run("pulse-ckpt-model");
  torch::manual_seed(6);
  model::Transformer policy(test::tiny_llama(50), torch::kFloat32);
  rl::MasterAdam opt(*policy, rl::OptimizerConfig{});
  app::save_checkpoint(run.path, 2, *policy, opt, app::CheckpointExtras{});
  const std::string file = app::checkpoint_dir(run.path, 2) + "/model/model.safetensors";
  const std::string intact = sync::read_file(file);
  REQUIRE(intact.size() > 1000);
  sync::write_file_atomic(file, intact.substr(0, 1000));  // cut short (a full disk, a partial copy)
  CHECK_THROWS(sync::Checkpoint::open(app::checkpoint_dir(run.path, 2) + "/model"));
  // Another model's weights in `policy` first: the load restores the checkpoint's masters into it.
  torch::manual_seed(7);
  model::Transformer other(test::tiny_llama(50), torch::kFloat32);
  rl::MasterAdam other_opt(*other, rl::OptimizerConfig{});
  int64_t step = -1;
  app::load_checkpoint(run.path, 2, other_opt, *other, &step);
  CHECK(step == 2);
  CHECK(sync::read_file(file) == intact);
  // An intact model is left alone (same bytes, not rewritten).
  const auto before = fs::last_write_time(file);
  app::load_checkpoint(run.path, 2, other_opt, *other, &step);
  CHECK(fs::last_write_time(file) == before);
  // An index added to the model folder (the reader would prefer it): removed, the model rewritten.
  const std::string index = app::checkpoint_dir(run.path, 2) + "/model/model.safetensors.index.json";
  sync::write_file_atomic(index, R"({"weight_map": {"x": "other.safetensors"}})");
  CHECK_THROWS(sync::Checkpoint::open(app::checkpoint_dir(run.path, 2) + "/model"));
  app::load_checkpoint(run.path, 2, other_opt, *other, &step);
  CHECK_FALSE(fs::exists(index));
  CHECK(sync::read_file(file) == intact);
  CHECK(app::check_checkpoint_manifest(app::checkpoint_dir(run.path, 2)).empty());
}

namespace {
/// Flips one bit of the file at `path`, `from_end` bytes before its end (in the tensor data, past the
/// safetensors header: the file still opens).
void flip_bit(const std::string& path, size_t from_end) {
  std::string bytes = sync::read_file(path);
  REQUIRE(bytes.size() > from_end);
  bytes[bytes.size() - 1 - from_end] ^= 0x10;
  sync::write_file_atomic(path, bytes);
}
}  // namespace

TEST_CASE("resuming checks every checkpoint file against its manifest", "[checkpoint][resume]") {
  ScopedTempDir run("pulse-ckpt-manifest");
  torch::manual_seed(8);
  model::Transformer policy(test::tiny_llama(50), torch::kFloat32);
  rl::MasterAdam opt(*policy, rl::OptimizerConfig{});
  app::CheckpointExtras x;
  x.write_files = [](const std::string& dir) {
    sync::write_file_atomic(dir + "/outer.txt", std::string("outer state"));
  };
  app::save_checkpoint(run.path, 1, *policy, opt, x);
  app::save_checkpoint(run.path, 2, *policy, opt, x);
  const std::string dir = app::checkpoint_dir(run.path, 2);
  bool has = false;
  CHECK(app::check_checkpoint_manifest(dir, &has).empty());
  CHECK(has);
  const std::string manifest = sync::read_file(dir + "/MANIFEST.json");
  CHECK(manifest.find("\"state/optimizer.safetensors\"") != std::string::npos);
  CHECK(manifest.find("\"model/model.safetensors\"") != std::string::npos);
  CHECK(manifest.find("\"outer.txt\"") != std::string::npos);

  torch::manual_seed(9);
  model::Transformer other(test::tiny_llama(50), torch::kFloat32);
  rl::MasterAdam other_opt(*other, rl::OptimizerConfig{});
  int64_t step = -1;

  SECTION("a flipped bit in the optimizer state stops the resume, naming the file and the older step") {
    const std::string file = dir + "/state/optimizer.safetensors";
    flip_bit(file, 5);
    CHECK(sync::Checkpoint::open(file).tensors().size() > 0);  // still a well-formed safetensors file
    const auto mismatches = app::check_checkpoint_manifest(dir);
    REQUIRE(mismatches.size() == 1);
    CHECK(mismatches[0].file == "state/optimizer.safetensors");
    try {
      app::load_checkpoint(run.path, 2, other_opt, *other, &step);
      FAIL("a damaged optimizer state was loaded");
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      CHECK(what.find(file) != std::string::npos);
      CHECK(what.find("MANIFEST.json") != std::string::npos);
      CHECK(what.find(app::checkpoint_dir(run.path, 1)) != std::string::npos);
    }
    CHECK(step == -1);
    // Nothing was loaded: `other` keeps its own masters.
    CHECK_FALSE(torch::equal(other_opt.master_tensors()[0], opt.master_tensors()[0]));
    // The older checkpoint still loads.
    app::load_checkpoint(run.path, 1, other_opt, *other, &step);
    CHECK(step == 1);
    CHECK(torch::equal(other_opt.master_tensors()[0], opt.master_tensors()[0]));
  }

  SECTION("a changed DiLoCo outer-state file stops it too, and a missing one") {
    sync::write_file_atomic(dir + "/outer.txt", std::string("outer statf"));
    CHECK_THROWS_WITH(app::load_checkpoint(run.path, 2, other_opt, *other, &step),
                      Catch::Contains("outer.txt") && Catch::Contains("over 11 bytes"));
    fs::remove(dir + "/outer.txt");
    CHECK_THROWS_WITH(app::load_checkpoint(run.path, 2, other_opt, *other, &step),
                      Catch::Contains("outer.txt: missing"));
  }

  SECTION("a flipped bit in the HF model is repaired from the restored masters") {
    const std::string file = dir + "/model/model.safetensors";
    const std::string intact = sync::read_file(file);
    flip_bit(file, 3);
    CHECK_NOTHROW(sync::Checkpoint::open(dir + "/model"));  // opens: only the manifest sees it
    app::load_checkpoint(run.path, 2, other_opt, *other, &step);
    CHECK(step == 2);
    CHECK(sync::read_file(file) == intact);
    CHECK(app::check_checkpoint_manifest(dir).empty());
  }

  SECTION("after a repair the manifest holds the rewritten files' hashes, other entries as recorded") {
    // A wrong recorded hash for model/config.json: the model is rewritten and its entry corrected.
    const std::string bad_hash = "0123456789abcdef";
    std::string text = manifest;
    const size_t at = text.find("\"xxh3\"", text.find("\"model/config.json\""));
    REQUIRE(at != std::string::npos);
    const size_t q = text.find('"', text.find(':', at) + 1);
    text.replace(q + 1, 16, bad_hash);
    sync::write_file_atomic(dir + "/MANIFEST.json", text);
    REQUIRE(app::check_checkpoint_manifest(dir).size() == 1);
    app::load_checkpoint(run.path, 2, other_opt, *other, &step);
    CHECK(app::check_checkpoint_manifest(dir).empty());
    CHECK(sync::read_file(dir + "/MANIFEST.json") == manifest);  // the file is intact: its true hash again
  }

  SECTION("a checkpoint saved before manifests existed still loads; a malformed manifest is named") {
    fs::remove(dir + "/MANIFEST.json");
    CHECK(app::check_checkpoint_manifest(dir, &has).empty());
    CHECK_FALSE(has);
    // Without a manifest a model cut short (no longer a safetensors file) is still rewritten.
    const std::string model_file = dir + "/model/model.safetensors";
    const std::string intact = sync::read_file(model_file);
    sync::write_file_atomic(model_file, intact.substr(0, 100));
    app::load_checkpoint(run.path, 2, other_opt, *other, &step);
    CHECK(step == 2);
    CHECK(sync::read_file(model_file) == intact);
    CHECK_FALSE(fs::exists(dir + "/MANIFEST.json"));  // none is invented
    sync::write_file_atomic(dir + "/MANIFEST.json",
                            std::string(R"({"format":"pulse-checkpoint-manifest-v1","files":{"model/../x":)"
                                        R"({"bytes":1,"xxh3":"0000000000000000"}}})"));
    CHECK_THROWS_WITH(app::check_checkpoint_manifest(dir), Catch::Contains("not a plain relative path"));
    sync::write_file_atomic(dir + "/MANIFEST.json",
                            std::string(R"({"format":"pulse-checkpoint-manifest-v1","files":{"../x":)"
                                        R"({"bytes":1,"xxh3":"0000000000000000"}}})"));
    CHECK_THROWS_WITH(app::check_checkpoint_manifest(dir),
                      Catch::Contains("MANIFEST.json") && Catch::Contains("not a plain relative path"));
    sync::write_file_atomic(dir + "/MANIFEST.json",
                            std::string(R"({"format":"pulse-checkpoint-manifest-v1","files":{"outer.txt":)"
                                        R"({"bytes":11,"xxh3":"zz"}}})"));
    CHECK_THROWS_WITH(app::check_checkpoint_manifest(dir),
                      Catch::Contains("files.\"outer.txt\"") && Catch::Contains("16 hex digits"));
  }
}
