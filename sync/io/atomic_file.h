// Crash-safe file writes: nothing pulse writes (weights, patches, checkpoints, run files) is ever
// left half-written. Write to a temp name in the same folder, fsync it, rename over the target,
// fsync the folder.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace pulse::sync {

/// Writes `size` bytes to `path` atomically. Throws std::runtime_error naming the path and errno text.
void write_file_atomic(const std::string& path, const void* data, size_t size);

/// Convenience overload for text.
inline void write_file_atomic(const std::string& path, std::string_view text) {
  write_file_atomic(path, text.data(), text.size());
}

/// Streams into a temp file through `fill(write)`, where `write(ptr, bytes)` appends; then fsync and
/// rename. On any exception the temp file is removed and `path` is untouched.
void write_file_atomic_stream(const std::string& path,
                              const std::function<void(const std::function<void(const void*, size_t)>&)>& fill);

/// Reads a whole file. Throws std::runtime_error naming the path.
std::string read_file(const std::string& path);

/// fsyncs a directory so that a rename inside it survives a crash. Throws on failure.
void fsync_dir(const std::string& dir);

}  // namespace pulse::sync
