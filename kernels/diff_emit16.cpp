#include "kernels/diff_emit16.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/byte_tables.h"
#include "kernels/cpu_features.h"
#include "kernels/diff_scan.h"
#include "kernels/int_coding.h"
#include "kernels/x86_simd.h"
#include "kernels/xxh3_simd.h"

namespace pulse::kernels {

namespace {

/// The head byte of `gap` at *h and its tail (if any) at t; returns the new tail end. The tail is
/// written without a branch for gaps < 2^28 (at 1% density about a third of the first changes of a
/// group have a tail, at random: a branch would mispredict); `t` needs 9 bytes of room.
inline uint8_t* put_gap(uint8_t* h, uint8_t* t, uint64_t gap) {
  const uint64_t r = gap >> 7;
  *h = static_cast<uint8_t>((gap & 127) | (r ? 128 : 0));
  if (r >= (uint64_t{1} << 21)) return write_gap_tail(t, r);
  t[0] = static_cast<uint8_t>((r & 127) | (r >= 128 ? 128 : 0));
  t[1] = static_cast<uint8_t>(((r >> 7) & 127) | (r >= 16384 ? 128 : 0));
  t[2] = static_cast<uint8_t>(r >> 14);
  return t + (r != 0) + (r >= 128) + (r >= 16384);
}

}  // namespace

// ---- the portable reference (every variant writes the same bytes) ---------------------------------

uint64_t diff_emit16_portable(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                              Emit16Cursor& c) {
  constexpr uint64_t kStep = 4096;  // elements per mask batch (masks stay in L1)
  uint64_t masks[kStep / kDiffGroup];
  uint8_t *h = c.head, *t = c.tail, *lo = c.lo, *hi = c.hi;
  uint64_t next = c.next, total = 0;
  for (uint64_t s = 0; s < count; s += kStep) {
    const uint64_t n = count - s < kStep ? count - s : kStep;
    if (diff_masks_portable(a + 2 * s, b + 2 * s, n, 2, masks) == 0) continue;
    for (uint64_t g = 0; g < (n + kDiffGroup - 1) / kDiffGroup; ++g)
      for (uint64_t m = masks[g]; m; m &= m - 1) {
        const uint64_t off = s + g * kDiffGroup + static_cast<uint64_t>(__builtin_ctzll(m));
        const uint16_t vb = load_le<uint16_t>(b + 2 * off);
        const uint16_t v = delta ? zigzag(static_cast<uint16_t>(vb - load_le<uint16_t>(a + 2 * off))) : vb;
        *lo++ = static_cast<uint8_t>(v);
        *hi++ = static_cast<uint8_t>(v >> 8);
        t = put_gap(h++, t, start + off - next);
        next = start + off + 1;
        ++total;
      }
  }
  c.head = h, c.tail = t, c.lo = lo, c.hi = hi, c.next = next;
  return total;
}

// ---- SIMD variants (x86: AVX-512, AVX2) ------------------------------------------------------------

namespace {

/// Bytes ahead of the scan, on each side, that the SIMD kernels prefetch into L1 (prefetch never faults:
/// past a tensor's end it is a no-op). Without it the reads were not overlapped with the emission: the
/// AVX2 kernel took 1.55 ms per 8 M elements with both sides in cache, a plain read of both sides from
/// DRAM 1.0 ms, the kernel from DRAM 1.9-2.5 ms (1 thread, 7% changed). Measured in one process,
/// interleaved, the synthetic Adam workload of 20 M elements, 2 threads, whole encode_patch on an AMD
/// EPYC with AVX-512 (AVX2 forced): AVX2 kernel 20-25% less median time (7%, delta and absolute) and
/// 17-18% (1%), best of 150 4-21% less; AVX-512 kernel 4-9% less median. 2048 and 4096 bytes measured
/// alike.
constexpr uint64_t kScanPrefetchBytes = 4096;

/// Groups (64 elements) per tile: the AVX2 kernel's unit in every mode, the AVX-512 two-pass scan's.
constexpr uint64_t kTile = 8;
/// The SIMD kernels scan in windows of kDenseWindow elements and pick each window's path by the changes
/// in the window before it (Emit16Cursor::recent_changes): dense from kAvx512DenseChanges (2.2%) or
/// kAvx2DenseChanges (3.1%: also where the AVX2 kernel's emission switches to 8 unconditional slots)
/// on. Chosen from the measured crossovers (bench/RESULTS.md, "Kernel measurements (moved from headers)").
constexpr uint64_t kDenseWindow = 8192;
constexpr uint64_t kAvx512DenseChanges = 180;
constexpr uint64_t kAvx2DenseChanges = 256;
constexpr uint64_t kAvx2NonEmptyBelow = 164;  // 2%: the AVX2 kernel's kNonEmpty emission below it

/// Prefetches the two 64-byte lines of each side that lie kScanPrefetchBytes past p and q.
/// The addresses are formed as integers: past the end of a tensor they point at no object.
inline void prefetch_scan_ahead(const uint8_t* p, const uint8_t* q) {
  const uintptr_t pa = reinterpret_cast<uintptr_t>(p) + kScanPrefetchBytes;
  const uintptr_t qa = reinterpret_cast<uintptr_t>(q) + kScanPrefetchBytes;
  __builtin_prefetch(reinterpret_cast<const void*>(pa));
  __builtin_prefetch(reinterpret_cast<const void*>(pa + 64));
  __builtin_prefetch(reinterpret_cast<const void*>(qa));
  __builtin_prefetch(reinterpret_cast<const void*>(qa + 64));
}

/// Runs `pass(offset, n, last)` over the call's `count` elements in windows of kDenseWindow (n elements
/// from element offset `offset`; `last`: the call's final window) and keeps each window's change count,
/// the pass's return, in c.recent_changes, where the next window's pass reads it to pick its path.
/// Returns the changes of all windows.
template <typename Pass>
inline uint64_t for_each_window(uint64_t count, Emit16Cursor& c, Pass&& pass) {
  uint64_t total = 0;
  for (uint64_t w = 0; w < count; w += kDenseWindow) {
    const uint64_t n = std::min(kDenseWindow, count - w);
    c.recent_changes = pass(w, n, w + n == count);
    total += c.recent_changes;
  }
  return total;
}

#ifdef PULSE_KERNELS_X86
// 64 elements per step (two vectors per side): the 64-bit change mask drives byte-wide compresses of
// the value bytes and of the in-group positions (vpcompressb), so the per-element work is a few
// instructions and no branch depends on the data.
#define PULSE_AVX512_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi,avx512vbmi2,bmi,bmi2,lzcnt,popcnt")))
/// What PULSE_AVX512_TARGET assumes of the CPU.
constexpr CpuFeatures kNeedsAvx512 = kCpuAvx512F | kCpuAvx512BW | kCpuAvx512VL | kCpuAvx512Vbmi |
                                     kCpuAvx512Vbmi2 | kCpuBmi | kCpuBmi2 | kCpuLzcnt | kCpuPopcnt;

// XXH3's stripe accumulation and scramble (kernels/xxh3_simd.h).
PULSE_AVX512_TARGET __attribute__((always_inline)) inline __m512i xxh3_accumulate(__m512i acc, __m512i data,
                                                                                  __m512i key) {
  return _mm512_add_epi64(acc, simd::xxh3_stripe_avx512(data, key));
}

/// Byte tables of the AVX-512 kernel: lane indices, "lane j takes lane j - 1" (lane 0: scalar code), and
/// bytes 0, 2, .. / 1, 3, .. of two vectors read as one 128-byte table.
struct Avx512Tables {
  alignas(64) uint8_t iota[64];
  alignas(64) uint8_t up[64];
  alignas(64) uint8_t even[64];
  alignas(64) uint8_t odd[64];
};
constexpr Avx512Tables make_avx512_tables() {
  Avx512Tables t{};
  for (int j = 0; j < 64; ++j) {
    t.iota[j] = static_cast<uint8_t>(j);
    t.up[j] = static_cast<uint8_t>(j ? j - 1 : 0);
    t.even[j] = static_cast<uint8_t>(2 * j);
    t.odd[j] = static_cast<uint8_t>(2 * j + 1);
  }
  return t;
}
constexpr Avx512Tables kAvx512Tables = make_avx512_tables();

/// Group i's 64 elements of both sides (a: base, b: target); lanes at or past `count` read as equal
/// zeros (masked loads never fault).
PULSE_AVX512_TARGET __attribute__((always_inline)) inline void load_group512(const uint8_t* a,
                                                                             const uint8_t* b, uint64_t i,
                                                                             uint64_t count, __m512i& a0,
                                                                             __m512i& a1, __m512i& b0,
                                                                             __m512i& b1) {
  const uint8_t* pa = a + 2 * i;
  const uint8_t* pb = b + 2 * i;
  if (count - i >= 64) {
    a0 = _mm512_loadu_si512(pa);
    a1 = _mm512_loadu_si512(pa + 64);
    b0 = _mm512_loadu_si512(pb);
    b1 = _mm512_loadu_si512(pb + 64);
  } else {
    const uint64_t live = (uint64_t{1} << (count - i)) - 1;
    const __mmask32 l0 = static_cast<__mmask32>(live), l1 = static_cast<__mmask32>(live >> 32);
    a0 = _mm512_maskz_loadu_epi16(l0, pa);
    a1 = _mm512_maskz_loadu_epi16(l1, pa + 64);
    b0 = _mm512_maskz_loadu_epi16(l0, pb);
    b1 = _mm512_maskz_loadu_epi16(l1, pb + 64);
  }
}

/// XXH3 of the group at tensor byte offset `off` (stripes 2j, 2j + 1 of a 1024-byte block: the kernel
/// starts at a multiple of 64 elements), then the group's change mask.
template <bool kHashA, bool kHashB>
PULSE_AVX512_TARGET __attribute__((always_inline)) inline __mmask64 hash_compare512(
    uint64_t off, const uint8_t* secret, uint64_t hash_end, __m512i& acc_a, __m512i& acc_b, __m512i a0,
    __m512i a1, __m512i b0, __m512i b1) {
  if ((kHashA || kHashB) && off + 128 <= hash_end) {
    const uint64_t s = (off >> 6) & 15;
    const __m512i k0 = _mm512_loadu_si512(secret + 8 * s), k1 = _mm512_loadu_si512(secret + 8 * s + 8);
    if (kHashA) acc_a = xxh3_accumulate(xxh3_accumulate(acc_a, a0, k0), a1, k1);
    if (kHashB) acc_b = xxh3_accumulate(xxh3_accumulate(acc_b, b0, k0), b1, k1);
    if (s == 14) {
      const __m512i ks = _mm512_loadu_si512(secret + 128);
      if (kHashA) acc_a = simd::xxh3_scramble_avx512(acc_a, ks);
      if (kHashB) acc_b = simd::xxh3_scramble_avx512(acc_b, ks);
    }
  }
  return static_cast<__mmask64>(_mm512_cmpneq_epi16_mask(a0, b0)) |
         (static_cast<__mmask64>(_mm512_cmpneq_epi16_mask(a1, b1)) << 32);
}

/// Appends the changes of the group at tensor position `pos` (change mask m != 0; base a0, a1 and target
/// v0, v1) to the streams: value bytes and in-group gaps by vpcompressb, no data-dependent branch.
/// `tables`: kAvx512Tables's iota, up, even and odd, loaded once per window.
template <bool kDelta>
PULSE_AVX512_TARGET __attribute__((always_inline)) inline void emit_group512(
    uint64_t pos, __mmask64 m, __m512i a0, __m512i a1, __m512i v0, __m512i v1, const __m512i (&tables)[4],
    uint8_t*& h, uint8_t*& t, uint8_t*& lo, uint8_t*& hi, uint64_t& next, uint64_t& total) {
  if (kDelta) {
    const __m512i d0 = _mm512_sub_epi16(v0, a0), d1 = _mm512_sub_epi16(v1, a1);
    v0 = _mm512_xor_si512(_mm512_slli_epi16(d0, 1), _mm512_srai_epi16(d0, 15));
    v1 = _mm512_xor_si512(_mm512_slli_epi16(d1, 1), _mm512_srai_epi16(d1, 15));
  }
  const __m512i l8 = _mm512_permutex2var_epi8(v0, tables[2], v1);  // byte 0 of the values
  const __m512i h8 = _mm512_permutex2var_epi8(v0, tables[3], v1);  // byte 1
  _mm512_storeu_si512(lo, _mm512_maskz_compress_epi8(m, l8));
  _mm512_storeu_si512(hi, _mm512_maskz_compress_epi8(m, h8));
  // In-group gaps: positions of the changes packed to the low lanes, minus the previous one, minus 1.
  const __m512i p = _mm512_maskz_compress_epi8(m, tables[0]);
  const __m512i prev = _mm512_maskz_permutexvar_epi8(~__mmask64{0}, tables[1], p);
  _mm512_storeu_si512(h, _mm512_sub_epi8(_mm512_sub_epi8(p, prev), _mm512_set1_epi8(1)));
  const uint64_t first = pos + static_cast<uint64_t>(_tzcnt_u64(m));
  t = put_gap(h, t, first - next);  // overwrites lane 0's head byte
  next = pos + 64 - static_cast<uint64_t>(_lzcnt_u64(m));
  const uint64_t k = static_cast<uint64_t>(_mm_popcnt_u64(m));
  h += k;
  lo += k;
  hi += k;
  total += k;
}

/// The AVX-512 kernel over `count` elements (the diff_emit16 contract), one of two ways. One pass (the
/// dense path, kTwoPass false: an empty group is rare there, 1% of the groups at 7% density): each group
/// compared, hashed and emitted from the same registers, no data-dependent branch but the one on an
/// empty group. Two passes (the sparse path): tiles of kTile groups, a pass that compares and hashes
/// keeping each group's change mask, then only the tile's non-empty groups emitted, loaded again from L1.
/// At 1% density about half the groups are empty, at random: the one-pass loop's branch on an empty group
/// mispredicts about every second group, the loop over the set bits of a tile's non-empty groups about
/// once per tile (its exit). Each way is a function of its own: in one function the two loops ran out of
/// registers (the one pass then took 5-10% longer at 7%).
template <bool kDelta, bool kHashA, bool kHashB, bool kTwoPass>
PULSE_AVX512_TARGET __attribute__((noinline)) uint64_t diff_emit16_avx512_pass(
    const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, Emit16Cursor& c, Emit16Hash* hash) {
  uint8_t *h = c.head, *t = c.tail, *lo = c.lo, *hi = c.hi;
  uint64_t next = c.next, total = 0;
  __m512i acc_a = _mm512_setzero_si512(), acc_b = _mm512_setzero_si512();
  if (kHashA) acc_a = _mm512_load_si512(hash->base->acc);
  if (kHashB) acc_b = _mm512_load_si512(hash->target->acc);
  // Locals, not loads through `hash`: every byte store to the streams could alias it (measured: the one
  // pass took 10% longer at 7% with the loads).
  const uint8_t* const secret = hash ? hash->secret : nullptr;
  const uint64_t hash_end = hash ? hash->block_bytes : 0;
  const __m512i tables[4] = {_mm512_load_si512(kAvx512Tables.iota), _mm512_load_si512(kAvx512Tables.up),
                             _mm512_load_si512(kAvx512Tables.even), _mm512_load_si512(kAvx512Tables.odd)};
  if constexpr (!kTwoPass) {
    for (uint64_t i = 0; i < count; i += 64) {
      __m512i a0, a1, b0, b1;
      prefetch_scan_ahead(a + 2 * i, b + 2 * i);
      load_group512(a, b, i, count, a0, a1, b0, b1);
      const __mmask64 m =
          hash_compare512<kHashA, kHashB>(2 * (start + i), secret, hash_end, acc_a, acc_b, a0, a1, b0, b1);
      if (m != 0) emit_group512<kDelta>(start + i, m, a0, a1, b0, b1, tables, h, t, lo, hi, next, total);
    }
  } else {
    uint64_t masks[kTile];
    for (uint64_t i0 = 0; i0 < count; i0 += 64 * kTile) {
      const uint64_t groups = std::min<uint64_t>(kTile, (count - i0 + 63) / 64);
      uint64_t nonempty = 0;  // bit g: group g of the tile has a change
      for (uint64_t g = 0; g < groups; ++g) {
        const uint64_t i = i0 + 64 * g;
        __m512i a0, a1, b0, b1;
        prefetch_scan_ahead(a + 2 * i, b + 2 * i);
        load_group512(a, b, i, count, a0, a1, b0, b1);
        masks[g] =
            hash_compare512<kHashA, kHashB>(2 * (start + i), secret, hash_end, acc_a, acc_b, a0, a1, b0, b1);
        nonempty |= static_cast<uint64_t>(masks[g] != 0) << g;
      }
      for (uint64_t nz = nonempty; nz != 0; nz = _blsr_u64(nz)) {
        const uint64_t g = _tzcnt_u64(nz);
        const uint64_t i = i0 + 64 * g;
        __m512i a0, a1, b0, b1;
        load_group512(a, b, i, count, a0, a1, b0, b1);
        emit_group512<kDelta>(start + i, masks[g], a0, a1, b0, b1, tables, h, t, lo, hi, next, total);
      }
    }
  }
  c.head = h, c.tail = t, c.lo = lo, c.hi = hi, c.next = next;
  if (kHashA) _mm512_store_si512(hash->base->acc, acc_a);
  if (kHashB) _mm512_store_si512(hash->target->acc, acc_b);
  return total;
}

/// 64 elements per group, in windows of kDenseWindow elements, each scanned by the one-pass loop where
/// the window before it was dense, else by the two-pass one. Measured (1 thread, 4 M elements, both
/// sides hashed, 1-ULP changes at random, old and new interleaved in one process, paired medians):
/// see kernels/diff_emit16.h.
template <bool kDelta, bool kHashA, bool kHashB>
uint64_t diff_emit16_avx512(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count,
                            Emit16Cursor& c, Emit16Hash* hash) {
  return for_each_window(count, c, [&](uint64_t w, uint64_t n, bool) {
    return c.recent_changes >= kAvx512DenseChanges ? diff_emit16_avx512_pass<kDelta, kHashA, kHashB, false>(
                                                         a + 2 * w, b + 2 * w, start + w, n, c, hash)
                                                   : diff_emit16_avx512_pass<kDelta, kHashA, kHashB, true>(
                                                         a + 2 * w, b + 2 * w, start + w, n, c, hash);
  });
}

template <bool kDelta>
uint64_t diff_emit16_avx512_hashing(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count,
                                    Emit16Cursor& c, Emit16Hash* hash) {
  const bool ha = hash && hash->base, hb = hash && hash->target;
  if (ha && hb) return diff_emit16_avx512<kDelta, true, true>(a, b, start, count, c, hash);
  if (hb) return diff_emit16_avx512<kDelta, false, true>(a, b, start, count, c, hash);
  if (ha) return diff_emit16_avx512<kDelta, true, false>(a, b, start, count, c, hash);
  return diff_emit16_avx512<kDelta, false, false>(a, b, start, count, c, hash);
}

// 64 elements per group as in the AVX-512 kernel, in tiles of 8 groups (512 elements, 2 KiB per side):
// a vector pass over the tile compares the sides (one 64-bit change mask per group, kept in a small array)
// and accumulates XXH3 from the loaded registers (libxxhash's AVX2 code path); a scalar pass then emits
// the tile's changes from the masks, reading the values again from L1 (in delta mode from the zigzag
// the vector pass stored). Measured in memory at 7% and 1%: 13-30% less time than the fused table-driven
// loop it replaced, 5-8% of that from the change-by-change slots alone in the fused loop (why the split
// helps is not established: GCC keeps the hash accumulators on the stack in both; the software
// prefetch, kScanPrefetchBytes ahead, was measured later). A group of <= 8 changes (97% of them at 7%
// density) is emitted change by change (tzcnt / blsr: gap head byte, value into a register lane; one
// shuffle splits the group's values into the two planes) in unconditional slots; a bigger one by eight
// table-driven sub-group compresses: each 8-element sub-group's 8-bit change mask indexes one 32-byte table
// entry (kernels/byte_tables.h Emit8), the pshufb control that splits and packs its changed lanes' lo and hi
// bytes, its in-sub-group gaps and its change count. Either way only the group's first gap depends on the
// previous group.
#define PULSE_AVX2_TARGET __attribute__((target("avx2,bmi,bmi2,lzcnt,popcnt")))
/// What PULSE_AVX2_TARGET assumes of the CPU.
constexpr CpuFeatures kNeedsAvx2 = kCpuAvx2 | kCpuBmi | kCpuBmi2 | kCpuLzcnt | kCpuPopcnt;

PULSE_AVX2_TARGET __attribute__((always_inline)) inline __m256i xxh3_accumulate_avx2(__m256i acc,
                                                                                     __m256i data,
                                                                                     const uint8_t* key) {
  return _mm256_add_epi64(acc, simd::xxh3_stripe_avx2(data, key));
}

/// Equal-lane mask of 32 2-byte elements (bit i set: element i equal), from two 16-lane compares.
PULSE_AVX2_TARGET __attribute__((always_inline)) inline uint32_t eq_mask32(__m256i a0, __m256i a1, __m256i b0,
                                                                           __m256i b1) {
  const __m256i p = _mm256_packs_epi16(_mm256_cmpeq_epi16(a0, b0), _mm256_cmpeq_epi16(a1, b1));
  return static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_permute4x64_epi64(p, 0xD8)));
}

/// Emits the changes of 8-element sub-group J (0..7) of a group: `planes` holds its 8 elements as they
/// lie in memory (2 bytes each, little-endian), `m` the group's 64-bit change mask; the three streams are
/// written at offset `o` from their bases (they advance together: one byte per change each), and `o` advances
/// by the count. The sub-group's table entry (kernels/byte_tables.h Emit8) sits at (mask byte J) * 32: one
/// shift and one and give its address offset, and its control, gaps and count are one load each.
template <unsigned J>
PULSE_AVX2_TARGET __attribute__((always_inline)) inline void emit_sub8(__m128i planes, uint64_t m, uint8_t* h,
                                                                       uint8_t* lo, uint8_t* hi,
                                                                       uint64_t& o) {
  constexpr unsigned r = (8 * J + 59) % 64;  // rotate right by 8 J - 5: one rorx, no copy of m
  const uint64_t at = ((m >> r) | (m << (64 - r))) & 0x1FE0;
  const uint8_t* e = reinterpret_cast<const uint8_t*>(tables::kEmit8.e) + at;
  const __m128i packed = _mm_shuffle_epi8(planes, _mm_load_si128(reinterpret_cast<const __m128i*>(e)));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(lo + o), packed);
  _mm_storeh_pd(reinterpret_cast<double*>(hi + o), _mm_castsi128_pd(packed));
  // The sub-group's first gap is the table's (the lane of its lowest change) plus the distance from the
  // group's last change below the sub-group to lane 8 J: the leading zeros of m's bits below 8 J. Byte 0
  // stays below 72, so the 64-bit add carries nothing into byte 1. Sub-group 0 (and any sub-group with no
  // change below it) gets a value the group's first gap overwrites.
  uint64_t gaps = load_le<uint64_t>(e + 16);
  if (J > 0) gaps += static_cast<uint64_t>(_lzcnt_u64(m << (64 - 8 * J)));
  store_le(h + o, gaps);
  o += load_le<uint64_t>(e + 24);  // count, then 7 zero bytes: an add from memory
}

/// Emits changes J0 .. J1 - 1 of a group change by change, one slot each, unconditionally (slots past the
/// group's count write bytes the next group overwrites; their tzcnt is 64, so `src` needs 130 readable
/// bytes). `src`: the group's 64 stored values (2 bytes each, little-endian); `m`: the group's change mask
/// with its lowest J0 bits cleared, `p`: the lane of change J0 - 1 (both advanced); h: the head stream at
/// the group's first change. Change 0's head byte is left for the caller (its gap reaches into earlier
/// groups). The value of change j goes into 16-bit lane j % 4 of vals[j / 4] (zero on entry), registers
/// that emit_group splits into the two planes with one shuffle. Two byte stores and a shift per change
/// cost more: measured in one process, interleaved, 1 thread, the synthetic Adam workload, the kernel
/// with them took 4-14% longer at 7% density in absolute mode, 1-5% in delta mode, the same at 1%.
template <int J0, int J1>
PULSE_AVX2_TARGET __attribute__((always_inline)) inline void emit_slots(uint64_t& m, uint64_t& p,
                                                                        const uint8_t* src, uint8_t* h,
                                                                        uint64_t (&vals)[2]) {
#pragma GCC unroll 8
  for (int j = J0; j < J1; ++j) {
    const uint64_t q = _tzcnt_u64(m);
    vals[j / 4] |= static_cast<uint64_t>(load_le<uint16_t>(src + 2 * q)) << (16 * (j % 4));
    if (j > 0) h[j] = static_cast<uint8_t>(q - p - 1);
    p = q;
    m = _blsr_u64(m);
  }
}

/// Emits the changes of one group (change mask m != 0; `src` as for emit_slots) at offset `o` of the
/// streams and advances `o` by their count; its first head byte is left for the caller. Up to 8 changes
/// go through emit_slots: kFirst slots unconditionally, the rest of the 8 behind a branch on the count
/// (8 where changes are dense, 4 elsewhere: at 1% density a group has 1-2 changes); more through the table.
template <int kFirst>
PULSE_AVX2_TARGET __attribute__((always_inline)) inline void emit_group(uint64_t m, const uint8_t* src,
                                                                        uint8_t* h, uint8_t* lo, uint8_t* hi,
                                                                        uint64_t& o) {
  const uint64_t k = static_cast<uint64_t>(_mm_popcnt_u64(m));
  if (k <= 8) {
    uint64_t p = 0, vals[2] = {0, 0};
    emit_slots<0, kFirst>(m, p, src, h + o, vals);
    if (kFirst < 8 && k > kFirst) emit_slots<kFirst, 8>(m, p, src, h + o, vals);
    // Eight 16-bit values -> their low bytes into lo, their high bytes into hi (8 bytes each; those past
    // the count are overwritten by the next group).
    const __m128i split =
        _mm_shuffle_epi8(_mm_set_epi64x(static_cast<long long>(vals[1]), static_cast<long long>(vals[0])),
                         _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(lo + o), split);
    _mm_storeh_pd(reinterpret_cast<double*>(hi + o), _mm_castsi128_pd(split));
    o += k;
    return;
  }
  emit_sub8<0>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)), m, h, lo, hi, o);
  emit_sub8<1>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 16)), m, h, lo, hi, o);
  emit_sub8<2>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 32)), m, h, lo, hi, o);
  emit_sub8<3>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 48)), m, h, lo, hi, o);
  emit_sub8<4>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 64)), m, h, lo, hi, o);
  emit_sub8<5>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 80)), m, h, lo, hi, o);
  emit_sub8<6>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 96)), m, h, lo, hi, o);
  emit_sub8<7>(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 112)), m, h, lo, hi, o);
}

/// How the AVX2 kernel emits a tile's groups, by density (kernels/diff_emit16.h has the measurements).
enum class Avx2Emit {
  kNonEmpty,  ///< below 2%: only the non-empty groups, by the set bits of `nonempty` (at 1% about half
              ///< the groups are empty, at random: a branch per group mispredicts about every second
              ///< group, the loop over the set bits about once per tile, at its exit)
  kSparse,    ///< 2-3.1%: group by group, a branch skipping the empty ones, 4 unconditional slots
  kDense,     ///< from 3.1%: the same with 8 slots, and the first gap's tail behind a branch
};

/// The AVX2 kernel over `count` elements (the diff_emit16 contract; `last`: the call's final window, after
/// which the caller's buffer may end, so the final group is copied out before emit_slots reads 2 bytes past
/// it), in tiles of kTile groups (4 and 16 measured no faster), emitting as kMode says.
template <bool kDelta, bool kHashA, bool kHashB, Avx2Emit kMode>
PULSE_AVX2_TARGET __attribute__((noinline)) uint64_t diff_emit16_avx2_pass(const uint8_t* a, const uint8_t* b,
                                                                           uint64_t start, uint64_t count,
                                                                           bool last, Emit16Cursor& c,
                                                                           Emit16Hash* hash) {
  constexpr bool kSetBits = kMode == Avx2Emit::kNonEmpty;
  constexpr bool dense = kMode == Avx2Emit::kDense;
  uint8_t *const h = c.head, *const lo = c.lo, *const hi = c.hi, *t = c.tail;
  uint64_t next = c.next, o = 0;  // o: bytes written to head, lo and hi (= changes)
  __m256i acc_a0 = _mm256_setzero_si256(), acc_a1 = acc_a0, acc_b0 = acc_a0, acc_b1 = acc_a0;
  const uint8_t* secret = hash ? hash->secret : nullptr;
  const uint64_t hash_end = hash ? hash->block_bytes : 0;
  if (kHashA) {
    acc_a0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hash->base->acc));
    acc_a1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hash->base->acc + 4));
  }
  if (kHashB) {
    acc_b0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hash->target->acc));
    acc_b1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(hash->target->acc + 4));
  }
  // A partial last group, or the full one ending the call's last window, zero padded; 2 bytes past 128
  // for emit_slots.
  alignas(32) uint8_t rest_a[160], rest_b[160];
  alignas(32) uint8_t zz[kTile * 128 + 32];  // delta mode: the tile's zigzag values
  uint64_t masks[kTile];
  for (uint64_t i0 = 0; i0 < count; i0 += 64 * kTile) {
    const uint64_t groups = count - i0 >= 64 * kTile ? kTile : (count - i0 + 63) / 64;
    uint64_t any = 0, nonempty = 0;          // nonempty: bit g set when group g has a change
    for (uint64_t g = 0; g < groups; ++g) {  // compare and hash
      const uint64_t i = i0 + 64 * g;
      const uint8_t* pa = a + 2 * i;
      const uint8_t* pb = b + 2 * i;
      if (count - i < 64 || (last && count - i == 64)) {  // lanes past the end read as equal zeros
        std::memset(rest_a, 0, sizeof rest_a);
        std::memset(rest_b, 0, sizeof rest_b);
        std::memcpy(rest_a, pa, 2 * (count - i));
        std::memcpy(rest_b, pb, 2 * (count - i));
        pa = rest_a;
        pb = rest_b;
      }
      prefetch_scan_ahead(a + 2 * i, b + 2 * i);
      __m256i va[4], vb[4];
      for (int q = 0; q < 4; ++q) {
        va[q] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa + 32 * q));
        vb[q] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32 * q));
      }
      if (kHashA || kHashB) {
        // Stripes s, s + 1 of a 1024-byte XXH3 block (the kernel starts at a multiple of 64 elements).
        const uint64_t off = 2 * (start + i);
        if (off + 128 <= hash_end) {
          const uint64_t s = (off >> 6) & 15;
          const uint8_t* k0 = secret + 8 * s;
          const uint8_t* k1 = secret + 8 * s + 8;
          if (kHashA) {
            acc_a0 = xxh3_accumulate_avx2(xxh3_accumulate_avx2(acc_a0, va[0], k0), va[2], k1);
            acc_a1 = xxh3_accumulate_avx2(xxh3_accumulate_avx2(acc_a1, va[1], k0 + 32), va[3], k1 + 32);
          }
          if (kHashB) {
            acc_b0 = xxh3_accumulate_avx2(xxh3_accumulate_avx2(acc_b0, vb[0], k0), vb[2], k1);
            acc_b1 = xxh3_accumulate_avx2(xxh3_accumulate_avx2(acc_b1, vb[1], k0 + 32), vb[3], k1 + 32);
          }
          if (s == 14) {
            if (kHashA) {
              acc_a0 = simd::xxh3_scramble_avx2(acc_a0, secret + 128);
              acc_a1 = simd::xxh3_scramble_avx2(acc_a1, secret + 160);
            }
            if (kHashB) {
              acc_b0 = simd::xxh3_scramble_avx2(acc_b0, secret + 128);
              acc_b1 = simd::xxh3_scramble_avx2(acc_b1, secret + 160);
            }
          }
        }
      }
      const uint64_t m = ~(static_cast<uint64_t>(eq_mask32(va[0], va[1], vb[0], vb[1])) |
                           static_cast<uint64_t>(eq_mask32(va[2], va[3], vb[2], vb[3])) << 32);
      masks[g] = m;
      if (kSetBits)
        nonempty |= static_cast<uint64_t>(m != 0) << g;
      else
        any |= m;
      if (kDelta)
        for (int q = 0; q < 4; ++q) {
          const __m256i d = _mm256_sub_epi16(vb[q], va[q]);
          _mm256_store_si256(reinterpret_cast<__m256i*>(zz + 128 * g + 32 * q),
                             _mm256_xor_si256(_mm256_slli_epi16(d, 1), _mm256_srai_epi16(d, 15)));
        }
    }
    // Emit. kNonEmpty visits the set bits of `nonempty` (tzcnt of none is 64: past the last group); the
    // others every group of a tile with a change, a branch skipping the empty ones.
    if (!kSetBits && any == 0) continue;
    for (uint64_t g = kSetBits ? _tzcnt_u64(nonempty) : 0, following; g < groups; g = following) {
      if (kSetBits) {
        nonempty = _blsr_u64(nonempty);
        following = _tzcnt_u64(nonempty);
      } else {
        following = g + 1;
      }
      const uint64_t m = masks[g];
      if (!kSetBits && m == 0) continue;
      const uint64_t i = i0 + 64 * g;
      const uint8_t* src = kDelta                                        ? zz + 128 * g
                           : count - i < 64 || (last && count - i == 64) ? rest_b
                                                                         : b + 2 * i;
      const uint64_t o0 = o;
      emit_group<dense ? 8 : 4>(m, src, h, lo, hi, o);
      // The group's first gap writes its first head byte. Where changes are dense, nearly every such gap
      // is < 128 and a branch on it predicts well; at lower densities a third of them have tails, at
      // random, and put_gap has no branch.
      const uint64_t gap = start + i + static_cast<uint64_t>(_tzcnt_u64(m)) - next;
      if (dense && gap < 128)
        h[o0] = static_cast<uint8_t>(gap);
      else
        t = put_gap(h + o0, t, gap);
      next = start + i + 64 - static_cast<uint64_t>(_lzcnt_u64(m));
    }
  }
  c.head = h + o, c.tail = t, c.lo = lo + o, c.hi = hi + o, c.next = next;
  if (kHashA) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(hash->base->acc), acc_a0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(hash->base->acc + 4), acc_a1);
  }
  if (kHashB) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(hash->target->acc), acc_b0);
    _mm256_store_si256(reinterpret_cast<__m256i*>(hash->target->acc + 4), acc_b1);
  }
  return o;
}

/// 64 elements per group, in windows of kDenseWindow elements, each emitted as the changes in the window
/// before it say (Emit16Cursor::recent_changes, Avx2Emit).
template <bool kDelta, bool kHashA, bool kHashB>
uint64_t diff_emit16_avx2(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, Emit16Cursor& c,
                          Emit16Hash* hash) {
  return for_each_window(count, c, [&](uint64_t w, uint64_t n, bool last) {
    const uint8_t *wa = a + 2 * w, *wb = b + 2 * w;
    if (c.recent_changes >= kAvx2DenseChanges)
      return diff_emit16_avx2_pass<kDelta, kHashA, kHashB, Avx2Emit::kDense>(wa, wb, start + w, n, last, c,
                                                                             hash);
    if (c.recent_changes >= kAvx2NonEmptyBelow)
      return diff_emit16_avx2_pass<kDelta, kHashA, kHashB, Avx2Emit::kSparse>(wa, wb, start + w, n, last, c,
                                                                              hash);
    return diff_emit16_avx2_pass<kDelta, kHashA, kHashB, Avx2Emit::kNonEmpty>(wa, wb, start + w, n, last, c,
                                                                              hash);
  });
}

template <bool kDelta>
uint64_t diff_emit16_avx2_hashing(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count,
                                  Emit16Cursor& c, Emit16Hash* hash) {
  const bool ha = hash && hash->base, hb = hash && hash->target;
  if (ha && hb) return diff_emit16_avx2<kDelta, true, true>(a, b, start, count, c, hash);
  if (hb) return diff_emit16_avx2<kDelta, false, true>(a, b, start, count, c, hash);
  if (ha) return diff_emit16_avx2<kDelta, true, false>(a, b, start, count, c, hash);
  return diff_emit16_avx2<kDelta, false, false>(a, b, start, count, c, hash);
}

#endif

}  // namespace

// ---- dispatch ----------------------------------------------------------------------------------------

namespace {

using EmitFn = uint64_t (*)(const uint8_t*, const uint8_t*, uint64_t, uint64_t, bool, Emit16Cursor&,
                            Emit16Hash*);

uint64_t emit_portable(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                       Emit16Cursor& c, Emit16Hash* hash) {
  if (hash) throw std::invalid_argument("diff_emit16: the portable kernel does not hash (fused hashing)");
  return diff_emit16_portable(a, b, start, count, delta, c);
}

#ifdef PULSE_KERNELS_X86
uint64_t emit_avx512(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                     Emit16Cursor& c, Emit16Hash* hash) {
  return delta ? diff_emit16_avx512_hashing<true>(a, b, start, count, c, hash)
               : diff_emit16_avx512_hashing<false>(a, b, start, count, c, hash);
}

uint64_t emit_avx2(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                   Emit16Cursor& c, Emit16Hash* hash) {
  return delta ? diff_emit16_avx2_hashing<true>(a, b, start, count, c, hash)
               : diff_emit16_avx2_hashing<false>(a, b, start, count, c, hash);
}
#endif

struct Variant {
  EmitFn fn;
  const char* isa;
  bool hashes;  ///< accumulates XXH3 (Emit16Hash)
};

/// The variants this CPU can run, fastest first (portable last), and the forced one.
VariantSelector<Variant, 3>& selector() {
  static VariantSelector<Variant, 3> s([](auto add) {
#ifdef PULSE_KERNELS_X86
    if (cpu_has(kNeedsAvx512)) add(Variant{emit_avx512, "avx512", true});
    if (cpu_has(kNeedsAvx2)) add(Variant{emit_avx2, "avx2", true});
#endif
    add(Variant{emit_portable, "portable", false});
  });
  return s;
}

}  // namespace

const char* diff_emit16_isa() {
  return selector().isa();
}

bool diff_emit16_fuses_hash() {
  return selector().current().hashes;
}

bool diff_emit16_supported(const char* isa) {
  return selector().supported(isa);
}

bool diff_emit16_force(const char* isa) {
  return selector().force(isa);
}

uint64_t diff_emit16(const uint8_t* a, const uint8_t* b, uint64_t start, uint64_t count, bool delta,
                     Emit16Cursor& cursor, Emit16Hash* hash) {
  const Variant& v = selector().current();
  if (hash && start % 64 != 0)
    throw std::invalid_argument("diff_emit16: hashing needs start at a multiple of 64 elements");
  return v.fn(a, b, start, count, delta, cursor, hash);
}

}  // namespace pulse::kernels
