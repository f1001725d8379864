// safetensors reader (mmap) and writer (atomic), single file and sharded HF checkpoints.
// Format: https://github.com/huggingface/safetensors (8-byte LE header length, JSON header, data).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sync/io/tensor_view.h"

namespace pulse::sync {

/// One memory-mapped .safetensors file. The header is validated on open: length sane and within the
/// file, JSON well formed (no key twice), known dtypes, data_offsets in range and sized
/// numel*dtype_size. Move-only; views stay valid while the object lives.
///
/// Header length (the first 8 bytes, little-endian): at most 100 MiB and at most file size - 8. A
/// violation is an error that names both the length and the file size.
///
/// Layout policy (strict, as the reference implementation's `validate`): the tensors' byte ranges,
/// sorted by offset, must tile the data section (the bytes after the header) exactly. Each of these is
/// refused, never skipped or warned about:
///  - overlap: two tensors share bytes;
///  - leading gap: the first tensor does not start at data offset 0;
///  - hole: bytes between one tensor's end and the next tensor's begin;
///  - trailing bytes: bytes after the last tensor's end (or any data bytes in a file with no tensors).
/// A gap can hide data that a reader ignores but another tool may not (or a truncated/concatenated
/// file), so pulse reads only files whose every byte is accounted for; every file pulse writes, and
/// every file written by the HF `safetensors` library, satisfies it. Zero-sized tensors ([x, x]) are
/// allowed where they do not break the tiling. The padding spaces allowed at the end of the JSON
/// header are part of the header, not of the data section.
///
/// Every error throws std::runtime_error naming the file and the offending tensor(s) and byte range
/// (as data-section offsets and as absolute file offsets).
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
/// model.safetensors.index.json. Tensors are sorted by name. open() throws std::runtime_error naming the
/// path when it is neither (for a pulse run's step-N folder the message points at its model/ folder).
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
