#include "sync/patch_apply_checks.h"

#include <algorithm>
#include <map>
#include <type_traits>

#include "sync/io/dtype.h"

#include "sync/hash.h"
#include "sync/index_coding.h"

namespace pulse::sync {

std::string patch_versions(const PatchInfo& info) {
  return (info.anchor ? std::string("anchor")
                      : "base version " + std::to_string(info.base_version) + " (root " +
                            hash_hex(info.base_root_hash) + ")") +
         " -> target version " + std::to_string(info.target_version) + " (root " +
         hash_hex(info.target_root_hash) + ")";
}

std::vector<size_t> match_patch_tensors(const PatchInfo& info, const std::vector<TensorView>& views) {
  std::map<std::string, size_t> by_name;
  for (size_t i = 0; i < views.size(); ++i)
    if (!by_name.emplace(views[i].name, i).second)
      throw PatchError("weights hold tensor '" + views[i].name + "' twice");
  std::vector<size_t> target_of(info.tensors.size());
  for (size_t k = 0; k < info.tensors.size(); ++k) {
    const auto& t = info.tensors[k];
    auto it = by_name.find(t.name);
    if (it == by_name.end())
      throw PatchError("patch tensor '" + t.name + "' is missing from the weights (" + patch_versions(info) +
                       ")");
    const auto& w = views[it->second];
    if (w.dtype != t.dtype)
      throw PatchError("tensor '" + t.name + "': patch dtype " + std::string(dtype_name(t.dtype)) +
                       ", weights " + std::string(dtype_name(w.dtype)));
    if (w.shape != t.shape)
      throw PatchError("tensor '" + t.name + "': patch shape " + shape_string(t.shape) + ", weights shape " +
                       shape_string(w.shape));
    target_of[k] = it->second;
  }
  if (views.size() != info.tensors.size())  // every patch tensor was found: some weights tensor is extra
    for (const auto& w : views)
      if (!std::binary_search(info.tensors.begin(), info.tensors.end(), w.name,
                              [](const auto& a, const auto& b) {
                                if constexpr (std::is_same_v<std::decay_t<decltype(a)>, std::string>)
                                  return a < b.name;
                                else
                                  return a.name < b;
                              }))
        throw PatchError("weights tensor '" + w.name + "' is not in the patch (" + patch_versions(info) +
                         ")");
  return target_of;
}

void check_target_root_table(const PatchInfo& info, const std::vector<size_t>& target_of,
                             const std::vector<TensorView>& views) {
  // The header's target root must be the root of its own tensor table (the header checksum is no
  // signature): a caller that derives its root from the table after apply (WorkerReplica) must not be
  // told another one. Checked before the weights are touched, and before a no-op answer.
  std::vector<uint64_t> table_hashes(views.size(), 0);
  for (size_t k = 0; k < info.tensors.size(); ++k) table_hashes[target_of[k]] = info.tensors[k].target_hash;
  if (root_hash(views, table_hashes) != info.target_root_hash)
    throw PatchError("patch header: target root " + hash_hex(info.target_root_hash) +
                     " is not the root hash of its tensor table (" + patch_versions(info) + ")");
}

bool check_patch_roots(const PatchInfo& info, const std::vector<size_t>& target_of,
                       const std::vector<TensorView>& views, const std::vector<uint64_t>& current,
                       const std::optional<uint64_t>& trusted_root) {
  const bool trusted = trusted_root.has_value();
  check_target_root_table(info, target_of, views);
  const uint64_t root = trusted ? *trusted_root : root_hash(views, current);
  if (root == info.target_root_hash) {
    bool all = true;
    for (size_t k = 0; k < info.tensors.size() && !trusted; ++k)
      all = all && current[target_of[k]] == info.tensors[k].target_hash;
    if (all) return true;
  }
  if (!info.anchor && root != info.base_root_hash)
    throw PatchError("patch base mismatch: the patch goes from " + patch_versions(info) +
                     ", but the weights have " + (trusted ? "the trusted root " : "root ") + hash_hex(root) +
                     " (neither the base nor the target)");
  for (size_t k = 0; k < info.tensors.size(); ++k) {
    const auto& t = info.tensors[k];
    if (t.changed == 0 && t.index_coding != kIndexDense && current[target_of[k]] != t.target_hash)
      throw PatchError("patch tensor '" + t.name +
                       "' is unchanged but its target hash differs from the base (" + patch_versions(info) +
                       ")");
  }
  return false;
}

}  // namespace pulse::sync
