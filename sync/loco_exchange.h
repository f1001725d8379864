// PULSELoCo round contributions: the wire codec of the sparse pseudo-gradient entries one trainer rank
// sends at the end of a DiLoCo round, and the rank-ordered summation of all ranks' contributions.
//
// A rank's contribution lists, per tensor of a model-wide tensor table (same names, numel and order on
// every rank), the element indices that fired (strictly ascending uint32, < numel) and their values:
// FP32 (LocoValues::Fp32), or signed counts of each weight's BF16 step (LocoValues::Ulp,
// kernels/loco_ulp.h: zigzag LEB128, raw or zstd, with FP32 escapes). Indices are coded with the
// sync/index_coding.h codecs (varint gaps, bitmap or dense, chosen per tensor by size), values are raw
// little-endian FP32 or zstd (optionally of the byte planes) when that is smaller; every stream is sized
// exactly, nothing is padded to the largest rank. Byte layout: sync/LOCO_FORMAT.md.
//
// Decoding validates everything before a caller can sum anything: magic, version, size, checksum,
// source rank, world size, round, tensor table hash, every size and offset, every index (bounds, strict
// order), value counts, finiteness. Any failure throws LocoError.
//
// Thread safety: every function here is reentrant and keeps no state between calls (zstd contexts come
// from the process-wide pool of sync/zstd_context.h); concurrent calls on distinct outputs are safe.
// Inputs are only read. Plain C++17, no LibTorch.
#pragma once
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "sync/loco_values.h"

namespace pulse::sync {

/// Wire format version written by encode_loco_contribution (sync/LOCO_FORMAT.md). The decoder reads this
/// version and version 1 (FP32 values only; its header field 12, flags = 0, is version 2's value mode).
constexpr uint32_t kLocoFormatVersion = 2;
/// The oldest version the decoder still reads.
constexpr uint32_t kLocoFormatVersionOldest = 1;

/// Any rejected contribution (bad magic/version/size/checksum, wrong rank/world size/round/tensor
/// table, a stream running out of the buffer, an index out of range or not ascending, a count
/// mismatch, a non-finite value). what() reads "PULSELoCo contribution from rank R, round N[, tensor
/// 'NAME'] at byte B: <reason>"; the fields are also available separately. `source_rank` and `round`
/// are the values the caller expected (the buffer's own may be the corrupt part).
struct LocoError : std::runtime_error {
  LocoError(uint32_t source_rank, uint64_t round, std::string tensor, uint64_t byte_offset,
            const std::string& reason);
  uint32_t source_rank;  ///< rank the buffer was received from (the caller's expectation)
  uint64_t round;        ///< round the caller expected
  std::string tensor;    ///< tensor name, empty for header-level errors
  uint64_t byte_offset;  ///< byte offset in the buffer where the offending field or stream starts
  std::string reason;    ///< the reason alone, without the prefix
};

/// One tensor of the model-wide table. numel in [0, 2^32] (indices are uint32).
struct LocoTensorSpec {
  std::string name;  ///< e.g. "model.layers.0.mlp.up_proj.weight"
  uint64_t numel = 0;
};

/// XXH3-64 (seed 0) of the tensor table as the u64 little-endian sequence: n_tensors, then per tensor
/// name length, the name bytes (raw, unpadded), numel. Order matters (the table order is the wire
/// order). Catches ranks that disagree on names, sizes or order.
uint64_t loco_table_hash(const std::vector<LocoTensorSpec>& table);

/// The fired entries of one tensor, borrowed from the caller: `count` indices (uint32, strictly
/// ascending, each < the tensor's numel) and `count` FP32 values (finite). Ulp contributions also need
/// `counts`: per entry a nonzero step count with |c| <= kernels::kLocoUlpMaxCount, or
/// kernels::kLocoUlpEscape, whose FP32 value is values[j] (values is read only at escapes). Pointers may
/// be null when count is 0.
struct LocoFiredView {
  const uint32_t* indices = nullptr;
  const float* values = nullptr;
  uint64_t count = 0;
  const int32_t* counts = nullptr;  ///< LocoValues::Ulp only
};

/// Encoder settings.
struct LocoEncodeOptions {
  /// zstd level (1..19) tried for index and value streams; a compressed stream is kept only when it is
  /// strictly smaller than the raw one. 0 = never compress (raw streams only).
  int zstd_level = 1;
  /// Threads encoding tensors in parallel (0 = all hardware threads). The output does not depend on it.
  int threads = 1;
  /// Value mode written (header field value_mode); Ulp reads LocoFiredView::counts.
  LocoValues values = LocoValues::Fp32;
};

/// Encodes one rank's round contribution. `fired[t]` belongs to `table[t]` (same size). Output: the
/// whole buffer, exactly as sent (sync/LOCO_FORMAT.md); deterministic for the same inputs and options.
/// Per tensor the index coding is the one with the smallest stored size among varint gaps, bitmap and
/// dense (dense only when every element fired; ties prefer gaps, then bitmap), each stored raw or as
/// zstd when smaller; values are stored as raw FP32 LE, zstd of the raw bytes or zstd of the 4 byte
/// planes, whichever is smallest (raw on ties). A tensor with nothing fired costs 2 header bytes.
/// Throws std::invalid_argument (naming the tensor) for world_size 0, rank >= world_size, a size
/// mismatch, numel > 2^32, indices not strictly ascending or >= numel, non-finite values, or a null
/// pointer with count > 0; std::runtime_error if zstd fails.
std::vector<uint8_t> encode_loco_contribution(uint32_t rank, uint32_t world_size, uint64_t round,
                                              const std::vector<LocoTensorSpec>& table,
                                              const std::vector<LocoFiredView>& fired,
                                              const LocoEncodeOptions& options = {});

/// Index coding of a tensor on the wire (values of IndexCoding in sync/index_coding.h).
enum class LocoIndexCoding : uint8_t { VarintGaps = 0, Bitmap = 1, Dense = 2 };

/// Stored form of a stream: raw bytes, or one zstd frame of the raw bytes, or (values only) the 4 byte
/// planes of the FP32 values (plane b = byte b, little-endian, of every value; plane 3 holds the sign
/// and the high exponent bits, which compress, planes 0-1 the low mantissa bits, which do not), each
/// plane stored raw or as its own zstd frame.
enum class LocoStreamCodec : uint8_t { Raw = 0, Zstd = 1, BytePlanes = 2 };

/// Per-tensor part of a contribution's header. In a Ulp contribution `value_codec` is the count stream's
/// codec (Raw or Zstd), value_offset its start, value_stored_bytes = count_stored_bytes + 4 * escapes.
struct LocoTensorInfo {
  LocoIndexCoding index_coding = LocoIndexCoding::VarintGaps;
  LocoStreamCodec index_codec = LocoStreamCodec::Raw;  ///< Raw or Zstd
  LocoStreamCodec value_codec = LocoStreamCodec::Raw;
  uint64_t count = 0;               ///< fired entries
  uint64_t index_raw_bytes = 0;     ///< index stream before compression (0 for dense or count 0)
  uint64_t index_stored_bytes = 0;  ///< bytes on the wire
  uint64_t value_stored_bytes = 0;  ///< bytes on the wire (raw: 4 * count; planes: the sum of the planes)
  uint8_t plane_zstd_mask = 0;      ///< BytePlanes: bit b set when plane b is zstd (else count raw bytes)
  uint64_t plane_stored_bytes[4] = {0, 0, 0, 0};  ///< BytePlanes: bytes of each plane on the wire
  uint64_t index_offset = 0;                      ///< byte offset of the stored index stream in the buffer
  uint64_t value_offset = 0;                      ///< byte offset of the stored value stream in the buffer
  uint64_t count_raw_bytes = 0;                   ///< Ulp: zigzag LEB128 count stream before compression
  uint64_t count_stored_bytes = 0;                ///< Ulp: count stream on the wire
  uint64_t escapes = 0;                           ///< Ulp: entries coded 0 (FP32 escapes)
  uint64_t escape_offset = 0;                     ///< Ulp: byte offset of the raw FP32 escape stream
};

/// The header of a contribution, as inspect_loco_contribution reads it.
struct LocoContributionInfo {
  uint32_t version = 0;  ///< format_version of the buffer (1 or 2)
  LocoValues values = LocoValues::Fp32;
  uint32_t rank = 0, world_size = 0;
  uint64_t round = 0;
  uint64_t table_hash = 0;
  std::vector<LocoTensorInfo> tensors;  ///< in table order
  uint64_t total_bytes = 0;             ///< whole buffer
  uint64_t header_bytes = 0;            ///< fixed header + tensor entries (payload starts here)
  uint64_t payload_bytes = 0;           ///< all stored streams
  uint64_t fired = 0;                   ///< sum of count
};

/// A decoded, fully validated contribution: per tensor (table order) the fired indices (strictly
/// ascending, < numel) and their finite FP32 values, bit for bit as encoded (-0 and subnormals kept);
/// for Ulp also their counts.
struct LocoContribution {
  LocoValues values = LocoValues::Fp32;
  uint32_t rank = 0, world_size = 0;
  uint64_t round = 0;
  struct Tensor {
    std::vector<uint32_t> indices;
    std::vector<float> values;    ///< values[j] belongs to indices[j]; Ulp: the escape's FP32 value, else 0
    std::vector<int32_t> counts;  ///< Ulp only: counts[j] != 0, or kernels::kLocoUlpEscape; Fp32: empty
  };
  std::vector<Tensor> tensors;
};

/// Validates and decodes a contribution received from `source_rank`. The buffer must say it comes
/// from `source_rank` of a group of `world_size` ranks, for `round`, over a tensor table whose
/// loco_table_hash equals that of `table` (and with table.size() tensors). Checks, in order: magic,
/// version, declared total size == size, checksum, rank, world size, round, table hash, every tensor
/// entry (codings known, sizes consistent, streams inside the buffer and contiguous, no trailing
/// bytes), then per tensor: decompression to exactly the declared size, the index stream
/// (validate_index_stream: bounds, strict order, no trailing bytes, bitmap popcount), every value
/// finite; for Ulp the count stream (count codes, each |c| <= kLocoUlpMaxCount, zeros == escapes).
/// The buffer's value mode must be `values` (a version 1 buffer is Fp32). Throws LocoError naming
/// source_rank, round, the tensor and the byte offset (std::invalid_argument when source_rank >=
/// world_size); never reads outside [data, data + size). Returns only when everything passed.
LocoContribution decode_loco_contribution(const uint8_t* data, size_t size, uint32_t source_rank,
                                          uint32_t world_size, uint64_t round,
                                          const std::vector<LocoTensorSpec>& table,
                                          LocoValues values = LocoValues::Fp32);

/// Reads and checks the header of a contribution (magic, version, size, checksum, entries, sizes and
/// offsets inside the buffer) without checking rank/round/table or decoding streams; for byte
/// accounting and debugging. `source_rank` and `round` only label errors. Throws LocoError.
LocoContributionInfo inspect_loco_contribution(const uint8_t* data, size_t size, uint32_t source_rank = 0,
                                               uint64_t round = 0);

/// A dense FP32 per-tensor sum buffer owned by the caller: `numel` floats at `data`. Ulp sums also read
/// `global`: the round-start FP32 global weights of the tensor (numel floats), whose BF16 steps
/// (kernels/loco_ulp.h) scale the summed counts.
struct LocoSumView {
  float* data = nullptr;
  uint64_t numel = 0;
  const float* global = nullptr;  ///< LocoValues::Ulp only
};

/// Adds a decoded contribution into `sums` (sums[t] belongs to table tensor t): sums[t][i_j] +=
/// v_j in FP32 (round to nearest even), in index order (Ulp: v_j = the value sent, float(c) * step, or
/// the escape). Throws std::invalid_argument when the tensor count differs, a sum buffer is null with
/// numel > 0 (or, Ulp, its global is), or an index is >= its buffer's numel (then nothing has been
/// added). Not thread safe for overlapping sums.
void loco_accumulate(const LocoContribution& contribution, const std::vector<LocoSumView>& sums);

/// Sets every sum to +0.0f, then adds the contributions of ranks 0, 1, ..., W-1 in that order
/// (`by_rank[r]` must be rank r's, W = by_rank.size(), every world_size == W, all rounds equal), so
/// that each element is ((0 + c_0) + c_1) + ... + c_{W-1} over the ranks that sent it. FP32 addition is
/// not associative: this fixed order is what makes every rank's sums bit-identical, whatever order the
/// buffers arrived in. (0 + -0 = +0, so an element only ranks sent -0 for sums to +0.)
/// Ulp contributions (all of one value mode): per element the counts are summed exactly in int64
/// (C = c_0 + ... + c_{W-1}, |C| <= W 2^24 < 2^56), the escapes in FP32 in rank order from +0 (E), and
/// the sum is float(C) * step + E: float(C) rounds to nearest even (exact while |C| <= 2^24), the product
/// by the power-of-two step is exact unless it overflows, then one rounded add. Throws
/// std::invalid_argument on a rank/world/round/value-mode/shape mismatch, before any sum is written.
/// `threads` (0 = all) split the work by tensor; the result does not depend on it (each element is still
/// summed by one thread in rank order).
void loco_sum_in_rank_order(const std::vector<LocoContribution>& by_rank,
                            const std::vector<LocoSumView>& sums, int threads = 1);

/// One received buffer (borrowed).
struct LocoBufferView {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

/// Decodes and validates every rank's buffer (buffers[r] from rank r, W = buffers.size()) and only
/// when all passed sums them with loco_sum_in_rank_order. Throws LocoError for the first (lowest rank)
/// bad buffer, leaving `sums` untouched; std::invalid_argument for sum buffers that do not match the
/// table. `threads` (0 = all) decode ranks in parallel and then sum by tensor; the result does not
/// depend on it. Returns the decoded contributions (by rank), e.g. for accounting.
/// `values`: the value mode every buffer must carry.
std::vector<LocoContribution> loco_decode_and_sum(const std::vector<LocoBufferView>& buffers, uint64_t round,
                                                  const std::vector<LocoTensorSpec>& table,
                                                  const std::vector<LocoSumView>& sums, int threads = 1,
                                                  LocoValues values = LocoValues::Fp32);

// ---- byte accounting ---------------------------------------------------------------------------------

/// Dense FP32 size of the table: 4 * sum(numel) bytes (what DiLoCo all-reduces per rank per round).
uint64_t loco_dense_bytes(const std::vector<LocoTensorSpec>& table);

/// Bytes one rank sends in the reference deployment: per tensor t, every rank ships int64 indices and
/// FP32 values padded to the largest rank's count, (8 + 4) * max_r counts[r][t]; summed over tensors.
/// `counts[r][t]` = fired entries of rank r in tensor t (every row the same length). Throws
/// std::invalid_argument for ragged rows.
uint64_t loco_reference_padded_bytes(const std::vector<std::vector<uint64_t>>& counts);

/// The same without padding: (8 + 4) * sum_t counts[t] for one rank's counts (int64 + FP32 per entry).
uint64_t loco_reference_unpadded_bytes(const std::vector<uint64_t>& counts);

/// Fired counts per tensor of a fired set (fired[t].count), e.g. to feed the two functions above.
std::vector<uint64_t> loco_fired_counts(const std::vector<LocoFiredView>& fired);

}  // namespace pulse::sync
