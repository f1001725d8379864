// The checks every apply path (host apply_patch, device apply_patch_cuda) makes between parsing a patch
// and touching the weights: FORMAT.md, "Hashes". One copy, so the CPU and GPU paths refuse the same
// patches with the same messages.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sync/patch.h"
#include "sync/io/tensor_view.h"

namespace pulse::sync {

/// "base version B (root R) -> target version T (root R')", or "anchor -> ..." for error messages.
std::string patch_versions(const PatchInfo& info);

/// Matches the patch's tensors to the weights by name: returns target_of, where target_of[k] is the index in
/// `views` of info.tensors[k]. The weights must be exactly the patch's tensor set with the same dtypes and
/// shapes. Throws PatchError naming the tensor for a name held twice, a patch tensor missing from the
/// weights, a dtype or shape mismatch, or a weights tensor the patch does not have. Pure; thread-safe.
std::vector<size_t> match_patch_tensors(const PatchInfo& info, const std::vector<TensorView>& views);

/// Throws PatchError when the header's target root is not the root hash of its own tensor table (names,
/// dtypes and shapes of `views`, target hashes of the table; target_of as below): FORMAT.md, Apply step 2.
/// check_patch_roots makes this check first; apply_patch also makes it alone before an apply pass that
/// hashes the weights itself. Pure; thread-safe.
void check_target_root_table(const PatchInfo& info, const std::vector<size_t>& target_of,
                             const std::vector<TensorView>& views);

/// Decides, before anything is written (or, in apply_patch without a trusted root, after an apply pass
/// that hashed each block before writing it and that is rolled back unless this returns false), whether a
/// patch may be applied to weights whose tensors are `views` (names, dtypes, shapes; data unused) with tensor
/// hashes `current` (current[i] belongs to views[i]; with a trusted root only the tensors the patch leaves
/// unchanged need to be hashed). target_of[k] is the index in `views` of the patch's k-th tensor. Returns
/// true when the weights already are the target (a no-op), false when the patch applies. Throws PatchError
/// when the header's target root is not the root of its own tensor table, when the weights are neither the
/// base nor the target, or when a tensor the patch leaves unchanged differs from its target hash. Pure;
/// thread-safe.
bool check_patch_roots(const PatchInfo& info, const std::vector<size_t>& target_of,
                       const std::vector<TensorView>& views, const std::vector<uint64_t>& current,
                       const std::optional<uint64_t>& trusted_root);

}  // namespace pulse::sync
