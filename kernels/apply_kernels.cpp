#include "kernels/apply_kernels.h"

#include <algorithm>
#include <cstring>

#include "kernels/byte_tables.h"
#include "kernels/cpu_features.h"
#include "kernels/int_coding.h"
#include "kernels/x86_simd.h"

namespace pulse::kernels {

namespace {

constexpr uint64_t kBlockBytes = 64 << 10;  // hashing granularity of apply (sync/FORMAT.md, Apply step 6)
constexpr uint64_t kBlockElems = kBlockBytes / 2;

/// All ones in the low `count` bits (count <= 64).
inline uint64_t low_bits(size_t count) {
  return count >= 64 ? ~uint64_t{0} : (uint64_t{1} << count) - 1;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Portable kernels: the reference every SIMD path must match.

HeadSums varint_head_sums_portable(const uint8_t* head, uint64_t n) {
  HeadSums s;
  uint64_t i = 0;
  // SWAR, 8 heads per word: the low 7 bits summed in four 16-bit lanes (at most 2 x 127 per word, so
  // 256 words fit a lane), the flags by popcount.
  constexpr uint64_t kLow = 0x007f007f007f007full, kFlags = 0x8080808080808080ull;
  while (i + 8 <= n) {
    uint64_t lanes = 0;
    const uint64_t stop = std::min(n - (n - i) % 8, i + 256 * 8);
    for (; i < stop; i += 8) {
      uint64_t x;
      std::memcpy(&x, head + i, 8);
      lanes += (x & kLow) + ((x >> 8) & kLow);
      s.flagged += static_cast<uint64_t>(__builtin_popcountll(x & kFlags));
    }
    s.low7 += (lanes & 0xffff) + ((lanes >> 16) & 0xffff) + ((lanes >> 32) & 0xffff) + (lanes >> 48);
  }
  for (; i < n; ++i) {
    s.low7 += head[i] & 127u;
    s.flagged += head[i] >> 7;
  }
  return s;
}

GapBatch decode_gap_batch_portable(const uint8_t* head, const uint8_t* tail, const uint8_t* tail_end,
                                   size_t count, uint16_t* gap1) {
  // Branch-free: at 1% density a quarter of the gaps have a tail, at random.
  const uint8_t* t = tail;
  uint32_t sum = 0, bad = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint32_t h = head[i];
    const uint32_t more = h >> 7;
    const uint32_t b = t < tail_end ? *t : 0x80u;  // a missing tail byte counts as a long tail
    bad |= more & (b >> 7);
    const uint32_t g = ((h & 127u) | ((b & 127u) << 7 & (0u - more))) + 1;
    t += more;
    gap1[i] = static_cast<uint16_t>(g);
    sum += g;
  }
  GapBatch r;
  if (bad) return r;
  r.ok = true;
  r.tail_bytes = static_cast<uint32_t>(t - tail);
  r.sum = sum;
  return r;
}

void assemble_u16_values_portable(const uint8_t* lo, const uint8_t* hi, size_t count, bool delta,
                                  uint16_t* out) {
  for (size_t i = 0; i < count; ++i) {
    const uint16_t z = static_cast<uint16_t>(lo[i] | hi[i] << 8);
    out[i] = delta ? static_cast<uint16_t>((z >> 1) ^ (0u - (z & 1u))) : z;
  }
}

// ---------------------------------------------------------------------------------------------------
// x86-64 kernels, compiled for their ISA by target attributes and picked at run time.

#ifdef PULSE_KERNELS_X86
namespace {

#define PULSE_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi2,bmi,bmi2,popcnt")))
#define PULSE_AVX2 __attribute__((target("avx2,popcnt")))
/// What PULSE_AVX512 / PULSE_AVX2 assume of the CPU.
constexpr CpuFeatures kNeedsAvx512 =
    kCpuAvx512F | kCpuAvx512BW | kCpuAvx512VL | kCpuAvx512Vbmi2 | kCpuBmi | kCpuBmi2 | kCpuPopcnt;
constexpr CpuFeatures kNeedsAvx2 = kCpuAvx2 | kCpuPopcnt;

// (Own reductions: GCC 12's _mm512_reduce_* warn about an uninitialized temporary under -Wall.)
PULSE_AVX512 inline uint64_t sum_u64_lanes(__m512i v) {
  alignas(64) uint64_t a[8];
  _mm512_store_si512(a, v);
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

PULSE_AVX512 inline uint32_t sum_u32_lanes(__m512i v) {
  alignas(64) uint32_t a[16];
  _mm512_store_si512(a, v);
  uint32_t s = 0;
  for (uint32_t x : a) s += x;
  return s;
}

PULSE_AVX512 HeadSums head_sums_avx512(const uint8_t* head, uint64_t n) {
  const __m512i low = _mm512_set1_epi8(127), flag = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i zero = _mm512_setzero_si512();
  __m512i sum_low = zero, sum_flag = zero;  // per 64-bit lane: sums of 8 bytes each step (SAD)
  uint64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    const __m512i v = _mm512_loadu_si512(head + i);
    sum_low = _mm512_add_epi64(sum_low, _mm512_sad_epu8(_mm512_and_si512(v, low), zero));
    sum_flag = _mm512_add_epi64(sum_flag, _mm512_sad_epu8(_mm512_and_si512(v, flag), zero));
  }
  if (i < n) {
    const __m512i v = _mm512_maskz_loadu_epi8(_bzhi_u64(~0ull, static_cast<unsigned>(n - i)), head + i);
    sum_low = _mm512_add_epi64(sum_low, _mm512_sad_epu8(_mm512_and_si512(v, low), zero));
    sum_flag = _mm512_add_epi64(sum_flag, _mm512_sad_epu8(_mm512_and_si512(v, flag), zero));
  }
  HeadSums s;
  s.low7 = sum_u64_lanes(sum_low);
  s.flagged = sum_u64_lanes(sum_flag) >> 7;
  return s;
}

PULSE_AVX512 GapBatch decode_gap_batch_avx512(const uint8_t* head, const uint8_t* tail,
                                              const uint8_t* tail_end, size_t count, uint16_t* gap1) {
  // Two halves of 32 changes, each in 256-bit registers widened to 16-bit lanes (masked loads never
  // fault past count or past the tail).
  const uint64_t valid = _bzhi_u64(~0ull, static_cast<unsigned>(count));
  const __m512i one = _mm512_set1_epi16(1);
  __m512i total = _mm512_setzero_si512();
  size_t used = 0;  // tail bytes taken by the first half
  const size_t avail = static_cast<size_t>(tail_end - tail);
  for (int half = 0; half < 2; ++half) {
    const __mmask32 lanes = static_cast<__mmask32>(valid >> (32 * half));
    const __m256i h = _mm256_maskz_loadu_epi8(lanes, head + 32 * half);
    const __mmask32 more = _mm256_movepi8_mask(h);
    const unsigned flagged = static_cast<unsigned>(_mm_popcnt_u32(more));
    __m256i t = _mm256_setzero_si256();
    if (flagged) {
      // The half's tails are its next `flagged` tail bytes when each is one byte long (bit 7 clear):
      // spread them to the lanes of the heads that have one (register-form expand: the memory form is
      // microcoded on Zen 4).
      if (avail - used < flagged) return GapBatch{};
      const size_t take = std::min<size_t>(avail - used, 32);
      const __m256i bytes = _mm256_maskz_loadu_epi8(
          static_cast<__mmask32>(_bzhi_u64(~0ull, static_cast<unsigned>(take))), tail + used);
      if (_mm256_movepi8_mask(bytes) & _bzhi_u32(~0u, flagged)) return GapBatch{};
      t = _mm256_maskz_expand_epi8(more, bytes);
      used += flagged;
    }
    const __m512i l16 = _mm512_cvtepu8_epi16(_mm256_and_si256(h, _mm256_set1_epi8(127)));
    const __m512i t16 = _mm512_cvtepu8_epi16(t);
    // Lanes past count become 0, so they add nothing to the sum.
    const __m512i g = _mm512_maskz_add_epi16(lanes, _mm512_or_si512(l16, _mm512_slli_epi16(t16, 7)), one);
    _mm512_storeu_si512(gap1 + 32 * half, g);
    total = _mm512_add_epi32(total, _mm512_madd_epi16(g, one));
  }
  GapBatch r;
  r.ok = true;
  r.tail_bytes = static_cast<uint32_t>(used);
  r.sum = sum_u32_lanes(total);
  return r;
}

PULSE_AVX512 void assemble_u16_values_avx512(const uint8_t* lo, const uint8_t* hi, size_t count, bool delta,
                                             uint16_t* out) {
  const uint64_t valid = _bzhi_u64(~0ull, static_cast<unsigned>(count));
  const __m512i one = _mm512_set1_epi16(1);
  for (int half = 0; half < 2; ++half) {
    const __mmask32 lanes = static_cast<__mmask32>(valid >> (32 * half));
    const __m512i l16 = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(lanes, lo + 32 * half));
    const __m512i h16 = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(lanes, hi + 32 * half));
    __m512i z = _mm512_or_si512(l16, _mm512_slli_epi16(h16, 8));
    if (delta)  // unzigzag: (z >> 1) ^ -(z & 1)
      z = _mm512_xor_si512(_mm512_srli_epi16(z, 1),
                           _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_and_si512(z, one)));
    _mm512_storeu_si512(out + 32 * half, z);
  }
}

PULSE_AVX2 HeadSums head_sums_avx2(const uint8_t* head, uint64_t n) {
  const __m256i low = _mm256_set1_epi8(127), flag = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i zero = _mm256_setzero_si256();
  __m256i sum_low = zero, sum_flag = zero;
  uint64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + i));
    sum_low = _mm256_add_epi64(sum_low, _mm256_sad_epu8(_mm256_and_si256(v, low), zero));
    sum_flag = _mm256_add_epi64(sum_flag, _mm256_sad_epu8(_mm256_and_si256(v, flag), zero));
  }
  alignas(32) uint64_t a[4], b[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(a), sum_low);
  _mm256_store_si256(reinterpret_cast<__m256i*>(b), sum_flag);
  HeadSums s = varint_head_sums_portable(head + i, n - i);
  s.low7 += a[0] + a[1] + a[2] + a[3];
  s.flagged += (b[0] + b[1] + b[2] + b[3]) >> 7;
  return s;
}

/// AVX2 has no byte expand: each 8-head sub-batch spreads its one-byte tails to the lanes of the heads
/// that have one with a pshufb control indexed by its 8-bit flag mask (kernels/byte_tables.h), reading
/// 8 tail bytes from the sub-batch's first one. Partial batches, and full ones within 8 bytes of the
/// tail stream's end (those loads must stay inside it), take the portable kernel.
PULSE_AVX2 GapBatch decode_gap_batch_avx2(const uint8_t* head, const uint8_t* tail, const uint8_t* tail_end,
                                          size_t count, uint16_t* gap1) {
  if (count != kGapBatch) return decode_gap_batch_portable(head, tail, tail_end, count, gap1);
  const __m256i h0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(head));
  const __m256i h1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(head + 32));
  const uint64_t flags = static_cast<uint32_t>(_mm256_movemask_epi8(h0)) |
                         static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(h1))) << 32;
  const uint32_t flagged = static_cast<uint32_t>(_mm_popcnt_u64(flags));
  const __m256i one = _mm256_set1_epi16(1);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i low7 = _mm256_set1_epi8(127);
  if (flagged == 0) {  // no tails (nearly every batch at ~7% density)
    const __m256i hv[2] = {h0, h1};
    for (int k = 0; k < 4; ++k) {
      const __m128i part = k & 1 ? _mm256_extracti128_si256(hv[k / 2], 1) : _mm256_castsi256_si128(hv[k / 2]);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(gap1 + 16 * k),
                          _mm256_add_epi16(_mm256_cvtepu8_epi16(part), one));
    }
    const __m256i s = _mm256_add_epi64(_mm256_sad_epu8(h0, zero), _mm256_sad_epu8(h1, zero));
    alignas(32) uint64_t a[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(a), s);
    GapBatch r;
    r.ok = true;
    r.tail_bytes = 0;
    r.sum = static_cast<uint32_t>(a[0] + a[1] + a[2] + a[3] + kGapBatch);
    return r;
  }
  if (static_cast<uint64_t>(tail_end - tail) < uint64_t{flagged} + 8)
    return decode_gap_batch_portable(head, tail, tail_end, count, gap1);
  // Tails of sub-batches 2 q and 2 q + 1 in the 16 bytes of spread[q] (0 where a head has none).
  __m128i spread[4];
  const uint8_t* t = tail;
  for (int q = 0; q < 4; ++q) {
    __m128i part[2];
    for (int e = 0; e < 2; ++e) {
      const unsigned f = static_cast<unsigned>(flags >> (16 * q + 8 * e)) & 255u;
      part[e] = _mm_shuffle_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(t)),
                                 _mm_loadl_epi64(reinterpret_cast<const __m128i*>(tables::kExpand8.ctrl[f])));
      t += _mm_popcnt_u32(f);
    }
    spread[q] = _mm_unpacklo_epi64(part[0], part[1]);
  }
  // A used tail byte with bit 7 set: that gap's tail is 2+ bytes long.
  if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(spread[0], spread[1]), _mm_or_si128(spread[2], spread[3]))))
    return GapBatch{};
  const __m256i hv[2] = {_mm256_and_si256(h0, low7), _mm256_and_si256(h1, low7)};
  __m256i total = zero;
  for (int k = 0; k < 4; ++k) {
    const __m128i part = k & 1 ? _mm256_extracti128_si256(hv[k / 2], 1) : _mm256_castsi256_si128(hv[k / 2]);
    const __m256i g = _mm256_add_epi16(
        _mm256_or_si256(_mm256_cvtepu8_epi16(part), _mm256_slli_epi16(_mm256_cvtepu8_epi16(spread[k]), 7)),
        one);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(gap1 + 16 * k), g);
    total = _mm256_add_epi32(total, _mm256_madd_epi16(g, one));
  }
  alignas(32) uint32_t a[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(a), total);
  GapBatch r;
  r.ok = true;
  r.tail_bytes = flagged;
  r.sum = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
  return r;
}

PULSE_AVX2 void assemble_u16_values_avx2(const uint8_t* lo, const uint8_t* hi, size_t count, bool delta,
                                         uint16_t* out) {
  if (count != kGapBatch) return assemble_u16_values_portable(lo, hi, count, delta, out);
  const __m256i one = _mm256_set1_epi16(1);
  for (int k = 0; k < 4; ++k) {
    const __m256i l16 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lo + 16 * k)));
    const __m256i h16 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hi + 16 * k)));
    __m256i z = _mm256_or_si256(l16, _mm256_slli_epi16(h16, 8));
    if (delta)
      z = _mm256_xor_si256(_mm256_srli_epi16(z, 1),
                           _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_and_si256(z, one)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 16 * k), z);
  }
}

}  // namespace
#endif  // PULSE_KERNELS_X86

// ---------------------------------------------------------------------------------------------------
// Dispatch.

namespace {

struct Kernels {
  HeadSums (*head_sums)(const uint8_t*, uint64_t);
  GapBatch (*decode)(const uint8_t*, const uint8_t*, const uint8_t*, size_t, uint16_t*);
  void (*assemble)(const uint8_t*, const uint8_t*, size_t, bool, uint16_t*);
  const char* isa;
};

constexpr Kernels kPortable{varint_head_sums_portable, decode_gap_batch_portable,
                            assemble_u16_values_portable, "portable"};

/// The kernels this CPU can run, fastest first (the portable ones last), and the forced ones.
VariantSelector<Kernels, 3>& selector() {
  static VariantSelector<Kernels, 3> s([](auto add) {
#ifdef PULSE_KERNELS_X86
    if (cpu_has(kNeedsAvx512))
      add(Kernels{head_sums_avx512, decode_gap_batch_avx512, assemble_u16_values_avx512, "avx512"});
    if (cpu_has(kNeedsAvx2))
      add(Kernels{head_sums_avx2, decode_gap_batch_avx2, assemble_u16_values_avx2, "avx2"});
#endif
    add(kPortable);
  });
  return s;
}

const Kernels& kernels() {
  return selector().current();
}

}  // namespace

HeadSums varint_head_sums(const uint8_t* head, uint64_t n) {
  return kernels().head_sums(head, n);
}

GapBatch decode_gap_batch(const uint8_t* head, const uint8_t* tail, const uint8_t* tail_end, size_t count,
                          uint16_t* gap1) {
  return kernels().decode(head, tail, tail_end, count, gap1);
}

void assemble_u16_values(const uint8_t* lo, const uint8_t* hi, size_t count, bool delta, uint16_t* out) {
  kernels().assemble(lo, hi, count, delta, out);
}

const char* apply_kernels_isa() {
  return selector().isa();
}

bool apply_kernels_force(const char* isa) {
  return selector().force(isa);
}

// ---------------------------------------------------------------------------------------------------
// The apply loop.

namespace {

/// Asks for every cache line of [p, p + n) at once: the changes of a block land on scattered lines
/// whose loads would otherwise each wait for memory in turn; the hash reads the whole block next anyway.
inline void prefetch_range(const uint8_t* p, size_t n) {
  for (size_t off = 0; off < n; off += 64) __builtin_prefetch(p + off, 1, 3);
}

/// The 64 KiB blocks of the tensor: hashed in order once no later change can touch them.
class Blocks {
 public:
  Blocks(uint8_t* w, uint64_t n, BlockSink hash) : w_(w), n_(n), end_(std::min(n, kBlockElems)), hash_(hash) {
    prefetch_range(w_, 2 * end_);
    prefetch_next();
  }
  uint64_t end() const { return end_; }
  /// Hashes the current block and moves to the next, prefetching the one after it.
  void advance() {
    hash_(w_ + 2 * start_, 2 * (end_ - start_));
    start_ = end_;
    end_ = std::min(n_, end_ + kBlockElems);
    prefetch_next();
  }
  void finish() {
    while (start_ < n_) advance();
  }

 private:
  void prefetch_next() {
    if (end_ < n_) prefetch_range(w_ + 2 * end_, 2 * (std::min(n_, end_ + kBlockElems) - end_));
  }
  uint8_t* w_;
  uint64_t n_, start_ = 0, end_;
  BlockSink hash_;
};

/// One change: save the old value as undo, store the new one.
template <bool kDelta>
inline void write_change(uint8_t* at, uint8_t* undo, uint16_t value) {
  uint16_t old;
  std::memcpy(&old, at, 2);
  std::memcpy(undo, &old, 2);
  const uint16_t v = kDelta ? static_cast<uint16_t>(old + value) : value;
  std::memcpy(at, &v, 2);
}

/// The changes of a batch that lies inside the current block: the hot loop, a few instructions each.
template <bool kDelta>
uint64_t write_batch(uint8_t* w, uint64_t p, const uint16_t* gap1, const uint16_t* val, size_t count,
                     uint8_t* undo) {
  for (size_t i = 0; i < count; ++i) {
    p += gap1[i];
    write_change<kDelta>(w + 2 * p, undo + 2 * i, val[i]);
  }
  return p;
}

/// The same for a batch that crosses block ends: finished blocks are hashed on the way.
template <bool kDelta, typename G>
uint64_t write_batch_checked(uint8_t* w, uint64_t p, const G* gap1, const uint16_t* val, size_t count,
                             uint8_t* undo, Blocks& blocks) {
  for (size_t i = 0; i < count; ++i) {
    p += gap1[i];
    while (p >= blocks.end()) blocks.advance();
    write_change<kDelta>(w + 2 * p, undo + 2 * i, val[i]);
  }
  return p;
}

template <bool kDelta>
void apply_varint_u16_impl(uint8_t* w, uint64_t n, const uint8_t* streams, uint64_t index_bytes,
                           uint64_t changed, uint8_t* undo, BlockSink hash) {
  const Kernels& k = kernels();
  const uint8_t* head = streams;
  const uint8_t* tail = streams + changed;
  const uint8_t* tail_end = streams + index_bytes;
  const uint8_t* lo = tail_end;
  const uint8_t* hi = lo + changed;
  Blocks blocks(w, n, hash);
  alignas(64) uint16_t gap1[kGapBatch], val[kGapBatch];
  alignas(64) uint64_t gap64[kGapBatch];
  uint64_t p = ~uint64_t{0};  // position of the previous change (idx_{-1} = -1)
  for (uint64_t j = 0; j < changed; j += kGapBatch) {
    const size_t count = static_cast<size_t>(std::min<uint64_t>(kGapBatch, changed - j));
    k.assemble(lo + j, hi + j, count, kDelta, val);
    const GapBatch b = k.decode(head + j, tail, tail_end, count, gap1);
    if (b.ok) {
      tail += b.tail_bytes;
      p = p + b.sum < blocks.end()
              ? write_batch<kDelta>(w, p, gap1, val, count, undo + 2 * j)
              : write_batch_checked<kDelta>(w, p, gap1, val, count, undo + 2 * j, blocks);
      continue;
    }
    // A gap of 16384 or more in this batch: full LEB128 decoding (the stream was validated).
    for (size_t i = 0; i < count; ++i) {
      const uint8_t h = head[j + i];
      const uint64_t gap = h & 128 ? read_gap_tail(tail, h & 127, 7) : h & 127;
      gap64[i] = gap + 1;
    }
    p = write_batch_checked<kDelta>(w, p, gap64, val, count, undo + 2 * j, blocks);
  }
  blocks.finish();
}

}  // namespace

void apply_varint_u16(uint8_t* weights, uint64_t n, const uint8_t* streams, uint64_t index_bytes,
                      uint64_t changed, bool delta, uint8_t* undo, BlockSink hash) {
  if (delta)
    apply_varint_u16_impl<true>(weights, n, streams, index_bytes, changed, undo, hash);
  else
    apply_varint_u16_impl<false>(weights, n, streams, index_bytes, changed, undo, hash);
}

}  // namespace pulse::kernels
