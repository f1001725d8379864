// A checkpoint's MANIFEST.json: the size and XXH3-64 content hash of every file the save wrote, so that
// resuming notices a file that changed after the save (a flipped bit on disk, a partial copy, an edit)
// instead of training on from wrong masters or moments. Written last into the staging folder, before the
// folder is renamed into place (app/run/checkpoints.h), so it always describes the files beside it; a resume
// that rewrites a damaged HF model updates the model's entries in place (atomically).
//   {"format": "pulse-checkpoint-manifest-v1",
//    "files": {"model/model.safetensors": {"bytes": 123, "xxh3": "0123456789abcdef"}, ...}}
// Paths are relative to the checkpoint folder, '/'-separated, sorted; the manifest does not list itself.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace pulse::app {

/// The manifest's file name inside a checkpoint folder.
inline constexpr const char* kCheckpointManifest = "MANIFEST.json";

/// Hashes every regular file under `dir` (recursively; a symlink to a file is listed under its own name
/// and hashed through it; folders are not listed; MANIFEST.json itself excluded) and writes
/// dir/MANIFEST.json atomically (temp file, fsync, rename). Throws std::runtime_error naming the file that
/// cannot be read or written. Reads each file once (sync::xxh3_file).
void write_checkpoint_manifest(const std::string& dir);

/// Re-hashes `files` (paths relative to `dir`) into the existing dir/MANIFEST.json, keeping every other
/// entry as recorded, and writes it atomically. Throws std::runtime_error naming the manifest or file.
void update_checkpoint_manifest(const std::string& dir, const std::vector<std::string>& files);

/// One file that does not match what the manifest recorded.
struct ManifestMismatch {
  std::string file;       ///< relative path, as in the manifest
  std::string problem;    ///< e.g. "xxh3 1234.. over 812 bytes, the manifest recorded abcd.. over 812 bytes"
  bool unlisted = false;  ///< a file the manifest does not list: added after the save
};

/// The checkpoint's subfolder whose reader finds files by their presence (model.safetensors.index.json
/// wins over model.safetensors, a tokenizer beside the model is picked up): a file there that the
/// manifest does not list is a mismatch. Elsewhere files are read by name, and unlisted ones are inert.
inline constexpr const char* kManifestClosedFolder = "model";

/// Whether the file at `path` is (or is meant to be) a pulse checkpoint manifest: JSON whose "format"
/// names pulse's manifest (any version), or a file that is not JSON at all (taken as a damaged one).
/// Another tool's JSON file that is also named MANIFEST.json is not. Never throws for unreadable input.
bool is_checkpoint_manifest(const std::string& path);

/// Checks every file the manifest of `dir` lists against its recorded size and hash, and finds the
/// regular files under kManifestClosedFolder that it does not list (`unlisted`; other unlisted files are
/// ignored). Returns the mismatches, empty when all match. Sets *has_manifest (when given) to whether
/// dir/MANIFEST.json exists; without one (a checkpoint saved before manifests existed) nothing is checked
/// and the result is empty. A listed file that is missing, not a regular file or unreadable is a
/// mismatch. Throws std::runtime_error naming MANIFEST.json and the field when the manifest itself is
/// malformed (bad JSON, wrong format, a path that is not plain and inside the folder).
/// `under` (a subfolder name, e.g. "model"; empty = all): only the entries below it are hashed (every
/// entry's path is still checked for form).
std::vector<ManifestMismatch> check_checkpoint_manifest(const std::string& dir, bool* has_manifest = nullptr,
                                                        const std::string& under = "");

}  // namespace pulse::app
