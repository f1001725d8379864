// Run-time CPU feature detection and the variant dispatch shared by the SIMD kernel families
// (kernels/diff_scan.h, kernels/diff_emit16.h, kernels/apply_kernels.h, kernels/loco_gate.h).
//
// Each family compiles its SIMD variants with target attributes (the build never assumes them) and
// picks one at run time: the fastest variant whose CPU features this CPU has, unless a test or
// benchmark forces another by name ("avx512", "avx2", "portable"). The pieces here:
//   - CpuFeature / cpu_has: which x86-64 extensions this CPU (and OS: the AVX state is checked
//     through XGETBV by the compiler's runtime) supports, detected once and cached; every family
//     states the exact set each of its variants needs, next to the variant's target attribute;
//   - VariantSelector: a family's variants fastest first (portable last) plus the process-wide
//     forced one (an atomic), giving the *_isa / *_supported / *_force API of every family.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstring>

namespace pulse::kernels {

/// One x86-64 instruction-set extension a kernel variant may need, as a bit of a CpuFeatures set.
enum CpuFeature : uint32_t {
  kCpuPopcnt = 1u << 0,       ///< POPCNT
  kCpuBmi = 1u << 1,          ///< BMI1 (tzcnt, andn, ...)
  kCpuBmi2 = 1u << 2,         ///< BMI2 (bzhi, pdep, ...)
  kCpuLzcnt = 1u << 3,        ///< LZCNT (ABM)
  kCpuAvx2 = 1u << 4,         ///< AVX2
  kCpuAvx512F = 1u << 5,      ///< AVX-512 Foundation
  kCpuAvx512BW = 1u << 6,     ///< AVX-512 Byte and Word
  kCpuAvx512VL = 1u << 7,     ///< AVX-512 Vector Length (128/256-bit forms)
  kCpuAvx512Vbmi = 1u << 8,   ///< AVX-512 VBMI (vpermb, vpermt2b)
  kCpuAvx512Vbmi2 = 1u << 9,  ///< AVX-512 VBMI2 (vpcompressb, vpexpandb)
};

/// A set of CpuFeature bits (OR them together).
using CpuFeatures = uint32_t;

/// Whether this CPU has every feature in `required` (an empty set: true). Detected on the first call
/// (GCC/Clang __builtin_cpu_supports) and cached; thread safe. Always false for a non-empty set when
/// the build is not x86-64 GCC/Clang, so only the portable variants run there.
bool cpu_has(CpuFeatures required);

/// The table entry of a family whose variants are one function each (VariantSelector's `Variant`):
/// the variant's kernel and its name.
template <typename Fn>
struct KernelVariant {
  Fn fn = nullptr;            ///< the kernel
  const char* isa = nullptr;  ///< its name: "avx512", "avx2", "portable", ...
};

/// The variants of one kernel family that this CPU can run, fastest first, and which one runs now.
/// `Variant` is the family's table entry: any copyable struct with a `const char* isa` member (its
/// name: "avx512", "avx2", "portable", ...) beside its function pointers. At most `kMax` variants.
///
/// A family keeps one selector in a function-local static, built from a callable that adds the
/// variants the CPU supports (checked with cpu_has), fastest first and the portable one last, so
/// that a selector is never empty:
///
///     VariantSelector<Variant, 3>& selector() {
///       static VariantSelector<Variant, 3> s([](auto add) {
///         if (cpu_has(kAvx2Needs)) add(Variant{fn_avx2, "avx2"});
///         add(Variant{fn_portable, "portable"});
///       });
///       return s;
///     }
///
/// current(), isa(), supported() and force() are thread safe; force() is an atomic store, so calls
/// already running keep the variant they read.
template <typename Variant, int kMax>
class VariantSelector {
 public:
  /// Calls fill(add) once, where add(const Variant&) appends a variant (fastest first).
  template <typename Fill>
  explicit VariantSelector(Fill fill) {
    fill([this](const Variant& v) {
      if (n_ < kMax) all_[n_++] = v;
    });
  }

  VariantSelector(const VariantSelector&) = delete;
  VariantSelector& operator=(const VariantSelector&) = delete;

  /// The variant that runs now: the forced one, else the fastest (the first added).
  const Variant& current() const {
    const int f = forced_.load(std::memory_order_relaxed);
    return all_[f < 0 ? 0 : f];
  }

  /// Name of the variant that runs now.
  const char* isa() const { return current().isa; }

  /// Whether `isa` names a variant this CPU (and this build) can run; false for nullptr.
  bool supported(const char* isa) const { return find(isa) >= 0; }

  /// Makes the whole process run the variant `isa` (nullptr: the fastest again). Returns false and
  /// changes nothing when the name is unknown or the CPU cannot run that variant.
  bool force(const char* isa) {
    if (!isa) {
      forced_.store(-1);
      return true;
    }
    const int i = find(isa);
    if (i < 0) return false;
    forced_.store(i);
    return true;
  }

 private:
  int find(const char* isa) const {
    if (!isa) return -1;
    for (int i = 0; i < n_; ++i)
      if (std::strcmp(all_[i].isa, isa) == 0) return i;
    return -1;
  }

  Variant all_[kMax] = {};
  int n_ = 0;
  std::atomic<int> forced_{-1};  // index into all_; -1 = the fastest
};

}  // namespace pulse::kernels
