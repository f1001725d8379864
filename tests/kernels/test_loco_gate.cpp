// The PULSELoCo gate fused with the error-feedback update (kernels/loco_gate.h): every variant (forced one
// at a time; a variant this CPU cannot run is skipped with a printed warning) gives exactly the bits of a
// brute-force scalar reference written here, on values placed at and around BF16 rounding midpoints, on
// all 65,536 BF16 patterns as the global (subnormals, infinities, NaNs), and at lengths around the vector
// widths; the residual conserves mass exactly; gate open fires everything; non-finite s is reported.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/bf16.h"
#include "kernels/loco_gate.h"

using namespace pulse::kernels;

namespace {

const char* const kVariants[] = {"avx512", "avx2", "portable"};

uint32_t bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  return b;
}

float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, 4);
  return x;
}

/// BF16 round-to-nearest-even written independently of kernels/bf16.h: keep the high half, round up when
/// the dropped half is above the midpoint or on it with an odd kept half; NaN -> quiet NaN, sign kept.
uint16_t ref_bf16(float x) {
  const uint32_t b = bits(x);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);
  uint32_t kept = b >> 16;
  const uint32_t dropped = b & 0xffffu;
  if (dropped > 0x8000u || (dropped == 0x8000u && (kept & 1u))) ++kept;
  return static_cast<uint16_t>(kept);
}

struct GateOut {
  std::vector<uint32_t> index;
  std::vector<float> value, residual;
  bool nonfinite = false;
};

/// The rule of loco_gate.h, element by element.
GateOut ref_gate(const std::vector<float>& g, const std::vector<float>& l, const std::vector<float>& r,
                 bool open, uint32_t base) {
  GateOut out;
  out.residual.resize(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const float delta = g[i] - l[i];
    float s = r[i] + delta;
    if (std::isnan(s)) s = from_bits(0x7fc00000u);
    if (!std::isfinite(s)) out.nonfinite = true;
    if (open || ref_bf16(g[i]) != ref_bf16(g[i] - s)) {
      out.index.push_back(base + static_cast<uint32_t>(i));
      out.value.push_back(s);
      out.residual[i] = 0.0f;
    } else {
      out.residual[i] = s;
    }
  }
  return out;
}

/// s of every element as the rule computes it (for the conservation check).
std::vector<float> s_of(const std::vector<float>& g, const std::vector<float>& l,
                        const std::vector<float>& r) {
  std::vector<float> s(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    s[i] = r[i] + (g[i] - l[i]);
    if (std::isnan(s[i])) s[i] = from_bits(0x7fc00000u);
  }
  return s;
}

constexpr uint32_t kSentinel = 0xdeadbeefu;
constexpr size_t kGuard = 32;

/// Runs loco_gate (the forced variant) on copies placed `misalign` floats past an aligned start, with
/// guard entries after the n output slots that must stay untouched.
GateOut run_gate(const std::vector<float>& g, const std::vector<float>& l, const std::vector<float>& r,
                 bool open, uint32_t base, size_t misalign = 0) {
  const size_t n = g.size();
  std::vector<float> gb(n + misalign), lb(n + misalign), rb(n + misalign);
  std::copy(g.begin(), g.end(), gb.begin() + misalign);
  std::copy(l.begin(), l.end(), lb.begin() + misalign);
  std::copy(r.begin(), r.end(), rb.begin() + misalign);
  std::vector<uint32_t> index(misalign + n + kGuard, kSentinel);
  std::vector<float> value(misalign + n + kGuard, from_bits(kSentinel));
  const LocoGateResult res = loco_gate(gb.data() + misalign, lb.data() + misalign, rb.data() + misalign, n,
                                       open, index.data() + misalign, value.data() + misalign, base);
  REQUIRE(res.fired <= n);
  for (size_t j = misalign + n; j < index.size(); ++j) {
    REQUIRE(index[j] == kSentinel);
    REQUIRE(bits(value[j]) == kSentinel);
  }
  for (size_t j = 0; j < misalign; ++j) REQUIRE(index[j] == kSentinel);
  GateOut out;
  out.index.assign(index.begin() + misalign, index.begin() + misalign + res.fired);
  out.value.assign(value.begin() + misalign, value.begin() + misalign + res.fired);
  out.residual.assign(rb.begin() + misalign, rb.end());
  out.nonfinite = res.nonfinite;
  return out;
}

std::vector<uint32_t> bit_vector(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = bits(v[i]);
  return b;
}

/// got == want element-wise (bit patterns); a failure names the first differing element only (printing
/// whole million-element vectors would take minutes).
void require_same_bits(const std::vector<uint32_t>& got, const std::vector<uint32_t>& want,
                       const char* what) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      INFO(what << " differs first at entry " << i << " of " << got.size());
      REQUIRE(got[i] == want[i]);
    }
}

void require_equal(const GateOut& got, const GateOut& want) {
  require_same_bits(got.index, want.index, "fired_index");
  require_same_bits(bit_vector(got.value), bit_vector(want.value), "fired_value");
  require_same_bits(bit_vector(got.residual), bit_vector(want.residual), "residual");
  REQUIRE(got.nonfinite == want.nonfinite);
}

/// Sent value + new residual == s, element by element and bit for bit: a fired element sends s exactly and
/// leaves +0; an element that did not fire keeps s exactly.
void require_conserved(const GateOut& got, const std::vector<float>& s, uint32_t base) {
  size_t j = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool fired = j < got.index.size() && got.index[j] == base + i;
    if (fired) {
      REQUIRE(bits(got.value[j]) == bits(s[i]));
      REQUIRE(bits(got.residual[i]) == 0u);
      ++j;
    } else {
      REQUIRE(bits(got.residual[i]) == bits(s[i]));
    }
    if (std::isfinite(s[i])) REQUIRE((fired ? got.value[j - 1] : 0.0f) + got.residual[i] == s[i]);
  }
  REQUIRE(j == got.index.size());
}

/// Calls body(name) with each variant forced; variants this CPU lacks are skipped with a warning.
template <typename F>
void for_each_variant(F body) {
  for (const char* isa : kVariants) {
    if (!loco_gate_supported(isa)) {
      WARN("loco_gate variant '" << isa << "' skipped: this CPU cannot run it");
      REQUIRE_FALSE(loco_gate_force(isa));
      continue;
    }
    REQUIRE(loco_gate_force(isa));
    REQUIRE(std::string(loco_gate_isa()) == isa);
    INFO("variant " << isa);
    try {
      body(isa);
    } catch (...) {
      loco_gate_force(nullptr);
      throw;
    }
    loco_gate_force(nullptr);
  }
}

/// A finite float whose high half is `hi` (a BF16 pattern) and low half `lo`.
float with_halves(uint32_t hi, uint32_t lo) {
  return from_bits((hi << 16) | lo);
}

}  // namespace

TEST_CASE("loco_gate: the test's BF16 reference equals kernels/bf16.h on every high half",
          "[kernels][loco]") {
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) {
      const float x = with_halves(hi, lo);
      REQUIRE(ref_bf16(x) == fp32_to_bf16_rne(x));
    }
}

TEST_CASE("loco_gate: ties to even decide firing exactly at the midpoints", "[kernels][loco]") {
  // g = 1.00390625 (0x3f808000) lies on the midpoint of BF16 0x3f80 and 0x3f81 and rounds to 0x3f80.
  const float g = from_bits(0x3f808000u);
  // g - s on the midpoint 0x3f7f8000 also rounds (to even) to 0x3f80: no fire though s != 0.
  const float s_same = g - from_bits(0x3f7f8000u);
  // g - s on the midpoint 0x3f818000 rounds to 0x3f82: fires.
  const float s_diff = g - from_bits(0x3f818000u);
  REQUIRE(g - s_same == from_bits(0x3f7f8000u));
  REQUIRE(g - s_diff == from_bits(0x3f818000u));
  for_each_variant([&](const char*) {
    const std::vector<float> gv = {g, g}, lv = {g, g}, rv = {s_same, s_diff};
    const GateOut got = run_gate(gv, lv, rv, false, 0);
    REQUIRE(got.index == std::vector<uint32_t>{1});
    REQUIRE(bits(got.value[0]) == bits(s_diff));
    REQUIRE(bits(got.residual[0]) == bits(s_same));
    REQUIRE(bits(got.residual[1]) == 0u);
  });
}

TEST_CASE("loco_gate: random values at and around BF16 midpoints equal the reference", "[kernels][loco]") {
  std::mt19937_64 rng(2311);
  const uint32_t lows[] = {0x0000u, 0x0001u, 0x7ffeu, 0x7fffu, 0x8000u, 0x8001u, 0xfffeu, 0xffffu};
  const size_t n = 20011;  // not a multiple of 8 or 16
  std::vector<float> g(n), l(n), r(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t sign = (rng() & 1) << 15;
    const uint32_t hi = sign | (0x2000u + static_cast<uint32_t>(rng() % 0x3f00u));  // finite, normal
    g[i] = with_halves(hi, rng() % 3 ? lows[rng() % 8] : static_cast<uint32_t>(rng() & 0xffff));
    // t = g - s lands on or next to a midpoint of g's BF16 value or a neighbour (1 or 2 ULP away).
    const int dk = static_cast<int>(rng() % 5) - 2;
    const float t = with_halves(static_cast<uint32_t>(static_cast<int>(hi) + dk), lows[rng() % 8]);
    const float s = g[i] - t;
    switch (rng() % 3) {
      case 0:  // fresh residual from an earlier round, no movement this round
        l[i] = g[i];
        r[i] = s;
        break;
      case 1:  // the whole s is this round's pseudo-gradient
        l[i] = g[i] - s;
        r[i] = 0.0f;
        break;
      default:  // split between residual and pseudo-gradient
        l[i] = g[i] - s * 0.375f;
        r[i] = s * 0.625f;
        break;
    }
  }
  const GateOut want = ref_gate(g, l, r, false, 0);
  INFO("fired " << want.index.size() << " of " << n);
  REQUIRE(want.index.size() > n / 10);  // both outcomes are well represented
  REQUIRE(want.index.size() < n - n / 10);
  const std::vector<float> s = s_of(g, l, r);
  for_each_variant([&](const char*) {
    for (size_t misalign : {0, 1, 3}) {
      const GateOut got = run_gate(g, l, r, false, 0, misalign);
      require_equal(got, want);
      require_conserved(got, s, 0);
    }
    // loco_gate_portable is the reference whatever is forced.
    std::vector<float> rr = r;
    std::vector<uint32_t> idx(n);
    std::vector<float> val(n);
    const LocoGateResult pr =
        loco_gate_portable(g.data(), l.data(), rr.data(), n, false, idx.data(), val.data());
    REQUIRE(pr.fired == want.index.size());
    require_same_bits(bit_vector(rr), bit_vector(want.residual), "portable residual");
  });
}

TEST_CASE("loco_gate: all 65,536 BF16 patterns as the global, several s each", "[kernels][loco]") {
  // s values: zeros, fp32 subnormals, half a BF16 ULP of g (a tie) and one fp32 ULP either side of it,
  // one BF16 ULP, large, infinite, NaN, and +-g itself.
  std::vector<float> g, l, r;
  for (uint32_t p = 0; p < 65536; ++p) {
    const float gv = bf16_to_fp32(static_cast<uint16_t>(p));
    const uint32_t gb = bits(gv);
    // Half a BF16 ULP of g, a power of two: 2^(E - 135) for biased exponent E (an FP32 subnormal for
    // E < 9); subnormal and zero g share E = 1's spacing (half of 2^-133).
    const uint32_t e = std::max<uint32_t>((gb >> 23) & 0xffu, 1u);
    const float half_ulp = from_bits(e >= 9 ? (e - 8) << 23 : 1u << (e + 14));
    const float ss[] = {0.0f,
                        -0.0f,
                        from_bits(0x00000001u),
                        from_bits(0x80000001u),
                        half_ulp,
                        -half_ulp,
                        std::nextafter(half_ulp, 1e30f),
                        std::nextafter(half_ulp, 0.0f),
                        -std::nextafter(half_ulp, 1e30f),
                        2.0f * half_ulp,
                        -2.0f * half_ulp,
                        1.0f,
                        -1e30f,
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN(),
                        gv,
                        -gv};
    for (size_t k = 0; k < sizeof ss / sizeof ss[0]; ++k) {
      g.push_back(gv);
      if (k % 2) {  // s arrives as the residual (l = g: delta = 0, or NaN for non-finite g)
        l.push_back(gv);
        r.push_back(ss[k]);
      } else {  // s arrives as this round's pseudo-gradient
        l.push_back(gv - ss[k]);
        r.push_back(0.0f);
      }
    }
  }
  const GateOut want = ref_gate(g, l, r, false, 7);
  REQUIRE(want.nonfinite);
  const std::vector<float> s = s_of(g, l, r);

  // What the reference does with special globals (the contract of loco_gate.h).
  size_t j = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool fired = j < want.index.size() && want.index[j] == 7 + i;
    j += fired;
    const uint32_t gb = bits(g[i]);
    if ((gb & 0x7fffffffu) > 0x7f800000u) {  // NaN global: s is the canonical NaN, never fires
      REQUIRE(bits(s[i]) == 0x7fc00000u);
      REQUIRE_FALSE(fired);
    } else if ((gb & 0x7fffffffu) == 0x7f800000u) {  // infinite global: s is never finite
      REQUIRE_FALSE(std::isfinite(s[i]));
    } else if (!std::isfinite(s[i])) {  // finite global (|g| < BF16 max), non-finite s: fires
      REQUIRE(fired);
    } else if (s[i] == 0.0f) {  // a zero s never changes a finite non-zero g; +-0 globals by bits
      if (g[i] != 0.0f) REQUIRE_FALSE(fired);
    }
    // Subnormal BF16 globals are ordinary: g - s is exact or rounded like any value, never flushed.
    if ((gb & 0x7f800000u) == 0 && (gb & 0x007fffffu) != 0 && s[i] == -g[i]) REQUIRE(fired);  // g -> 2g
  }
  for_each_variant([&](const char*) {
    const GateOut got = run_gate(g, l, r, false, 7);
    require_equal(got, want);
    require_conserved(got, s, 7);
  });
}

TEST_CASE("loco_gate: lengths around the vector widths, index_base, gate open", "[kernels][loco]") {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> weight(0.0f, 0.02f), step(0.0f, 3e-5f);
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000}) {
    std::vector<float> g(n), l(n), r(n);
    for (size_t i = 0; i < n; ++i) {
      g[i] = weight(rng);
      l[i] = g[i] + step(rng);
      r[i] = rng() % 2 ? 0.0f : step(rng);
    }
    for (uint32_t base : {0u, 12345u, 0xffffffffu - static_cast<uint32_t>(n)}) {
      const std::vector<float> s = s_of(g, l, r);
      const GateOut want = ref_gate(g, l, r, false, base);
      REQUIRE_FALSE(want.nonfinite);
      for_each_variant([&](const char*) {
        INFO("n " << n << " base " << base);
        const GateOut got = run_gate(g, l, r, false, base, n % 3);
        require_equal(got, want);
        require_conserved(got, s, base);
        // Gate open: everything fires, in order, with its s; the residual is all +0.
        const GateOut open = run_gate(g, l, r, true, base);
        require_equal(open, ref_gate(g, l, r, true, base));
        REQUIRE(open.index.size() == n);
        for (size_t i = 0; i < n; ++i) {
          REQUIRE(open.index[i] == base + i);
          REQUIRE(bits(open.value[i]) == bits(s[i]));
          REQUIRE(bits(open.residual[i]) == 0u);
        }
      });
    }
  }
}

TEST_CASE("loco_gate: the residual carries over rounds and conserves mass each round", "[kernels][loco]") {
  // Three outer rounds on one tensor: each round's s is the carried residual plus the new pseudo-gradient,
  // and what was sent plus the residual left is that s exactly (the residual is what this rank did not
  // send, not a function of anything averaged).
  std::mt19937_64 rng(5);
  std::normal_distribution<float> weight(0.0f, 0.02f), step(0.0f, 2e-5f);
  const size_t n = 4099;
  std::vector<float> g(n), l(n);
  for (auto& x : g) x = weight(rng);
  for_each_variant([&](const char*) {
    std::vector<float> r(n, 0.0f), gg = g;
    for (int round = 0; round < 3; ++round) {
      for (size_t i = 0; i < n; ++i) l[i] = gg[i] + step(rng);
      const std::vector<float> s = s_of(gg, l, r);
      const GateOut want = ref_gate(gg, l, r, false, 0);
      const GateOut got = run_gate(gg, l, r, false, 0);
      require_equal(got, want);
      require_conserved(got, s, 0);
      r = got.residual;
      for (size_t j = 0; j < got.index.size(); ++j) gg[got.index[j]] -= got.value[j];  // outer lr 1, 1 rank
    }
  });
}

TEST_CASE("loco_gate: a non-finite s anywhere is reported", "[kernels][loco]") {
  const size_t n = 1000;
  std::vector<float> g(n, 0.5f), l(n, 0.5f), r(n, 0.0f);
  for_each_variant([&](const char*) {
    REQUIRE_FALSE(run_gate(g, l, r, false, 0).nonfinite);
    for (size_t pos : {0, 5, 7, 8, 15, 16, 17, 991, 992, 999})
      for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()}) {
        INFO("pos " << pos << " value " << bad);
        std::vector<float> rb = r;
        rb[pos] = bad;
        const GateOut got = run_gate(g, l, rb, false, 0);
        require_equal(got, ref_gate(g, l, rb, false, 0));
        REQUIRE(got.nonfinite);
        REQUIRE(got.index == std::vector<uint32_t>{static_cast<uint32_t>(pos)});  // finite g: it fires
      }
  });
}

TEST_CASE("loco_gate: indices past 2^32 are refused before anything is written", "[kernels][loco]") {
  std::vector<float> g(10, 1.0f), l(10, 2.0f), r(10, 0.0f);
  std::vector<uint32_t> idx(10, kSentinel);
  std::vector<float> val(10);
  CHECK_THROWS_AS(loco_gate(g.data(), l.data(), r.data(), 10, true, idx.data(), val.data(), 0xfffffffbu),
                  std::invalid_argument);
  CHECK_THROWS_AS(
      loco_gate_portable(g.data(), l.data(), r.data(), 10, true, idx.data(), val.data(), 0xfffffffbu),
      std::invalid_argument);
  CHECK(idx[0] == kSentinel);
  CHECK(r[0] == 0.0f);
  CHECK(loco_gate(g.data(), l.data(), r.data(), 10, true, idx.data(), val.data(), 0xfffffff6u).fired == 10);
  CHECK(idx[9] == 0xffffffffu);
}

TEST_CASE("loco_gate: force and isa name the variant that runs", "[kernels][loco]") {
  const std::string fastest = loco_gate_isa();
  INFO("fastest variant on this CPU: " << fastest);
  CHECK(loco_gate_supported("portable"));
  CHECK_FALSE(loco_gate_supported("sse9"));
  CHECK_FALSE(loco_gate_force("sse9"));
  CHECK(loco_gate_isa() == fastest);
  REQUIRE(loco_gate_force("portable"));
  CHECK(std::string(loco_gate_isa()) == "portable");
  REQUIRE(loco_gate_force(nullptr));
  CHECK(loco_gate_isa() == fastest);
  WARN("loco_gate runs '" << fastest << "' by default on this CPU");
}
