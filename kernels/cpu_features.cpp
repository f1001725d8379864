#include "kernels/cpu_features.h"

namespace pulse::kernels {

namespace {

/// The CpuFeature bits this CPU has (GCC/Clang's runtime checks CPUID and, for the AVX families,
/// that the OS saves the vector state: XGETBV).
CpuFeatures detect() {
  CpuFeatures f = 0;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  // __builtin_cpu_supports takes string literals only, hence one line per feature.
  if (__builtin_cpu_supports("popcnt")) f |= kCpuPopcnt;
  if (__builtin_cpu_supports("bmi")) f |= kCpuBmi;
  if (__builtin_cpu_supports("bmi2")) f |= kCpuBmi2;
  if (__builtin_cpu_supports("lzcnt")) f |= kCpuLzcnt;
  if (__builtin_cpu_supports("avx2")) f |= kCpuAvx2;
  if (__builtin_cpu_supports("avx512f")) f |= kCpuAvx512F;
  if (__builtin_cpu_supports("avx512bw")) f |= kCpuAvx512BW;
  if (__builtin_cpu_supports("avx512vl")) f |= kCpuAvx512VL;
  if (__builtin_cpu_supports("avx512vbmi")) f |= kCpuAvx512Vbmi;
  if (__builtin_cpu_supports("avx512vbmi2")) f |= kCpuAvx512Vbmi2;
#endif
  return f;
}

}  // namespace

bool cpu_has(CpuFeatures required) {
  static const CpuFeatures have = detect();
  return (have & required) == required;
}

}  // namespace pulse::kernels
