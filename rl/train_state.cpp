// Training-state checkpoints: optimizer + torch RNG + step/cursor/version in one atomically swapped folder
// (rl/train_state.h).
#include "rl/train_state.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Functions.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "rl/optimizer.h"
#include "sync/io/atomic_file.h"

namespace pulse::rl {

namespace fs = std::filesystem;

namespace {
constexpr const char* kFormat = "pulse-train-state-v1";

std::string to_hex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = digits[p[i] >> 4];
    s[2 * i + 1] = digits[p[i] & 15];
  }
  return s;
}

std::vector<uint8_t> from_hex(const std::string& s, const std::string& where) {
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::runtime_error(where + ": torch_rng_state is not lowercase hex");
  };
  if (s.size() % 2) throw std::runtime_error(where + ": torch_rng_state has an odd length");
  std::vector<uint8_t> out(s.size() / 2);
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<uint8_t>(nibble(s[2 * i]) * 16 + nibble(s[2 * i + 1]));
  return out;
}

std::string torch_rng_hex() {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  at::Tensor state = gen.get_state();
  return to_hex(state.data_ptr<uint8_t>(), static_cast<size_t>(state.numel()));
}

void set_torch_rng(const std::string& hex, const std::string& where) {
  std::vector<uint8_t> bytes = from_hex(hex, where);
  at::Tensor state = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(state.data_ptr<uint8_t>(), bytes.data(), bytes.size());
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  try {
    gen.set_state(state);
  } catch (const std::exception& e) {
    throw std::runtime_error(where + ": torch_rng_state rejected: " + e.what());
  }
}
}  // namespace

void save_train_state(const std::string& dir, const MasterAdam& opt, const TrainState& st) {
  const fs::path target = fs::absolute(fs::path(dir)).lexically_normal();
  const fs::path tmp = target.string() + ".tmp";
  const fs::path old = target.string() + ".old";
  nlohmann::json extra;
  try {
    extra = nlohmann::json::parse(st.extra_json.empty() ? "{}" : st.extra_json);
  } catch (const std::exception& e) {
    throw std::runtime_error(dir + ": TrainState::extra_json is not valid JSON: " + e.what());
  }
  try {
    fs::remove_all(tmp);
    fs::create_directories(tmp);
    opt.save_state((tmp / "optimizer.safetensors").string());
    nlohmann::json j = {{"format", kFormat},
                        {"step", st.step},
                        {"data_cursor", st.data_cursor},
                        {"policy_version", st.policy_version},
                        {"optimizer_step", opt.step_count()},
                        {"torch_rng_state", torch_rng_hex()},
                        {"extra", extra}};
    sync::write_file_atomic((tmp / "train_state.json").string(), j.dump(1));
    sync::fsync_dir(tmp.string());
    // Swap: at every instant either `target` or `old` holds a complete checkpoint.
    if (fs::exists(target)) {
      fs::remove_all(old);
      fs::rename(target, old);
    }
    fs::rename(tmp, target);
    sync::fsync_dir(target.parent_path().string());
    fs::remove_all(old);
  } catch (const fs::filesystem_error& e) {
    throw std::runtime_error(dir + ": cannot write training state: " + e.what());
  }
}

TrainState load_train_state(const std::string& dir, MasterAdam& opt) {
  fs::path root = fs::absolute(fs::path(dir)).lexically_normal();
  if (!fs::exists(root / "train_state.json")) {
    const fs::path old = root.string() + ".old";  // crash between the two renames of save_train_state
    if (fs::exists(old / "train_state.json")) {
      root = old;
    } else {
      throw std::runtime_error(dir + ": no training state (train_state.json missing)");
    }
  }
  const std::string json_path = (root / "train_state.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(sync::read_file(json_path));
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(json_path + ": malformed JSON: " + e.what());
  }
  if (!j.is_object() || j.value("format", std::string()) != kFormat) {
    throw std::runtime_error(json_path + ": field \"format\" must be \"" + std::string(kFormat) + "\"");
  }
  TrainState st;
  std::string torch_rng;
  try {
    st.step = j.at("step").get<int64_t>();
    st.data_cursor = j.at("data_cursor").get<uint64_t>();
    st.policy_version = j.at("policy_version").get<uint64_t>();
    torch_rng = j.at("torch_rng_state").get<std::string>();
    st.extra_json = j.contains("extra") ? j.at("extra").dump() : "{}";
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(json_path + ": bad or missing field: " + e.what());
  }
  opt.load_state((root / "optimizer.safetensors").string());
  if (j.contains("optimizer_step") && j["optimizer_step"].get<int64_t>() != opt.step_count()) {
    throw std::runtime_error(json_path + ": optimizer_step disagrees with optimizer.safetensors");
  }
  set_torch_rng(torch_rng, json_path);
  return st;
}

}  // namespace pulse::rl
