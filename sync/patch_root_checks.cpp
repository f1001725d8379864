#include "sync/patch_root_checks.h"

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

bool check_patch_roots(const PatchInfo& info, const std::vector<size_t>& target_of,
                       const std::vector<TensorView>& views, const std::vector<uint64_t>& current,
                       const std::optional<uint64_t>& trusted_root) {
  const bool trusted = trusted_root.has_value();
  const uint64_t root = trusted ? *trusted_root : root_hash(views, current);
  // The header's target root must be the root of its own tensor table (the header checksum is no
  // signature): a caller that derives its root from the table after apply (WorkerReplica) must not be
  // told another one. Checked before the weights are touched, and before a no-op answer.
  std::vector<uint64_t> table_hashes(views.size(), 0);
  for (size_t k = 0; k < info.tensors.size(); ++k) table_hashes[target_of[k]] = info.tensors[k].target_hash;
  if (root_hash(views, table_hashes) != info.target_root_hash)
    throw PatchError("patch header: target root " + hash_hex(info.target_root_hash) +
                     " is not the root hash of its tensor table (" + patch_versions(info) + ")");
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
