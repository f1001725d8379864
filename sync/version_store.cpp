#include "sync/version_store.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>

#include "sync/io/atomic_file.h"
#include "sync/io/dtype.h"
#include "sync/hash.h"

namespace pulse::sync {

// ---- OwnedTensors -------------------------------------------------------------------------------------

OwnedTensors OwnedTensors::copy_of(const std::vector<TensorView>& tensors) {
  OwnedTensors out;
  out.entries_.reserve(tensors.size());
  for (const auto& t : tensors) {
    const size_t expect = static_cast<size_t>(numel(t.shape)) * dtype_size(t.dtype);
    if (t.nbytes != expect) {
      throw std::invalid_argument("tensor '" + t.name + "': nbytes " + std::to_string(t.nbytes) +
                                  " != numel * dtype size " + std::to_string(expect));
    }
    if (t.nbytes > 0 && t.data == nullptr) throw std::invalid_argument("tensor '" + t.name + "': null data");
    Entry e{t.name, t.dtype, t.shape, std::vector<uint8_t>(t.data, t.data + t.nbytes)};
    out.entries_.push_back(std::move(e));
  }
  std::sort(out.entries_.begin(), out.entries_.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  for (size_t i = 1; i < out.entries_.size(); ++i) {
    if (out.entries_[i].name == out.entries_[i - 1].name) {
      throw std::invalid_argument("duplicate tensor name '" + out.entries_[i].name + "'");
    }
  }
  return out;
}

OwnedTensors OwnedTensors::zeros_like(const PatchInfo& info) {
  // A header can describe any sizes (its checksum is no signature): refuse what cannot fit in memory
  // before allocating, instead of a std::bad_alloc or the OOM killer.
  const uint64_t memory_bytes =
      static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGE_SIZE));
  uint64_t total = 0;
  for (const auto& t : info.tensors) {
    const uint64_t bytes =
        static_cast<uint64_t>(numel(t.shape)) * dtype_size(t.dtype);  // parse_container bounds it
    if (__builtin_add_overflow(total, bytes, &total) || total > memory_bytes)
      throw PatchError("patch (target version " + std::to_string(info.target_version) +
                       ") describes more tensor bytes than this machine's " + std::to_string(memory_bytes) +
                       " bytes of memory");
  }
  OwnedTensors out;
  for (const auto& t : info.tensors) {
    const size_t bytes = static_cast<size_t>(numel(t.shape)) * dtype_size(t.dtype);
    out.entries_.push_back(Entry{t.name, t.dtype, t.shape, std::vector<uint8_t>(bytes, 0)});
  }
  std::sort(out.entries_.begin(), out.entries_.end(),
            [](const Entry& a, const Entry& b) { return a.name < b.name; });
  return out;
}

std::vector<TensorView> OwnedTensors::views() const {
  std::vector<TensorView> out;
  out.reserve(entries_.size());
  for (const auto& e : entries_)
    out.push_back(TensorView{e.name, e.dtype, e.shape, e.bytes.data(), e.bytes.size()});
  return out;
}

std::vector<MutableTensorView> OwnedTensors::mutable_views() {
  std::vector<MutableTensorView> out;
  out.reserve(entries_.size());
  for (auto& e : entries_) {
    out.push_back(MutableTensorView{e.name, e.dtype, e.shape, e.bytes.data(), e.bytes.size()});
  }
  return out;
}

size_t OwnedTensors::nbytes() const {
  size_t total = 0;
  for (const auto& e : entries_) total += e.bytes.size();
  return total;
}

// ---- VersionStore -----------------------------------------------------------------------------------

struct VersionStore::Plan {
  uint64_t anchor_version = 0;
  Blob anchor;
  std::vector<Blob> to_from;  ///< patches anchor+1 .. from
  std::vector<Blob> from_to;  ///< patches from+1 .. to (empty when the target is the in-memory head)
  std::shared_ptr<const OwnedTensors> target;  ///< the head weights when to == head
};

namespace {

Blob make_blob(std::vector<uint8_t>&& bytes) {
  return std::make_shared<const std::vector<uint8_t>>(std::move(bytes));
}

void apply_or_throw(std::vector<MutableTensorView>& weights, const Blob& blob) {
  apply_patch(weights, blob->data(), blob->size());
}

constexpr size_t kComposedCacheEntries = 8;

}  // namespace

VersionStore::VersionStore(std::string dir, RetentionPolicy policy, PatchOptions encode_options)
    : dir_(std::move(dir)), policy_(policy), options_(std::move(encode_options)) {
  if (policy_.keep_anchors == 0) policy_.keep_anchors = 1;
  if (!dir_.empty()) {
    std::filesystem::create_directories(dir_);
    remove_stale_files();
  }
}

void VersionStore::remove_stale_files() const {
  std::vector<std::string> stale;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    // A crash may also leave write_file_atomic's "<name>.tmp.<pid>.<n>" behind.
    const size_t tmp = name.find(".pulse.tmp.");
    const std::string base = tmp == std::string::npos ? name : name.substr(0, tmp + 6);
    unsigned long long a = 0, b = 0;
    char tail[8] = {0};
    if ((std::sscanf(base.c_str(), "anchor-%20llu.puls%1s", &a, tail) == 2 && base == anchor_name(a)) ||
        (std::sscanf(base.c_str(), "patch-%20llu-%20llu.puls%1s", &a, &b, tail) == 3 &&
         base == patch_name(a, b)))
      stale.push_back(name);
  }
  for (const auto& name : stale) remove_blob(name);
}

std::string VersionStore::patch_name(uint64_t from, uint64_t to) {
  char buf[80];
  std::snprintf(buf, sizeof buf, "patch-%020llu-%020llu.pulse", static_cast<unsigned long long>(from),
                static_cast<unsigned long long>(to));
  return buf;
}

std::string VersionStore::anchor_name(uint64_t version) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "anchor-%020llu.pulse", static_cast<unsigned long long>(version));
  return buf;
}

void VersionStore::write_blob(const std::string& name, const Blob& blob) const {
  if (dir_.empty()) return;
  write_file_atomic(dir_ + "/" + name, blob->data(), blob->size());
}

void VersionStore::remove_blob(const std::string& name) const {
  if (dir_.empty()) return;
  std::error_code ec;  // a file already gone is not an error: retention only frees space
  std::filesystem::remove(dir_ + "/" + name, ec);
}

Blob VersionStore::publish(uint64_t version, const std::vector<TensorView>& weights) {
  std::shared_ptr<const OwnedTensors> base;
  VersionHead prev;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    first = !published_;
    if (!first && version != head_.version + 1) {
      throw std::invalid_argument("publish: version " + std::to_string(version) +
                                  " must be head+1 = " + std::to_string(head_.version + 1));
    }
    base = latest_;
    prev = head_;
  }

  // Encoding runs outside the lock so that workers keep being served while the trainer publishes.
  auto snapshot = std::make_shared<const OwnedTensors>(OwnedTensors::copy_of(weights));
  const auto target_views = snapshot->views();
  PatchOptions opt = options_;
  Blob patch, anchor;
  if (first) {
    opt.base_version = 0;
    opt.target_version = version;
    anchor = make_blob(encode_anchor(target_views, opt));
    patch = anchor;
  } else {
    opt.base_version = prev.version;
    opt.target_version = version;
    // The base is our own previous publish, whose root we computed then: no need to hash it again.
    opt.known_base_root = prev.root_hash;
    patch = make_blob(encode_patch(base->views(), target_views, opt));
    anchor = anchor_if_due(version, target_views);
  }
  // The encoder hashed the target while scanning it; its header carries the root (one pass saved).
  const uint64_t root = inspect_patch(patch->data(), patch->size()).target_root_hash;
  commit(first, prev, version, root, std::move(snapshot), patch, anchor);
  return patch;
}

Blob VersionStore::anchor_if_due(uint64_t version, const std::vector<TensorView>& weights) const {
  if (policy_.anchor_every == 0 || version % policy_.anchor_every != 0) return nullptr;
  PatchOptions opt = options_;
  opt.base_version = 0;
  opt.target_version = version;
  return make_blob(encode_anchor(weights, opt));
}

void VersionStore::commit(bool first, const VersionHead& prev, uint64_t version, uint64_t root,
                          std::shared_ptr<const OwnedTensors> snapshot, const Blob& patch,
                          const Blob& anchor) {
  if (!first) write_blob(patch_name(prev.version, version), patch);
  if (anchor) write_blob(anchor_name(version), anchor);

  std::lock_guard<std::mutex> lock(mu_);
  if (published_ == first || (!first && head_.version != prev.version)) {
    throw std::logic_error("VersionStore: two publishes at once (version " + std::to_string(version) + ")");
  }
  if (first) first_version_ = version;
  published_ = true;
  head_ = VersionHead{version, root};
  latest_ = std::move(snapshot);
  root_hashes_[version] = root;
  if (!first) patches_[version] = patch;
  if (anchor) anchors_[version] = anchor;
  retain_locked();
}

Blob VersionStore::publish_encoded(uint64_t version,
                                   const std::function<std::vector<uint8_t>(const PatchOptions&)>& encode,
                                   const std::function<void(const std::vector<TensorView>&)>& check) {
  std::shared_ptr<const OwnedTensors> base;
  VersionHead prev;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!published_)
      throw std::logic_error("publish_encoded: the first version must be published with publish()");
    if (version != head_.version + 1)
      throw std::invalid_argument("publish_encoded: version " + std::to_string(version) +
                                  " must be head+1 = " + std::to_string(head_.version + 1));
    base = latest_;
    prev = head_;
  }
  PatchOptions opt = options_;
  opt.base_version = prev.version;
  opt.target_version = version;
  opt.known_base_root = prev.root_hash;
  Blob patch = make_blob(encode(opt));
  const PatchInfo info = inspect_patch(patch->data(), patch->size());
  if (info.base_version != prev.version || info.target_version != version)
    throw std::invalid_argument("publish_encoded: the encoder made a patch " +
                                std::to_string(info.base_version) + " -> " +
                                std::to_string(info.target_version) + ", not " +
                                std::to_string(prev.version) + " -> " + std::to_string(version));
  // The new head: the previous one with the patch applied. Its root is ours (no hashing of the base);
  // every changed tensor's target hash is verified after the apply.
  OwnedTensors next = OwnedTensors::copy_of(base->views());
  auto views = next.mutable_views();
  ApplyOptions apply;
  apply.trusted_root = prev.root_hash;
  apply_patch(views, patch->data(), patch->size(), apply);
  auto snapshot = std::make_shared<const OwnedTensors>(std::move(next));
  const auto target_views = snapshot->views();
  if (check) check(target_views);
  const Blob anchor = anchor_if_due(version, target_views);
  commit(false, prev, version, info.target_root_hash, std::move(snapshot), patch, anchor);
  return patch;
}

VersionHead VersionStore::head() const {
  std::lock_guard<std::mutex> lock(mu_);
  return head_;
}

bool VersionStore::published() const {
  std::lock_guard<std::mutex> lock(mu_);
  return published_;
}

bool VersionStore::plan_locked(uint64_t from, uint64_t to, Plan& plan) const {
  // The newest anchor <= from whose patch chain up to `from` is complete.
  auto it = anchors_.upper_bound(from);
  bool found = false;
  while (it != anchors_.begin()) {
    --it;
    bool chain = true;
    for (uint64_t v = it->first + 1; v <= from; ++v) {
      if (!patches_.count(v)) {
        chain = false;
        break;
      }
    }
    if (chain) {
      found = true;
      break;
    }
  }
  if (!found) return false;
  plan.anchor_version = it->first;
  plan.anchor = it->second;
  plan.to_from.clear();
  for (uint64_t v = it->first + 1; v <= from; ++v) plan.to_from.push_back(patches_.at(v));
  plan.from_to.clear();
  plan.target.reset();
  if (to == head_.version) {
    plan.target = latest_;
  } else {
    for (uint64_t v = from + 1; v <= to; ++v) {
      auto p = patches_.find(v);
      if (p == patches_.end()) return false;
      plan.from_to.push_back(p->second);
    }
  }
  return true;
}

bool VersionStore::reconstructible(uint64_t version) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!published_ || version > head_.version || version < first_version_) return false;
  if (version == head_.version) return true;
  Plan plan;
  return plan_locked(version, head_.version, plan);
}

Blob VersionStore::patch(uint64_t from, uint64_t to) {
  Plan plan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!published_) throw std::invalid_argument("no version published yet");
    if (to > head_.version) {
      throw std::invalid_argument("patch " + std::to_string(from) + "->" + std::to_string(to) +
                                  ": target is beyond head " + std::to_string(head_.version));
    }
    if (from >= to) {
      throw std::invalid_argument("patch " + std::to_string(from) + "->" + std::to_string(to) +
                                  ": base version must be below the target version");
    }
    if (to == from + 1) {
      auto it = patches_.find(to);
      if (it != patches_.end()) return it->second;
    }
    auto cached = composed_.find({from, to});
    if (cached != composed_.end()) {
      ++stats_.composed_cache_hits;
      return cached->second;
    }
    if (from < first_version_ || !plan_locked(from, to, plan)) {
      throw std::out_of_range("version " + std::to_string(from) +
                              " is no longer reconstructible (retention dropped its anchor or patches); "
                              "fetch an anchor instead");
    }
  }

  // Rebuild `from` (anchor + replay), then `to`, and diff them; this runs outside the lock.
  auto info = inspect_patch(plan.anchor->data(), plan.anchor->size());
  OwnedTensors state = OwnedTensors::zeros_like(info);
  auto mv = state.mutable_views();
  apply_or_throw(mv, plan.anchor);
  for (const auto& p : plan.to_from) apply_or_throw(mv, p);
  PatchOptions opt = options_;
  opt.base_version = from;
  opt.target_version = to;
  Blob composed;
  if (plan.target) {
    composed = make_blob(encode_patch(state.views(), plan.target->views(), opt));
  } else {
    const OwnedTensors base = state;
    for (const auto& p : plan.from_to) apply_or_throw(mv, p);
    composed = make_blob(encode_patch(base.views(), state.views(), opt));
  }

  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.composed_built;
  if (composed_.emplace(std::make_pair(from, to), composed).second) {
    composed_order_.emplace_back(from, to);
    while (composed_order_.size() > kComposedCacheEntries) {
      composed_.erase(composed_order_.front());
      composed_order_.pop_front();
    }
  }
  return composed;
}

Blob VersionStore::anchor(uint64_t version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = anchors_.find(version);
  if (it == anchors_.end())
    throw std::out_of_range("no anchor stored for version " + std::to_string(version));
  return it->second;
}

uint64_t VersionStore::latest_anchor_version() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (anchors_.empty()) throw std::out_of_range("no anchor yet: nothing published");
  return anchors_.rbegin()->first;
}

std::vector<uint64_t> VersionStore::anchor_versions() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<uint64_t> out;
  for (const auto& [v, blob] : anchors_) out.push_back(v);
  return out;
}

uint64_t VersionStore::root_hash_of(uint64_t version) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = root_hashes_.find(version);
  if (it == root_hashes_.end())
    throw std::out_of_range("version " + std::to_string(version) + " was never published");
  return it->second;
}

void VersionStore::confirm(const std::string& worker_id, uint64_t version, uint64_t root_hash) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = root_hashes_.find(version);
  if (it == root_hashes_.end()) {
    throw std::invalid_argument("worker '" + worker_id + "' confirmed version " + std::to_string(version) +
                                ", which was never published");
  }
  if (it->second != root_hash) {
    throw HashMismatchError("worker '" + worker_id + "' confirmed version " + std::to_string(version) +
                            " with root hash " + hash_hex(root_hash) + " but the trainer's is " +
                            hash_hex(it->second));
  }
  workers_[worker_id] = version;
  retain_locked();
}

std::map<std::string, uint64_t> VersionStore::worker_versions() const {
  std::lock_guard<std::mutex> lock(mu_);
  return workers_;
}

void VersionStore::forget_worker(const std::string& worker_id) {
  std::lock_guard<std::mutex> lock(mu_);
  workers_.erase(worker_id);
  retain_locked();
}

void VersionStore::retain_locked() {
  if (!published_ || anchors_.empty()) return;
  // The oldest version anyone still needs: head, or the oldest confirmed worker baseline.
  uint64_t need = head_.version;
  for (const auto& [id, v] : workers_) need = std::min(need, v);

  // Keep the newest keep_anchors anchors, and the newest anchor <= need (its chain reaches every
  // confirmed baseline, because all patches after the oldest kept anchor are kept).
  std::set<uint64_t> keep;
  auto rit = anchors_.rbegin();
  for (uint64_t k = 0; k < policy_.keep_anchors && rit != anchors_.rend(); ++k, ++rit)
    keep.insert(rit->first);
  auto it = anchors_.upper_bound(need);
  if (it != anchors_.begin()) keep.insert(std::prev(it)->first);
  const uint64_t oldest = *keep.begin();

  for (auto a = anchors_.begin(); a != anchors_.end();) {
    if (!keep.count(a->first)) {  // anchors between kept ones are redundant: the patch chain covers them
      remove_blob(anchor_name(a->first));
      a = anchors_.erase(a);
    } else {
      ++a;
    }
  }
  for (auto p = patches_.begin(); p != patches_.end() && p->first <= oldest;) {
    remove_blob(patch_name(p->first - 1, p->first));
    p = patches_.erase(p);
  }
  for (auto c = composed_order_.begin(); c != composed_order_.end();) {
    if (c->first < oldest) {
      composed_.erase(*c);
      c = composed_order_.erase(c);
    } else {
      ++c;
    }
  }
}

VersionStoreStats VersionStore::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  VersionStoreStats s = stats_;
  s.patches_stored = patches_.size();
  s.anchors_stored = anchors_.size();
  s.oldest_reconstructible = anchors_.empty() ? 0 : anchors_.begin()->first;
  return s;
}

}  // namespace pulse::sync
