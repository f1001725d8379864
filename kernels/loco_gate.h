// The PULSELoCo gate fused with the error-feedback update: one pass over a tensor's FP32 global weights,
// local weights and residual that decides which pseudo-gradient entries a trainer sends at the end of an
// outer round, writes them out sparsely, and leaves in the residual what it did not send.
//
// Source: the PULSE paper's PULSELoCo (sparse DiLoCo: send only the pseudo-gradient entries that would
// change the BF16 weights, keep the rest as error feedback); DiLoCo is Douillard et al. 2023,
// "DiLoCo: Distributed Low-Communication Training of Language Models", arXiv:2311.08105 (the
// pseudo-gradient global - local after H inner steps, applied by an outer Nesterov SGD step).
//
// Per element i of a tensor (all FP32, IEEE 754 round-to-nearest-even, in exactly this order):
//   delta = g[i] - l[i]                       pseudo-gradient of this round
//   s     = r[i] + delta                      plus the error-feedback residual (a NaN s is replaced by
//                                             the canonical quiet NaN 0x7fc00000, see below)
//   fires = gate_open || bf16_rne(g[i]) != bf16_rne(g[i] - s)
//           (BF16 bit patterns compared, kernels/bf16.h: fp32_to_bf16_rne; i.e. "applying the full
//           accumulated update s to the global weights would change the BF16 weights compute uses")
//   fires:     append (index_base + i, s) to (fired_index, fired_value);  r[i] = +0
//   not fired: r[i] = s
// so sent value + new residual == s for every element, exactly (mass conservation: the residual is what
// this rank did not send, never a function of the averaged result).
//
// Special values (defined so that every variant gives the same bits):
//   - s = +-Inf or NaN sets LocoGateResult::nonfinite; the caller must refuse such a round. The entry is
//     still gated by the rule above: it fires unless BF16(g) equals BF16(g - s), which happens when g
//     is NaN (g - s is g quieted: the same BF16 pattern) or when g and g - s both round to the same
//     BF16 infinity (|g| near FLT_MAX); then r keeps the non-finite s.
//   - NaN s is canonicalized to 0x7fc00000 because which NaN payload r + delta returns when both are
//     NaN depends on the operand order the compiler picks for a commutative add.
//   - +-0: bit patterns are compared, so g = -0 with s = -0 (g - s = +0) fires and sends -0.
//   - Subnormals are ordinary values (no flush to zero) as long as the thread runs with the default
//     MXCSR (no FTZ/DAZ); under FTZ/DAZ the variants still agree with each other (they use the same
//     MXCSR-governed FP32 add/sub; the BF16 cast is integer code), but not with IEEE.
//
// Variants, picked at run time (the build never assumes them): "avx512" (AVX-512 F, 16 lanes, register
// compress of the fired lanes), "avx2" (8 lanes, a permutation table to pack the fired lanes), and
// "portable" (the scalar reference every variant must match bit for bit). loco_gate_force makes the
// process use a given one (tests, benchmarks).
#pragma once
#include <cstddef>
#include <cstdint>

namespace pulse::kernels {

/// What one loco_gate call found.
struct LocoGateResult {
  uint64_t fired = 0;      ///< entries written to fired_index / fired_value (0..n)
  bool nonfinite = false;  ///< some s was +-Inf or NaN: the caller refuses the round
};

/// The PULSELoCo gate and error-feedback update over one tensor of `n` FP32 elements (see the file
/// comment for the exact per-element rule and order of FP32 operations).
///   global       g[n], FP32, the shared global weights of the round (read only)
///   local        l[n], FP32, this trainer's weights after its H inner steps (read only)
///   residual     r[n], FP32, in/out: the error-feedback buffer (+0 everywhere before the first round);
///                on return +0 where the entry fired and s where it did not
///   gate_open    every entry fires (pulseloco then sends exactly what dense DiLoCo sends)
///   fired_index  out, uint32, room for n entries: index_base + i of each fired entry, ascending
///   fired_value  out, FP32, room for n entries: s of each fired entry, in the same order
///   index_base   added to every written index (the tensor's offset when a caller gates it in pieces)
/// Returns the fired count and whether any s was non-finite. Alignment: none required. The outputs
/// must not overlap the inputs or each other; `residual` may not alias `global` or `local`. Throws
/// std::invalid_argument when index_base + n exceeds 2^32 (indices would not fit uint32), before
/// touching anything. Thread safety: reentrant; calls on disjoint arrays may run concurrently.
/// Runs the variant loco_gate_isa() names.
LocoGateResult loco_gate(const float* global, const float* local, float* residual, size_t n, bool gate_open,
                         uint32_t* fired_index, float* fired_value, uint32_t index_base = 0);

/// The portable scalar reference alone (same contract as loco_gate).
LocoGateResult loco_gate_portable(const float* global, const float* local, float* residual, size_t n,
                                  bool gate_open, uint32_t* fired_index, float* fired_value,
                                  uint32_t index_base = 0);

/// Which variant loco_gate runs now: "avx512", "avx2" or "portable". Thread safe.
const char* loco_gate_isa();

/// Whether this CPU (and this build) can run the variant `isa` ("avx512", "avx2", "portable").
bool loco_gate_supported(const char* isa);

/// Makes the whole process run variant `isa` ("avx512", "avx2", "portable"; nullptr = the CPU's fastest
/// again). Returns false and changes nothing when the CPU cannot run it or the name is unknown. Meant for
/// tests and benchmarks; thread safe (an atomic), but calls already running keep their variant.
bool loco_gate_force(const char* isa);

}  // namespace pulse::kernels
