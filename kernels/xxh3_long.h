// XXH3-64 of long inputs (> 240 bytes) with the 1024-byte block loop done here on SIMD (AVX-512F, AVX2)
// or by the caller. Debian's libxxhash runs its SSE2 code path (no run-time AVX2 dispatch in that build),
// so the weight hashes of sync/ (tensor_hash, the apply pass) use xxh3_64bits / xxh3_long_accumulate
// below. The encoder's scan kernel (kernels/diff_emit16.h) already holds every 64-byte stripe of base and
// target in registers, so it accumulates them there instead of reading the block again (what both cost:
// bench/RESULTS.md, "Kernel measurements (moved from headers)"). Initial state,
// secret, the last partial block, the last stripe and the final merge come from libxxhash itself (XXH3
// spec, "hashLong"), so every value is exactly XXH3_64bits (seed 0) of the input; tests compare the two
// for every variant.
#pragma once
#include <cstddef>
#include <cstdint>

namespace pulse::kernels {

/// XXH3's long-input accumulators (8 x u64), 64-byte aligned for vector loads.
struct alignas(64) Xxh3LongState {
  uint64_t acc[8];
};

/// Inputs of at least this many bytes use the long-input algorithm (XXH3 hashes shorter ones differently).
constexpr uint64_t kXxh3LongMinBytes = 241;
/// Bytes per accumulation block: 16 stripes of 64 bytes, a scramble after each block.
constexpr uint64_t kXxh3BlockBytes = 1024;

/// The initial accumulators (XXH3_INIT_ACC).
void xxh3_long_init(Xxh3LongState& state);

/// XXH3's default 192-byte secret.
const uint8_t* xxh3_default_secret();

/// Bytes of a `len`-byte input (len >= kXxh3LongMinBytes) that the caller accumulates itself: the full
/// blocks, (len - 1) / 1024 * 1024 bytes (the last block is finished by xxh3_long_finish even when full).
constexpr uint64_t xxh3_long_block_bytes(uint64_t len) {
  return (len - 1) / kXxh3BlockBytes * kXxh3BlockBytes;
}

/// Finishes the hash of `input` (len >= kXxh3LongMinBytes bytes) after the caller accumulated its first
/// xxh3_long_block_bytes(len) bytes into `state` (stripe s of each block with key secret + 8 s, then
/// the scramble): the remaining stripes, the last stripe and the merge. Returns XXH3_64bits(input, len).
uint64_t xxh3_long_finish(Xxh3LongState& state, const uint8_t* input, uint64_t len);

/// Scalar reference of the caller's part (tests): accumulates the block at `block` (1024 bytes).
void xxh3_long_accumulate_block(Xxh3LongState& state, const uint8_t* block);

/// Accumulates the `blocks` consecutive 1024-byte blocks at `data` (any alignment) into `state`: per block
/// its 16 stripes, then the scramble (XXH3 spec, "hashLong": the block loop of libxxhash's
/// XXH3_hashLong_internal_loop). Runs the variant xxh3_long_isa() names; every variant leaves the same
/// state, bit for bit (that of xxh3_long_accumulate_block block by block). Reentrant.
void xxh3_long_accumulate(Xxh3LongState& state, const uint8_t* data, uint64_t blocks);

/// XXH3_64bits(data, len) (seed 0) for any len (data may be null when len is 0): inputs of at least
/// kXxh3LongMinBytes through xxh3_long_accumulate and xxh3_long_finish, shorter ones straight to
/// libxxhash. Reentrant.
uint64_t xxh3_64bits(const void* data, uint64_t len);

/// Which xxh3_long_accumulate variant runs now: "avx512" (AVX-512F), "avx2" or "portable" (libxxhash's
/// code path for the build's baseline ISA: SSE2 on x86-64).
const char* xxh3_long_isa();

/// Whether this CPU (and this build) can run the xxh3_long_accumulate variant `isa`.
bool xxh3_long_supported(const char* isa);

/// Makes the whole process run the xxh3_long_accumulate variant `isa` ("avx512", "avx2", "portable";
/// nullptr: the CPU's fastest again). Returns false (and changes nothing) when this CPU cannot run it.
/// Tests and benchmarks; thread safe (calls already running keep their variant).
bool xxh3_long_force(const char* isa);

}  // namespace pulse::kernels
