// safetensors reader (mmap) and writer (atomic), single file and sharded HF checkpoints.
// Format: https://github.com/huggingface/safetensors (8-byte LE header length, JSON header, data).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sync/tensor_view.h"

namespace pulse::sync {

/// One memory-mapped .safetensors file. The header is validated on open: length sane and within the
/// file, JSON well formed, known dtypes, data_offsets in range, sized numel*dtype_size, non-overlapping.
/// Errors throw std::runtime_error naming the file, tensor and byte offset. Move-only; views stay valid
/// while the object lives.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::string& path);
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  ~SafetensorsFile();

  const std::vector<TensorView>& tensors() const;              ///< in file data order
  const std::map<std::string, std::string>& metadata() const;  ///< "__metadata__"
  const std::string& path() const;

 private:
  struct Impl;
  explicit SafetensorsFile(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// A checkpoint: a .safetensors file, or an HF folder with model.safetensors or a sharded
/// model.safetensors.index.json. Tensors are sorted by name.
class Checkpoint {
 public:
  static Checkpoint open(const std::string& path);
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const TensorView* find(const std::string& name) const;  ///< nullptr when absent
  /// "__metadata__" of the checkpoint: a single file's, or the shards' merged (the first shard in
  /// file-name order wins a key that several shards set differently).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::string> metadata_;
  std::vector<TensorView> tensors_;
};

/// Writes tensors (any order; written in the given order, header padded to 8 bytes) to `path`
/// atomically (temp file, fsync, rename). Throws std::runtime_error naming the path.
void write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace pulse::sync
