// Test weights for the transport tests: a few random BF16 tensors (~10k elements) that change ~1% of
// their elements per version, like an RL step under a small learning rate.
#pragma once
#include <catch2/catch.hpp>

#include <unistd.h>
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "sync/hash.h"
#include "sync/io/tensor_view.h"
#include "sync/version_store.h"

namespace pulse::test {

/// A toy model: named BF16 tensors whose bit patterns the test mutates.
struct ToyModel {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<uint16_t>> data;  ///< BF16 bit patterns
  std::mt19937_64 rng;

  /// `scale` multiplies every tensor's element count (1 = ~10k elements).
  explicit ToyModel(uint64_t seed, int scale = 1) : rng(seed) {
    names = {"model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight",
             "model.layers.0.self_attn.q_proj.weight", "model.norm.weight"};
    shapes = {{64 * scale, 64}, {32 * scale, 96}, {48 * scale, 48}, {128}};
    for (const auto& s : shapes) {
      std::vector<uint16_t> t(static_cast<size_t>(sync::numel(s)));
      for (auto& v : t) v = random_bf16();
      data.push_back(std::move(t));
    }
  }

  /// A finite BF16 pattern of magnitude ~2^-7 .. 2^3.
  uint16_t random_bf16() {
    const uint64_t r = rng();
    const uint16_t sign = static_cast<uint16_t>((r & 1) << 15);
    const uint16_t exponent = static_cast<uint16_t>(120 + (r >> 1) % 11);
    const uint16_t mantissa = static_cast<uint16_t>((r >> 8) & 0x7f);
    return static_cast<uint16_t>(sign | (exponent << 7) | mantissa);
  }

  /// One "optimizer step": about `fraction` of all elements get a new, different bit pattern.
  void step(double fraction = 0.01) {
    for (auto& t : data) {
      const size_t changes =
          std::max<size_t>(1, static_cast<size_t>(fraction * static_cast<double>(t.size())));
      for (size_t k = 0; k < changes; ++k) {
        const size_t i = static_cast<size_t>(rng() % t.size());
        uint16_t v = random_bf16();
        while (v == t[i]) v = random_bf16();
        t[i] = v;
      }
    }
  }

  std::vector<sync::TensorView> views() const {
    std::vector<sync::TensorView> out;
    for (size_t i = 0; i < names.size(); ++i) {
      out.push_back(sync::TensorView{names[i], sync::DType::BF16, shapes[i],
                                     reinterpret_cast<const uint8_t*>(data[i].data()), data[i].size() * 2});
    }
    return out;
  }

  uint64_t root() const { return sync::root_hash(views()); }
};

/// True when two tensor sets hold the same names, shapes and bytes.
inline bool same_bytes(const std::vector<sync::TensorView>& a, const std::vector<sync::TensorView>& b) {
  const auto oa = sync::OwnedTensors::copy_of(a), ob = sync::OwnedTensors::copy_of(b);  // sorted by name
  const auto sa = oa.views(), sb = ob.views();
  if (sa.size() != sb.size()) return false;
  for (size_t i = 0; i < sa.size(); ++i) {
    if (sa[i].name != sb[i].name || sa[i].shape != sb[i].shape || sa[i].nbytes != sb[i].nbytes) return false;
    if (std::memcmp(sa[i].data, sb[i].data, sa[i].nbytes) != 0) return false;
  }
  return true;
}

/// A fresh folder under /tmp for one test.
inline std::string make_temp_dir(const std::string& tag) {
  std::string tmpl = "/tmp/pulse_" + tag + "_XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* d = ::mkdtemp(buf.data());
  REQUIRE(d != nullptr);
  return std::string(d);
}

/// Small, fast codec settings for tests.
inline sync::PatchOptions test_codec() {
  sync::PatchOptions o;
  o.zstd_level = 1;
  o.threads = 1;
  o.model_id = "toy";
  return o;
}

/// Publishes `model` as version 0 when `store` is empty, then one model.step() per version up to `last`.
inline void publish_to(sync::VersionStore& store, ToyModel& model, uint64_t last) {
  if (!store.published()) store.publish(0, model.views());
  for (uint64_t v = store.head().version + 1; v <= last; ++v) {
    model.step();
    store.publish(v, model.views());
  }
}

}  // namespace pulse::test
