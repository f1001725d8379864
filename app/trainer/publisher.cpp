#include "app/trainer/publisher.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "sync/patch.h"

namespace fs = std::filesystem;

namespace pulse::app {
namespace {

/// Index of the first element of `n` whose bits (UInt: uint16_t or uint32_t) have every exponent bit set
/// (Inf or NaN), or -1. Branch-free over blocks so that the common all-finite case vectorizes.
template <typename UInt>
int64_t first_all_ones_exponent(const uint8_t* data, size_t n, UInt exponent) {
  constexpr size_t kBlock = 4096;
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t end = std::min(n, start + kBlock);
    UInt hit = 0;
    for (size_t i = start; i < end; ++i) {
      UInt x;
      std::memcpy(&x, data + i * sizeof(UInt), sizeof(UInt));  // views may be unaligned (mmap)
      hit |= static_cast<UInt>((x & exponent) == exponent);
    }
    if (hit == 0) continue;
    for (size_t i = start; i < end; ++i) {
      UInt x;
      std::memcpy(&x, data + i * sizeof(UInt), sizeof(UInt));
      if ((x & exponent) == exponent) return static_cast<int64_t>(i);
    }
  }
  return -1;
}

/// Throws the refusal for element `i` of `v`, whose bits are `bits` and mantissa mask `mantissa`.
[[noreturn]] void refuse(const std::string& what, const sync::TensorView& v, int64_t i, uint64_t bits,
                         uint64_t mantissa, uint64_t sign) {
  const char* kind = (bits & mantissa) != 0 ? "NaN" : (bits & sign) != 0 ? "-Inf" : "+Inf";
  char hex[32];
  std::snprintf(hex, sizeof hex, "0x%llx", static_cast<unsigned long long>(bits));
  throw std::runtime_error(what + ": tensor '" + v.name + "' element " + std::to_string(i) + " is " + kind +
                           " (" + std::string(sync::dtype_name(v.dtype)) + " bits " + hex +
                           "); non-finite weights are never published");
}

}  // namespace

void require_finite_weights(const std::vector<sync::TensorView>& weights, const std::string& what) {
  for (const auto& v : weights) {
    if (v.dtype == sync::DType::BF16 || v.dtype == sync::DType::F16) {
      const bool bf16 = v.dtype == sync::DType::BF16;
      const uint16_t exponent = bf16 ? 0x7F80 : 0x7C00;
      const int64_t i = first_all_ones_exponent<uint16_t>(v.data, v.nbytes / 2, exponent);
      if (i < 0) continue;
      uint16_t bits;
      std::memcpy(&bits, v.data + 2 * static_cast<size_t>(i), 2);
      refuse(what, v, i, bits, bf16 ? 0x007F : 0x03FF, 0x8000);
    } else if (v.dtype == sync::DType::F32) {
      const int64_t i = first_all_ones_exponent<uint32_t>(v.data, v.nbytes / 4, 0x7F800000u);
      if (i < 0) continue;
      uint32_t bits;
      std::memcpy(&bits, v.data + 4 * static_cast<size_t>(i), 4);
      refuse(what, v, i, bits, 0x007FFFFFu, 0x80000000u);
    }
  }
}

Publisher::Publisher(const Config& config, const std::string& run_dir, const std::string& token,
                     uint64_t first_version, const std::vector<sync::TensorView>& weights)
    : Publisher(config, run_dir, token, 0) {
  publish_first(first_version, weights);
}

Publisher::Publisher(const Config& config, const std::string& run_dir, const std::string& token, int port)
    : config_(config), token_(token) {
  std::string store_dir;
  if (config.sync.store_on_disk) {
    store_dir = run_dir + "/sync";
    fs::remove_all(store_dir);
    fs::create_directories(store_dir);
  }
  store_ = std::make_unique<sync::VersionStore>(store_dir, config.sync.retention, config.sync.patch);
  // transport.kind = fs: every patch (and anchor) is also written to a shared folder, temp name + fsync +
  // rename + READY marker; workers replay it from there and never fetch over HTTP.
  if (config.transport.kind == TransportKind::Fs) {
    patch_dir_ = config.transport.dir.empty() ? run_dir + "/patches" : config.transport.dir;
    // Versions a killed run published past this start would look newer to a joining worker: drop them
    // (only pulse's own patch-*/anchor-* files and confirmations; nothing else in the folder is touched).
    if (fs::is_directory(patch_dir_)) {
      for (const auto& e : fs::directory_iterator(patch_dir_)) {
        const std::string name = e.path().filename().string();
        if ((name.rfind("patch-", 0) == 0 || name.rfind("anchor-", 0) == 0) &&
            name.find(".pulse") != std::string::npos)
          fs::remove(e.path());
      }
      fs::remove_all(fs::path(patch_dir_) / "workers");
    }
    fs_ = std::make_unique<sync::FsPublisher>(patch_dir_);
  }
  sync::HttpServerOptions sopt;
  sopt.host = config.transport.host;
  sopt.port = port;
  sopt.port_origin = "the patch port: transport.port + 1 on transport.host, shifted by 2 per trainer rank";
  sopt.token = token;
  sopt.tls_cert = config.transport.tls_cert;
  sopt.tls_key = config.transport.tls_key;
  sopt.threads = static_cast<int>(std::max<int64_t>(8, 2 * config.run.workers));
  server_ = std::make_unique<sync::PatchServer>(*store_, sopt);
  server_->start();
}

void Publisher::publish_first(uint64_t first_version, const std::vector<sync::TensorView>& weights) {
  if (store_->published()) throw std::logic_error("Publisher::publish_first: already published");
  require_finite_weights(weights, "publish version " + std::to_string(first_version));
  store_->publish(first_version, weights);
  if (fs_) fs_->publish_anchor(first_version, *store_->anchor(first_version));
}

/// The folder keeps what the store keeps (its anchors and the patches after the oldest), and the chain from
/// the oldest version a live worker confirmed there.
void Publisher::prune_folder() {
  const std::vector<uint64_t> anchors = store_->anchor_versions();
  if (anchors.empty()) return;
  uint64_t keep_from = anchors.front();
  if (live_workers_) {
    const auto confirmed = fs_->confirmations();
    for (const std::string& id : live_workers_()) {
      auto it = confirmed.find(id);
      if (it != confirmed.end()) keep_from = std::min(keep_from, it->second.version);
    }
  }
  fs_->retain(keep_from, anchors);
}

Publisher::~Publisher() {
  stop();
}

void Publisher::stop() {
  if (global_server_) global_server_->stop();
  if (server_) server_->stop();
}

uint64_t Publisher::publish_global(uint64_t round, const std::vector<sync::TensorView>& weights) {
  require_finite_weights(weights, "publish global round " + std::to_string(round));
  if (!global_store_) {
    global_store_ = std::make_unique<sync::VersionStore>("", config_.sync.retention, config_.sync.patch);
    global_store_->publish(round, weights);
    sync::HttpServerOptions sopt;
    sopt.host = config_.transport.host;
    sopt.token = token_;
    sopt.tls_cert = config_.transport.tls_cert;
    sopt.tls_key = config_.transport.tls_key;
    global_server_ = std::make_unique<sync::PatchServer>(*global_store_, sopt);
    global_server_->start();
    return 0;
  }
  return global_store_->publish(round, weights)->size();
}

PublishStats Publisher::publish(uint64_t version, const std::vector<sync::TensorView>& weights) {
  auto t0 = std::chrono::steady_clock::now();
  require_finite_weights(weights, "publish version " + std::to_string(version));
  return published(version, store_->publish(version, weights), t0);
}

PublishStats Publisher::publish_encoded(
    uint64_t version, const std::function<std::vector<uint8_t>(const sync::PatchOptions&)>& encode) {
  auto t0 = std::chrono::steady_clock::now();
  const std::string what = "publish version " + std::to_string(version);
  return published(version,
                   store_->publish_encoded(version, encode,
                                           [&](const std::vector<sync::TensorView>& weights) {
                                             require_finite_weights(weights, what);
                                           }),
                   t0);
}

PublishStats Publisher::published(uint64_t version, const sync::Blob& blob,
                                  std::chrono::steady_clock::time_point t0) {
  if (fs_) {
    fs_->publish(version - 1, version, *blob);
    const uint64_t every = config_.sync.retention.anchor_every;
    if (every != 0 && version % every == 0) fs_->publish_anchor(version, *store_->anchor(version));
    prune_folder();
  }
  PublishStats st;
  st.encode_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  sync::PatchInfo info = sync::inspect_patch(blob->data(), blob->size());
  for (const auto& t : info.tensors) {
    st.changed += t.changed;
    st.index_raw_bytes += t.index_bytes;
    st.value_raw_bytes += t.value_bytes;
  }
  st.patch_bytes = blob->size();
  st.payload_raw_bytes = info.payload_raw_bytes;
  st.payload_compressed_bytes = info.payload_compressed_bytes;
  return st;
}

}  // namespace pulse::app
