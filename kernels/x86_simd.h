// <immintrin.h> for the kernels' x86-64 SIMD variants, where this build can compile them.
//
// The variants are compiled with GCC/Clang target attributes (the build never assumes the ISA; which
// one runs is decided at run time, kernels/cpu_features.h), so they exist only on x86-64 GCC or Clang.
// There PULSE_KERNELS_X86 is defined; everywhere else only the portable kernels are built.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/// Defined (1) where the kernels build their x86-64 SIMD variants.
#define PULSE_KERNELS_X86 1
// GCC 12's AVX-512 headers seed the pass-through operand of unmasked intrinsics with a self-initialized
// "undefined" vector, which -Wmaybe-uninitialized reports at every inlined use; not a bug of the kernels.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif
