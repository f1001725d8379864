#include "kernels/xxh3_long.h"

#include "kernels/cpu_features.h"
#include "kernels/x86_simd.h"
#include "kernels/xxh3_simd.h"

// libxxhash's own definitions (constants, scalar accumulate/scramble, merge), private to this file.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace pulse::kernels {

static_assert(sizeof(XXH3_kSecret) == 192, "XXH3 default secret is 192 bytes");

namespace {
constexpr uint64_t kStripesPerBlock = kXxh3BlockBytes / XXH_STRIPE_LEN;   // 16
constexpr uint64_t kScrambleKey = sizeof(XXH3_kSecret) - XXH_STRIPE_LEN;  // 128
static_assert(kStripesPerBlock == (sizeof(XXH3_kSecret) - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE,
              "1024-byte blocks of 16 stripes with the default secret");
}  // namespace

void xxh3_long_init(Xxh3LongState& state) {
  const uint64_t init[8] = XXH3_INIT_ACC;
  for (int i = 0; i < 8; ++i) state.acc[i] = init[i];
}

const uint8_t* xxh3_default_secret() {
  return XXH3_kSecret;
}

void xxh3_long_accumulate_block(Xxh3LongState& state, const uint8_t* block) {
  for (uint64_t s = 0; s < kStripesPerBlock; ++s)
    XXH3_accumulate_512_scalar(state.acc, block + s * XXH_STRIPE_LEN,
                               XXH3_kSecret + s * XXH_SECRET_CONSUME_RATE);
  XXH3_scrambleAcc_scalar(state.acc, XXH3_kSecret + kScrambleKey);
}

// ---------------------------------------------------------------------------------------------------
// The block loop, one variant per ISA. XXH3 adds each stripe's contribution (data ^ key: low x high 32
// bits, plus the data with its 64-bit lanes swapped in pairs) to the accumulators and scrambles only at
// the block's end, so within a block the stripes are summed into independent partial accumulators
// (u64 addition is associative) and merged before the scramble: the adds do not form one long chain.

namespace {

/// libxxhash's own code path for this build's baseline ISA (XXH_VECTOR, chosen at compile time: SSE2 on
/// x86-64, NEON on AArch64, else scalar), so "portable" is never slower than libxxhash's XXH3_64bits.
void accumulate_portable(Xxh3LongState& state, const uint8_t* data, uint64_t blocks) {
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint8_t* block = data + b * kXxh3BlockBytes;
    for (uint64_t s = 0; s < kStripesPerBlock; ++s)
      XXH3_accumulate_512(state.acc, block + s * XXH_STRIPE_LEN, XXH3_kSecret + s * XXH_SECRET_CONSUME_RATE);
    XXH3_scrambleAcc(state.acc, XXH3_kSecret + kScrambleKey);
  }
}

/// Accumulates `n` consecutive stripes at `data` with keys key + 8 s (no scramble): the last block's
/// stripes and the last stripe of xxh3_long_finish. Vectorized since a tree hash (kernels/tree_hash.h)
/// finishes one XXH3 per 64 KiB chunk: libxxhash's scalar stripes there cost ~10% of the chunk's time.
void stripes_portable(Xxh3LongState& state, const uint8_t* data, uint64_t n, const uint8_t* key) {
  for (uint64_t s = 0; s < n; ++s)
    XXH3_accumulate_512(state.acc, data + s * XXH_STRIPE_LEN, key + s * XXH_SECRET_CONSUME_RATE);
}

#ifdef PULSE_KERNELS_X86
#define PULSE_XXH3_AVX512 __attribute__((target("avx512f")))
#define PULSE_XXH3_AVX2 __attribute__((target("avx2")))
/// What PULSE_XXH3_AVX512 / PULSE_XXH3_AVX2 assume of the CPU.
constexpr CpuFeatures kNeedsAvx512 = kCpuAvx512F;
constexpr CpuFeatures kNeedsAvx2 = kCpuAvx2;

/// One stripe's contribution (kernels/xxh3_simd.h), loaded from p as two 32-byte halves: on an AMD EPYC
/// Zen 5 (2-core VM) one 64-byte load per stripe hashed 32 MiB from memory at 18-20 GB/s, below the
/// AVX2 variant's 30-32, and the two halves at 31-41 GB/s; in cache (64 KiB, 1 MiB) both ran at
/// 68-80 GB/s (1 thread, interleaved runs). The scan kernel's loads (kernels/diff_emit16.cpp) were
/// 4-7% slower split this way and stay whole.
PULSE_XXH3_AVX512 __attribute__((always_inline)) inline __m512i stripe_avx512(const uint8_t* p, __m512i key) {
  const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32));
  return simd::xxh3_stripe_avx512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), key);
}

PULSE_XXH3_AVX512 void accumulate_avx512(Xxh3LongState& state, const uint8_t* data, uint64_t blocks) {
  __m512i key[kStripesPerBlock];  // all 16 stripe keys stay in registers (32 zmm)
  for (uint64_t s = 0; s < kStripesPerBlock; ++s) key[s] = _mm512_loadu_si512(XXH3_kSecret + 8 * s);
  const __m512i scramble_key = _mm512_loadu_si512(XXH3_kSecret + kScrambleKey);
  __m512i acc = _mm512_load_si512(state.acc);
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = data + b * kXxh3BlockBytes;
    __m512i sum[4];
    for (int j = 0; j < 4; ++j) sum[j] = stripe_avx512(p + 64 * j, key[j]);
    for (uint64_t s = 4; s < kStripesPerBlock; ++s)
      sum[s % 4] = _mm512_add_epi64(sum[s % 4], stripe_avx512(p + 64 * s, key[s]));
    acc = _mm512_add_epi64(
        acc, _mm512_add_epi64(_mm512_add_epi64(sum[0], sum[1]), _mm512_add_epi64(sum[2], sum[3])));
    acc = simd::xxh3_scramble_avx512(acc, scramble_key);
  }
  _mm512_store_si512(state.acc, acc);
}

PULSE_XXH3_AVX512 void stripes_avx512(Xxh3LongState& state, const uint8_t* data, uint64_t n,
                                      const uint8_t* key) {
  __m512i acc = _mm512_load_si512(state.acc);
  for (uint64_t s = 0; s < n; ++s)
    acc = _mm512_add_epi64(acc, stripe_avx512(data + 64 * s, _mm512_loadu_si512(key + 8 * s)));
  _mm512_store_si512(state.acc, acc);
}

/// Half a stripe's contribution (kernels/xxh3_simd.h), loaded from p.
PULSE_XXH3_AVX2 __attribute__((always_inline)) inline __m256i stripe_avx2(const uint8_t* p,
                                                                          const uint8_t* key) {
  return simd::xxh3_stripe_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), key);
}

PULSE_XXH3_AVX2 void accumulate_avx2(Xxh3LongState& state, const uint8_t* data, uint64_t blocks) {
  __m256i acc0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(state.acc));
  __m256i acc1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(state.acc + 4));
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint8_t* p = data + b * kXxh3BlockBytes;
    // Lanes 0-3 (sum0*) and 4-7 (sum1*) of the stripes, even and odd stripes apart: four chains.
    __m256i sum0a = stripe_avx2(p, XXH3_kSecret), sum1a = stripe_avx2(p + 32, XXH3_kSecret + 32);
    __m256i sum0b = stripe_avx2(p + 64, XXH3_kSecret + 8), sum1b = stripe_avx2(p + 96, XXH3_kSecret + 40);
    for (uint64_t s = 2; s < kStripesPerBlock; s += 2) {
      const uint8_t* q = p + 64 * s;
      const uint8_t* k = XXH3_kSecret + 8 * s;
      sum0a = _mm256_add_epi64(sum0a, stripe_avx2(q, k));
      sum1a = _mm256_add_epi64(sum1a, stripe_avx2(q + 32, k + 32));
      sum0b = _mm256_add_epi64(sum0b, stripe_avx2(q + 64, k + 8));
      sum1b = _mm256_add_epi64(sum1b, stripe_avx2(q + 96, k + 40));
    }
    acc0 = simd::xxh3_scramble_avx2(_mm256_add_epi64(acc0, _mm256_add_epi64(sum0a, sum0b)),
                                    XXH3_kSecret + kScrambleKey);
    acc1 = simd::xxh3_scramble_avx2(_mm256_add_epi64(acc1, _mm256_add_epi64(sum1a, sum1b)),
                                    XXH3_kSecret + kScrambleKey + 32);
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(state.acc), acc0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(state.acc + 4), acc1);
}

PULSE_XXH3_AVX2 void stripes_avx2(Xxh3LongState& state, const uint8_t* data, uint64_t n, const uint8_t* key) {
  __m256i acc0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(state.acc));
  __m256i acc1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(state.acc + 4));
  for (uint64_t s = 0; s < n; ++s) {
    acc0 = _mm256_add_epi64(acc0, stripe_avx2(data + 64 * s, key + 8 * s));
    acc1 = _mm256_add_epi64(acc1, stripe_avx2(data + 64 * s + 32, key + 8 * s + 32));
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(state.acc), acc0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(state.acc + 4), acc1);
}
#endif

using AccumulateFn = void (*)(Xxh3LongState&, const uint8_t*, uint64_t);
using StripesFn = void (*)(Xxh3LongState&, const uint8_t*, uint64_t, const uint8_t*);

/// One variant: the block loop and the finish's stripes, on the same ISA.
struct Xxh3Variant {
  AccumulateFn fn = nullptr;
  StripesFn stripes = nullptr;
  const char* isa = nullptr;
};

/// The variants this CPU can run, fastest first (portable last), and the forced one.
VariantSelector<Xxh3Variant, 3>& selector() {
  static VariantSelector<Xxh3Variant, 3> s([](auto add) {
#ifdef PULSE_KERNELS_X86
    if (cpu_has(kNeedsAvx512)) add(Xxh3Variant{accumulate_avx512, stripes_avx512, "avx512"});
    if (cpu_has(kNeedsAvx2)) add(Xxh3Variant{accumulate_avx2, stripes_avx2, "avx2"});
#endif
    add(Xxh3Variant{accumulate_portable, stripes_portable, "portable"});
  });
  return s;
}

}  // namespace

void xxh3_long_accumulate(Xxh3LongState& state, const uint8_t* data, uint64_t blocks) {
  if (blocks) selector().current().fn(state, data, blocks);
}

uint64_t xxh3_long_finish(Xxh3LongState& state, const uint8_t* input, uint64_t len) {
  // XXH3_hashLong_internal_loop after its block loop, then XXH3_hashLong_64b_internal's merge.
  const uint64_t done = xxh3_long_block_bytes(len);
  const uint64_t stripes = (len - 1 - done) / XXH_STRIPE_LEN;
  const StripesFn fn = selector().current().stripes;
  fn(state, input + done, stripes, XXH3_kSecret);
  fn(state, input + len - XXH_STRIPE_LEN, 1,
     XXH3_kSecret + sizeof(XXH3_kSecret) - XXH_STRIPE_LEN - XXH_SECRET_LASTACC_START);
  return XXH3_mergeAccs(state.acc, XXH3_kSecret + XXH_SECRET_MERGEACCS_START,
                        static_cast<uint64_t>(len) * XXH_PRIME64_1);
}

uint64_t xxh3_64bits(const void* data, uint64_t len) {
  if (len < kXxh3LongMinBytes) return XXH3_64bits(data, static_cast<size_t>(len));
  const auto* p = static_cast<const uint8_t*>(data);
  Xxh3LongState state;
  xxh3_long_init(state);
  xxh3_long_accumulate(state, p, xxh3_long_block_bytes(len) / kXxh3BlockBytes);
  return xxh3_long_finish(state, p, len);
}

const char* xxh3_long_isa() {
  return selector().isa();
}

bool xxh3_long_supported(const char* isa) {
  return selector().supported(isa);
}

bool xxh3_long_force(const char* isa) {
  return selector().force(isa);
}

}  // namespace pulse::kernels
