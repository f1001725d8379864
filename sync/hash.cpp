#include "sync/hash.h"

#include <xxhash.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <stdexcept>

#include "kernels/xxh3_tail.h"

namespace pulse::sync {

namespace kx = pulse::kernels;

uint64_t xxh3_64(const void* data, size_t n) {
  return kx::xxh3_64bits(data, n);
}

Xxh3Blocks::Xxh3Blocks(uint64_t len) : len_(len) {
  kx::xxh3_long_init(state_);
  if (len_ >= kx::kXxh3LongMinBytes) tail_offset_ = kx::xxh3_long_tail_offset(len_);
}

void Xxh3Blocks::add(const uint8_t* input, uint64_t end) {
  if (len_ < kx::kXxh3LongMinBytes) return;
  const uint64_t stop =
      std::min(end, kx::xxh3_long_block_bytes(len_)) / kx::kXxh3BlockBytes * kx::kXxh3BlockBytes;
  if (stop <= added_) return;
  kx::xxh3_long_accumulate(state_, input + added_, (stop - added_) / kx::kXxh3BlockBytes);
  added_ = stop;
}

void Xxh3Blocks::save_tail(const uint8_t* input) {
  if (len_ > tail_offset_) std::memcpy(tail_, input + tail_offset_, len_ - tail_offset_);
  saved_ = true;
}

uint64_t Xxh3Blocks::finish(const uint8_t* input) {
  if (len_ < kx::kXxh3LongMinBytes) return XXH3_64bits(input, len_);
  add(input, len_);
  return kx::xxh3_long_finish(state_, input, len_);
}

uint64_t Xxh3Blocks::finish_saved() {
  if (!saved_) throw std::logic_error("Xxh3Blocks::finish_saved without save_tail");
  if (len_ < kx::kXxh3LongMinBytes) return XXH3_64bits(tail_, len_);
  if (added_ != kx::xxh3_long_block_bytes(len_))
    throw std::logic_error("Xxh3Blocks::finish_saved: the blocks were not all added");
  return kx::xxh3_long_finish_tail(state_, tail_, tail_offset_, len_);
}

Xxh3Stream::Xxh3Stream() {
  kx::xxh3_long_init(state_);
}

void Xxh3Stream::update(const void* data, size_t n) {
  constexpr uint64_t kBlock = kx::kXxh3BlockBytes;
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (pending_ + n <= kBlock) {  // may still be the last block: keep it
    if (n) std::memcpy(buffer_ + pending_, p, n);
    pending_ += n;
    return;
  }
  if (pending_) {  // more follows: the buffered block is full and not the last
    const uint64_t fill = kBlock - pending_;
    std::memcpy(buffer_ + pending_, p, fill);
    kx::xxh3_long_accumulate(state_, buffer_, 1);
    std::memcpy(last64_, buffer_ + kBlock - 64, 64);
    p += fill;
    n -= fill;
    pending_ = 0;
  }
  // n >= 1 bytes left: every full block but one that would end the input goes straight from `data`.
  const uint64_t blocks = (n - 1) / kBlock;
  if (blocks) {
    kx::xxh3_long_accumulate(state_, p, blocks);
    std::memcpy(last64_, p + blocks * kBlock - 64, 64);
    p += blocks * kBlock;
    n -= blocks * kBlock;
  }
  std::memcpy(buffer_, p, n);
  pending_ = n;
}

uint64_t Xxh3Stream::digest() const {
  if (total_ < kx::kXxh3LongMinBytes) return XXH3_64bits(buffer_, total_);  // all of it is in buffer_
  kx::Xxh3LongState state = state_;
  if (total_ == pending_) return kx::xxh3_long_finish(state, buffer_, total_);  // one block, unaccumulated
  // The last block's bytes and the 64 before them (XXH3's last stripe may reach back into them).
  uint8_t tail[64 + kx::kXxh3BlockBytes];
  std::memcpy(tail, last64_, 64);
  std::memcpy(tail + 64, buffer_, pending_);
  return kx::xxh3_long_finish_tail(state, tail, total_ - pending_ - 64, total_);
}

void TreeLeaves::add(uint64_t leaf) {
  if (count_++ == 0) first_ = leaf;
  uint8_t bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(leaf >> (8 * i));
  combine_.update(bytes, 8);
}

uint64_t TreeLeaves::digest() const {
  if (count_ == 0) return kx::xxh3_64bits(nullptr, 0);
  return count_ == 1 ? first_ : combine_.digest();
}

TensorHashBlocks::TensorHashBlocks(uint64_t len, HashScheme scheme)
    : len_(len), scheme_(scheme), flat_(len) {}

void TensorHashBlocks::add(const uint8_t* input, uint64_t end) {
  if (scheme_ == HashScheme::Xxh3) return flat_.add(input, end);
  const uint64_t chunks = kx::tree_hash_chunks(len_);
  for (; next_chunk_ < chunks; ++next_chunk_) {
    const uint64_t at = next_chunk_ * kx::kTreeHashChunkBytes;
    const uint64_t bytes = kx::tree_hash_chunk_len(len_, next_chunk_);
    if (at + bytes > end) break;
    tree_.add(kx::xxh3_64bits(input + at, bytes));
  }
}

void TensorHashBlocks::save_tail(const uint8_t* input) {
  if (scheme_ == HashScheme::Xxh3) flat_.save_tail(input);
  saved_ = true;
}

uint64_t TensorHashBlocks::finish(const uint8_t* input) {
  if (scheme_ == HashScheme::Xxh3) return flat_.finish(input);
  add(input, len_);
  return tree_.digest();
}

uint64_t TensorHashBlocks::finish_saved() {
  if (scheme_ == HashScheme::Xxh3) return flat_.finish_saved();
  if (!saved_) throw std::logic_error("TensorHashBlocks::finish_saved without save_tail");
  if (next_chunk_ != kx::tree_hash_chunks(len_))
    throw std::logic_error("TensorHashBlocks::finish_saved: the chunks were not all added");
  return tree_.digest();
}

uint64_t tensor_hash(const TensorView& tensor, HashScheme scheme) {
  return scheme == HashScheme::Tree ? kx::tree_hash64(tensor.data, tensor.nbytes)
                                    : xxh3_64(tensor.data, tensor.nbytes);
}

namespace {
void update_u64(XXH3_state_t* state, uint64_t v) {
  uint8_t bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(v >> (8 * i));  // little-endian on any host
  XXH3_64bits_update(state, bytes, 8);
}
}  // namespace

uint64_t root_hash(const std::vector<TensorView>& tensors, const std::vector<uint64_t>& tensor_hashes) {
  if (tensors.size() != tensor_hashes.size())
    throw std::invalid_argument("root_hash: one hash per tensor needed");
  std::vector<std::pair<const TensorView*, uint64_t>> sorted;
  sorted.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) sorted.emplace_back(&tensors[i], tensor_hashes[i]);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first->name < b.first->name; });
  XXH3_state_t* state = XXH3_createState();
  if (!state) throw std::bad_alloc();
  XXH3_64bits_reset(state);
  update_u64(state, sorted.size());
  for (const auto& [t, h] : sorted) {
    update_u64(state, t->name.size());
    XXH3_64bits_update(state, t->name.data(), t->name.size());
    update_u64(state, static_cast<uint8_t>(t->dtype));
    update_u64(state, t->shape.size());
    for (int64_t d : t->shape) update_u64(state, static_cast<uint64_t>(d));
    update_u64(state, h);
  }
  const uint64_t root = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return root;
}

uint64_t root_hash(const std::vector<TensorView>& tensors) {
  std::vector<uint64_t> hashes;
  hashes.reserve(tensors.size());
  for (const auto& t : tensors) hashes.push_back(tensor_hash(t));
  return root_hash(tensors, hashes);
}

uint64_t xxh3_file(const std::string& path, uint64_t* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open to hash it");
  constexpr size_t kPiece = 4u << 20;
  const auto buf = std::make_unique<char[]>(kPiece);
  auto stream = std::make_unique<Xxh3Stream>();  // ~1 KiB of state: off the stack
  uint64_t total = 0;
  while (in) {
    in.read(buf.get(), kPiece);
    const auto got = static_cast<size_t>(in.gcount());
    if (got == 0) break;
    stream->update(buf.get(), got);
    total += got;
  }
  if (in.bad()) throw std::runtime_error(path + ": read error while hashing it");
  if (bytes) *bytes = total;
  return stream->digest();
}

std::string hash_hex(uint64_t hash) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
  return buf;
}

}  // namespace pulse::sync
