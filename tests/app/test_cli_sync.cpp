// `pulse sync diff|anchor|apply|inspect|verify` driven through the real command line (run_cli) on small
// safetensors checkpoints in a temp dir: round trip byte-exact, exit codes, inspect output, corrupt patches.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "app/cli.h"
#include "sync/io/atomic_file.h"
#include "sync/io/safetensors.h"
#include "tests/app/cli_test_util.h"

using pulse::test_cli::CliResult;
using pulse::test_cli::pulse_cli;

namespace {

namespace fs = std::filesystem;

/// A temp dir removed at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/pulse_cli_sync_XXXXXX";
    const char* d = ::mkdtemp(tmpl);
    REQUIRE(d != nullptr);
    path = d;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
};

struct OwnedTensor {
  std::string name;
  pulse::sync::DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

void write_model(const std::string& path, const std::vector<OwnedTensor>& tensors,
                 const std::map<std::string, std::string>& metadata) {
  std::vector<pulse::sync::TensorView> views;
  for (const auto& t : tensors) views.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  pulse::sync::write_safetensors(path, views, metadata);
}

/// Tensor bytes by name, and the metadata, of a checkpoint on disk.
std::map<std::string, std::vector<uint8_t>> read_model(
    const std::string& path, std::map<std::string, std::string>* metadata = nullptr) {
  const auto ckpt = pulse::sync::Checkpoint::open(path);
  std::map<std::string, std::vector<uint8_t>> out;
  for (const auto& t : ckpt.tensors()) out[t.name].assign(t.data, t.data + t.nbytes);
  if (metadata) *metadata = ckpt.metadata();
  return out;
}

/// Base and target: two BF16 matrices and an F32 vector; ~5% of the elements change (+-1 ULP or anything).
std::pair<std::vector<OwnedTensor>, std::vector<OwnedTensor>> make_models() {
  std::mt19937_64 rng(7);
  std::vector<OwnedTensor> base = {
      {"model.embed_tokens.weight", pulse::sync::DType::BF16, {64, 32}, {}},
      {"model.layers.0.mlp.up_proj.weight", pulse::sync::DType::BF16, {48, 32}, {}},
      {"model.norm.weight", pulse::sync::DType::F32, {32}, {}}};
  for (auto& t : base) {
    t.bytes.resize(static_cast<size_t>(pulse::sync::numel(t.shape)) * pulse::sync::dtype_size(t.dtype));
    for (auto& b : t.bytes) b = static_cast<uint8_t>(rng());
  }
  auto target = base;
  for (auto& t : target) {
    const size_t w = pulse::sync::dtype_size(t.dtype);
    for (size_t i = 0; i < t.bytes.size() / w; ++i)
      if (rng() % 20 == 0) t.bytes[i * w] = static_cast<uint8_t>(t.bytes[i * w] + (rng() % 3 ? 1 : 77));
  }
  return {base, target};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

/// make_models() written to DIR/base.safetensors and DIR/target.safetensors, and `pulse sync diff` of
/// them to DIR/p.pulse; returns the patch's path.
std::string write_models_and_diff(const TempDir& dir) {
  auto [base, target] = make_models();
  write_model(dir / "base.safetensors", base, {});
  write_model(dir / "target.safetensors", target, {});
  const std::string patch = dir / "p.pulse";
  REQUIRE(
      pulse_cli({"sync", "diff", dir / "base.safetensors", dir / "target.safetensors", "-o", patch}).code ==
      0);
  return patch;
}

}  // namespace

TEST_CASE("pulse sync diff/apply/verify/inspect round trip through the CLI", "[app][sync][cli]") {
  TempDir dir;
  auto [base, target] = make_models();
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}};
  write_model(dir / "base.safetensors", base, meta);
  write_model(dir / "target.safetensors", target, {{"format", "pt"}});
  const auto want = read_model(dir / "target.safetensors");

  for (const std::string values : {"absolute", "delta"}) {
    INFO("values " << values);
    const std::string patch = dir / ("p_" + values + ".pulse");
    auto r = pulse_cli({"sync", "diff", dir / "base.safetensors", dir / "target.safetensors", "-o", patch,
                        "--values", values, "--base-version", "12", "--target-version", "13"});
    INFO(r.err);
    REQUIRE(r.code == 0);
    CHECK(contains(r.out, "elements changed"));

    const std::string out = dir / ("out_" + values + ".safetensors");
    r = pulse_cli({"sync", "apply", dir / "base.safetensors", patch, "-o", out});
    REQUIRE(r.code == 0);
    std::map<std::string, std::string> out_meta;
    CHECK(read_model(out, &out_meta) == want);
    CHECK(out_meta == meta);  // the base checkpoint's __metadata__ is kept

    CHECK(pulse_cli({"sync", "verify", out, patch}).code == 0);
    r = pulse_cli({"sync", "verify", dir / "base.safetensors", patch});
    CHECK(r.code == 1);
    CHECK(contains(r.err, "does not match target version 13"));

    r = pulse_cli({"sync", "inspect", patch});
    REQUIRE(r.code == 0);
    CHECK(contains(r.out, "base version   12"));
    CHECK(contains(r.out, "target version 13"));
    CHECK(contains(r.out, "values " + values));
    for (const auto& t : base) CHECK(contains(r.out, t.name));
  }
}

TEST_CASE("pulse sync anchor writes a snapshot that restores any weights", "[app][sync][cli]") {
  TempDir dir;
  auto [base, target] = make_models();
  write_model(dir / "base.safetensors", base, {});
  write_model(dir / "target.safetensors", target, {});
  auto r = pulse_cli({"sync", "anchor", dir / "target.safetensors", "-o", dir / "a.pulse", "--version", "9"});
  INFO(r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, "anchor"));
  r = pulse_cli({"sync", "inspect", dir / "a.pulse"});
  CHECK(contains(r.out, "anchor"));
  CHECK(contains(r.out, "target version 9"));
  r = pulse_cli({"sync", "apply", dir / "base.safetensors", dir / "a.pulse", "-o", dir / "out.safetensors"});
  REQUIRE(r.code == 0);
  CHECK(read_model(dir / "out.safetensors") == read_model(dir / "target.safetensors"));
}

TEST_CASE("a corrupt patch fails apply naming the file and the byte offset", "[app][sync][cli]") {
  TempDir dir;
  const std::string patch = write_models_and_diff(dir);
  std::string bytes = pulse::sync::read_file(patch);
  const std::string corrupt = dir / "corrupt.pulse";
  for (size_t at : {size_t{3}, size_t{40}, bytes.size() - 5}) {  // magic, header, payload
    std::string c = bytes;
    c[at] = static_cast<char>(c[at] ^ 0x5a);
    pulse::sync::write_file_atomic(corrupt, c.data(), c.size());
    const auto r =
        pulse_cli({"sync", "apply", dir / "base.safetensors", corrupt, "-o", dir / "out.safetensors"});
    INFO("byte " << at << ": " << r.err);
    CHECK(r.code != 0);
    CHECK(contains(r.err, corrupt));
    CHECK(contains(r.err, "offset"));
    CHECK_FALSE(fs::exists(dir / "out.safetensors"));
  }
  // Truncated.
  pulse::sync::write_file_atomic(corrupt, bytes.data(), bytes.size() / 2);
  auto r = pulse_cli({"sync", "inspect", corrupt});
  CHECK(r.code == 0);  // the header is intact: inspect warns about the size
  CHECK(contains(r.out, "WARNING"));
  r = pulse_cli({"sync", "verify", dir / "target.safetensors", corrupt});
  CHECK(r.code == 0);  // verify compares tensor hashes from the header only, and says the patch is damaged
  CHECK(contains(r.out, "matches target version"));
  CHECK(contains(r.err, "WARNING"));
  CHECK(contains(r.err, "truncated"));
  r = pulse_cli({"sync", "verify", dir / "target.safetensors", patch});
  CHECK(r.code == 0);
  CHECK_FALSE(contains(r.err, "WARNING"));
  r = pulse_cli({"sync", "apply", dir / "base.safetensors", corrupt, "-o", dir / "out.safetensors"});
  CHECK(r.code != 0);
  CHECK(contains(r.err, "truncated"));
  std::string flipped = bytes;  // one payload byte: the chunk checksum catches it
  flipped[bytes.size() - 5] = static_cast<char>(flipped[bytes.size() - 5] ^ 0x5a);
  pulse::sync::write_file_atomic(corrupt, flipped.data(), flipped.size());
  r = pulse_cli({"sync", "verify", dir / "target.safetensors", corrupt});
  CHECK(r.code == 0);
  CHECK(contains(r.err, "WARNING"));
  CHECK(contains(r.err, "checksum"));
  // inspect reads the header, which is intact, and still says the payload is not.
  r = pulse_cli({"sync", "inspect", corrupt});
  CHECK(r.code == 0);
  CHECK(contains(r.out, "WARNING: payload damaged"));
  CHECK(contains(r.out, "offset"));
  CHECK_FALSE(contains(r.out, "check out"));
  r = pulse_cli({"sync", "inspect", patch});
  CHECK(r.code == 0);
  CHECK(contains(r.out, "every chunk's checksum and size check out"));
  CHECK_FALSE(contains(r.out, "WARNING"));
}

TEST_CASE("pulse sync apply on the target says OUT was written, a run step folder gets a hint",
          "[app][sync][cli]") {
  TempDir dir;
  const std::string patch = write_models_and_diff(dir);
  // OUT held something else: applying to the target itself replaces it with the target, and says so
  // (it printed 'already at the target, unchanged' about the file it had just overwritten).
  const std::string out = dir / "out.safetensors";
  pulse::sync::write_file_atomic(out, "keep", 4);
  auto r = pulse_cli({"sync", "apply", dir / "target.safetensors", patch, "-o", out});
  INFO(r.out << r.err);
  REQUIRE(r.code == 0);
  CHECK(contains(r.out, out + ": written unpatched (the base '" + dir / "target.safetensors" +
                            "' was already at the target)"));
  CHECK_FALSE(contains(r.out, "unchanged"));
  CHECK(read_model(out) == read_model(dir / "target.safetensors"));
  r = pulse_cli({"sync", "apply", dir / "base.safetensors", patch, "-o", out});
  CHECK(r.code == 0);
  CHECK(contains(r.out, out + ": patched, version"));

  // A pulse run's checkpoint folder (step-N/model/model.safetensors): the error points at model/.
  const std::string step = dir / "step-000010";
  fs::create_directories(step + "/model");
  write_model(step + "/model/model.safetensors", make_models().first, {});
  r = pulse_cli({"sync", "diff", step, dir / "target.safetensors", "-o", dir / "q.pulse"});
  CHECK(r.code != 0);
  CHECK(contains(r.err, "checkpoint folder '" + step + "' has neither model.safetensors"));
  CHECK(contains(r.err, "pass '" + step + "/model'"));
  CHECK_FALSE(fs::exists(dir / "q.pulse"));
  r = pulse_cli({"sync", "diff", step + "/model", dir / "target.safetensors", "-o", dir / "q.pulse"});
  CHECK(r.code == 0);
  // A folder without weights anywhere gets no such hint.
  fs::create_directories(dir / "empty");
  r = pulse_cli({"sync", "verify", dir / "empty", patch});
  CHECK(r.code != 0);
  CHECK(contains(r.err, "has neither model.safetensors"));
  CHECK_FALSE(contains(r.err, "pass '"));
}

TEST_CASE("pulse sync diff and anchor refuse to write over their own inputs", "[app][sync][cli]") {
  TempDir dir;
  auto [base, target] = make_models();
  write_model(dir / "base.safetensors", base, {});
  write_model(dir / "target.safetensors", target, {});
  const std::string before = pulse::sync::read_file(dir / "base.safetensors");
  const std::string target_before = pulse::sync::read_file(dir / "target.safetensors");
  // -o BASE, -o TARGET (through a different spelling of the path), and an anchor over its MODEL.
  const std::vector<std::vector<std::string>> commands = {
      {"sync", "diff", dir / "base.safetensors", dir / "target.safetensors", "-o", dir / "base.safetensors"},
      {"sync", "diff", dir / "base.safetensors", dir / "target.safetensors", "-o",
       dir / "./target.safetensors"},
      {"sync", "anchor", dir / "base.safetensors", "-o", dir / "base.safetensors"}};
  for (const auto& args : commands) {
    INFO(args.back());
    const auto r = pulse_cli(args);
    CHECK(r.code == 1);
    CHECK(contains(r.err, "would replace it"));
  }
  CHECK(pulse::sync::read_file(dir / "base.safetensors") == before);
  CHECK(pulse::sync::read_file(dir / "target.safetensors") == target_before);
  // A model_id the format cannot hold is refused before anything is written.
  const auto r = pulse_cli({"sync", "diff", dir / "base.safetensors", dir / "target.safetensors", "-o",
                            dir / "big.pulse", "--model-id", std::string(70000, 'x')});
  CHECK(r.code == 1);
  CHECK(contains(r.err, "model_id is 70000 bytes; the format allows at most 65536"));
  CHECK_FALSE(std::filesystem::exists(dir / "big.pulse"));
}
