// The trainer's PULSESync side: the version store (patches + anchors), the HTTP patch server and, with
// transport.kind = fs, the shared-folder publisher. One publish() per weights version.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "app/config.h"
#include "sync/io/tensor_view.h"
#include "sync/transport_fs.h"
#include "sync/transport_http.h"
#include "sync/version_store.h"

namespace pulse::app {

/// What one publish produced (metrics).
struct PublishStats {
  uint64_t patch_bytes = 0;  ///< the patch container's size
  uint64_t changed = 0;      ///< BF16 elements the patch carries
  uint64_t index_raw_bytes = 0, value_raw_bytes = 0;
  uint64_t payload_raw_bytes = 0, payload_compressed_bytes = 0;
  double encode_ms = 0;  ///< encode + store (+ fs write)
};

/// The publisher's backstop against shipping NaN/Inf (the optimizer refuses non-finite steps, so this
/// should never fire): throws std::runtime_error "<what>: tensor 'NAME' element 1234 is NaN (BF16 bits
/// 0x7fc0); non-finite weights are never published" for the first element of a BF16, F16 or F32 view
/// whose exponent bits are all ones. Other dtypes are not floating point and pass. One branch-free pass
/// over the bit patterns (memory speed); the index search runs only on failure.
void require_finite_weights(const std::vector<sync::TensorView>& weights, const std::string& what);

/// Not thread-safe (one trainer thread publishes); the servers it starts are.
class Publisher {
 public:
  /// Opens the store (in memory, or <run_dir>/sync with sync.store_on_disk), publishes `first_version` of
  /// `weights` (an anchor), starts the patch server on transport.host with `token`, and with
  /// transport.kind = fs clears stale versions from the folder and writes the first anchor there.
  /// Every publish (here, publish(), publish_global()) first runs require_finite_weights and throws
  /// before anything is stored or served when a weight is NaN/Inf.
  Publisher(const Config& config, const std::string& run_dir, const std::string& token,
            uint64_t first_version, const std::vector<sync::TensorView>& weights);
  /// The servers alone, before any weights exist (the trainer starts them before SFT, so that workers can
  /// register early; patch routes answer 503 until publish_first). `port` is the patch server's (0 = a
  /// free one).
  Publisher(const Config& config, const std::string& run_dir, const std::string& token, int port);
  /// The first version (an anchor; with transport.kind = fs also written to the folder). Once, before
  /// publish(); same refusal of NaN/Inf as publish().
  void publish_first(uint64_t first_version, const std::vector<sync::TensorView>& weights);
  /// transport.kind = fs: which workers are live (their confirmed versions keep the chain they need in
  /// the folder). Unset: only the store's retention applies.
  void set_live_workers(std::function<std::vector<std::string>()> live) { live_workers_ = std::move(live); }
  ~Publisher();

  /// Publishes `version` (> the previous one): the patch from the previous version, an anchor every
  /// sync.anchor_every versions. With transport.kind = fs the folder then keeps what the store keeps: the
  /// newest sync.keep_anchors anchors and the patches after the oldest of them, plus the chain from the
  /// oldest version a live worker confirmed (never a chain a live worker still needs). Throws what
  /// sync::VersionStore::publish throws, and std::runtime_error naming the tensor and element when a weight
  /// is NaN/Inf (nothing is published then).
  PublishStats publish(uint64_t version, const std::vector<sync::TensorView>& weights);

  /// publish() of weights that live elsewhere (a GPU): `encode` builds the patch from the previous version
  /// with the options it is given (sync::VersionStore::publish_encoded), the store applies it to its host
  /// copy, refuses NaN/Inf there, and the patch is stored and served as publish() would. Throws what
  /// VersionStore::publish_encoded throws; nothing is published then.
  PublishStats publish_encoded(uint64_t version,
                               const std::function<std::vector<uint8_t>(const sync::PatchOptions&)>& encode);

  /// Multi-trainer runs, rank 0: a second stream holding only the global weights after each outer round
  /// (version = rounds done), served on its own port for evaluation and external inference workers. The
  /// patch of a round is a fresh BF16 diff between consecutive global weights. Returns that patch's size.
  uint64_t publish_global(uint64_t round, const std::vector<sync::TensorView>& weights);
  /// "" until the first publish_global.
  std::string global_url() const { return global_server_ ? global_server_->url() : std::string(); }

  /// Root hash (sync/hash.h root_hash) of the newest published version, as the encoder computed it while
  /// scanning the weights: the trainer's own weights after each publish, without another pass over them.
  uint64_t head_root_hash() const { return store_->head().root_hash; }

  std::string patch_url() const { return server_->url(); }
  /// transport.kind = fs: the shared folder ("" with http).
  const std::string& patch_dir() const { return patch_dir_; }
  /// Stops the patch server (idempotent).
  void stop();

 private:
  /// The fs folder, retention and the stats of a version the store has just taken.
  PublishStats published(uint64_t version, const sync::Blob& blob, std::chrono::steady_clock::time_point t0);
  const Config& config_;
  std::unique_ptr<sync::VersionStore> store_;
  std::unique_ptr<sync::FsPublisher> fs_;
  std::unique_ptr<sync::PatchServer> server_;
  std::string patch_dir_;
  std::string token_;
  std::function<std::vector<std::string>()> live_workers_;
  void prune_folder();
  std::unique_ptr<sync::VersionStore> global_store_;
  std::unique_ptr<sync::PatchServer> global_server_;
};

}  // namespace pulse::app
