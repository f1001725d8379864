// The fused diff-and-emit kernel for 2-byte elements (kernels/diff_emit16.h): every variant this CPU can
// run ("avx512", "avx2", forced through diff_emit16_force) and the portable one give exactly the streams
// of an element-by-element reference; the SIMD variants' fused XXH3 equals libxxhash; whole patches are
// the same bytes whichever variant encodes them. A variant the CPU lacks is reported with a WARN.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kernels/apply_kernels.h"
#include "kernels/diff_emit16.h"
#include "kernels/xxh3_long.h"
#include "sync/hash.h"
#include "sync/patch.h"

using namespace pulse::kernels;
using namespace pulse::sync;

namespace {

struct Streams {
  std::vector<uint8_t> head, tail, lo, hi;
  uint64_t changes = 0;
};

/// Element by element, as FORMAT.md defines the streams.
Streams reference(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, bool delta) {
  Streams s;
  uint64_t next = 0;
  for (uint64_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i]) continue;
    uint64_t gap = i - next;
    next = i + 1;
    s.head.push_back(static_cast<uint8_t>((gap & 127) | (gap >= 128 ? 128 : 0)));
    for (uint64_t r = gap >> 7; r; r >>= 7)
      s.tail.push_back(static_cast<uint8_t>((r & 127) | (r >= 128 ? 128 : 0)));
    uint16_t v = b[i];
    if (delta) {
      const int16_t d = static_cast<int16_t>(static_cast<uint16_t>(b[i] - a[i]));
      v = static_cast<uint16_t>((static_cast<uint16_t>(d) << 1) ^ (d < 0 ? 0xffff : 0));
    }
    s.lo.push_back(static_cast<uint8_t>(v));
    s.hi.push_back(static_cast<uint8_t>(v >> 8));
    ++s.changes;
  }
  return s;
}

/// The kernel over [0, n) in calls of `step` elements, as the encoder calls it block by block.
Streams run(bool portable, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, bool delta,
            uint64_t step) {
  const uint64_t n = a.size();
  std::vector<uint8_t> head(emit16_room(n) + 64), tail(emit16_tail_room(n) + 9 * (n / step + 2)),
      lo(emit16_room(n) + 64), hi(emit16_room(n) + 64);
  Emit16Cursor c{head.data(), tail.data(), lo.data(), hi.data(), 0};
  Streams s;
  const auto* pa = reinterpret_cast<const uint8_t*>(a.data());
  const auto* pb = reinterpret_cast<const uint8_t*>(b.data());
  for (uint64_t start = 0; start < n; start += step) {
    const uint64_t cnt = std::min(step, n - start);
    s.changes += portable ? diff_emit16_portable(pa + 2 * start, pb + 2 * start, start, cnt, delta, c)
                          : diff_emit16(pa + 2 * start, pb + 2 * start, start, cnt, delta, c);
  }
  s.head.assign(head.data(), c.head);
  s.tail.assign(tail.data(), c.tail);
  s.lo.assign(lo.data(), c.lo);
  s.hi.assign(hi.data(), c.hi);
  return s;
}

/// The variants to test: every one this CPU runs (a WARN names those it lacks), "portable" last.
std::vector<const char*> emit_isas() {
  std::vector<const char*> out;
  for (const char* isa : {"avx512", "avx2", "portable"}) {
    if (diff_emit16_supported(isa))
      out.push_back(isa);
    else
      WARN("diff_emit16 variant '" << isa << "' not tested: this CPU cannot run it");
  }
  return out;
}

/// Runs diff_emit16 as variant `isa` while alive; the CPU's fastest again afterwards, even on a failed
/// REQUIRE.
struct EmitIsa {
  explicit EmitIsa(const char* isa) { REQUIRE(diff_emit16_force(isa)); }
  ~EmitIsa() { diff_emit16_force(nullptr); }
};

void check_same(const Streams& got, const Streams& want) {
  REQUIRE(got.changes == want.changes);
  REQUIRE(got.head == want.head);
  REQUIRE(got.tail == want.tail);
  REQUIRE(got.lo == want.lo);
  REQUIRE(got.hi == want.hi);
}

/// The portable path and every emit variant, called `step` elements at a time for each step, in both
/// value modes, give the reference streams.
void check_every_variant(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                         std::initializer_list<uint64_t> steps) {
  for (bool delta : {false, true})
    for (uint64_t step : steps) {
      INFO("delta " << delta << " step " << step);
      const Streams want = reference(a, b, delta);
      check_same(run(true, a, b, delta, step), want);
      for (const char* isa : emit_isas()) {
        INFO("variant " << isa);
        EmitIsa use(isa);
        check_same(run(false, a, b, delta, step), want);
      }
    }
}

}  // namespace

TEST_CASE("diff_emit16: every variant and the portable kernel equal the element-wise streams",
          "[sync][emit16]") {
  const std::vector<const char*> isas = emit_isas();
  std::mt19937_64 rng(7);
  for (uint64_t n : {0ull, 1ull, 7ull, 8ull, 9ull, 31ull, 32ull, 33ull, 63ull, 64ull, 65ull, 95ull, 127ull,
                     1000ull, 40000ull, 70001ull}) {
    for (double density : {0.0, 0.002, 0.01, 0.07, 0.3, 0.5, 0.9, 1.0}) {
      std::vector<uint16_t> a(n), b(n);
      std::bernoulli_distribution flip(density);
      for (uint64_t i = 0; i < n; ++i) {
        a[i] = static_cast<uint16_t>(rng());
        // +-1 ULP mostly, sometimes any bit pattern (signed wrap-around in delta mode).
        b[i] = !flip(rng) ? a[i] : static_cast<uint16_t>(rng() % 4 ? a[i] + (rng() % 2 ? 1 : -1) : rng() | 1);
        if (b[i] == a[i] && density == 1.0) b[i] = static_cast<uint16_t>(a[i] ^ 0x8000);  // -0 vs +0 style
      }
      if (n > 0 && density > 0) b[n - 1] = static_cast<uint16_t>(a[n - 1] + 7);  // last element changed
      if (n > 1 && density > 0) b[0] = static_cast<uint16_t>(a[0] - 3);          // first element changed
      for (bool delta : {false, true})
        for (uint64_t step : {32768ull, 1000ull, 7ull}) {
          INFO("n " << n << " density " << density << " delta " << delta << " step " << step);
          const Streams want = reference(a, b, delta);
          check_same(run(true, a, b, delta, step), want);
          for (const char* isa : isas) {
            INFO("variant " << isa);
            EmitIsa use(isa);
            check_same(run(false, a, b, delta, step), want);
          }
        }
    }
  }
}

TEST_CASE("diff_emit16: long gaps right after dense runs equal the element-wise streams", "[sync][emit16]") {
  // The SIMD kernels predict one-byte first gaps where the previous window was dense; gaps of
  // 127..20000 elements after dense runs (in one call and across calls) must still get their tails.
  std::mt19937_64 rng(5);
  std::vector<uint16_t> a, b;
  for (uint64_t hole : {127ull, 128ull, 129ull, 200ull, 16383ull, 16384ull, 300ull, 20000ull, 1ull}) {
    for (int i = 0; i < 5000; ++i) {  // a dense run (~30% changed)
      a.push_back(static_cast<uint16_t>(rng()));
      b.push_back(rng() % 10 < 3 ? static_cast<uint16_t>(a.back() + 1) : a.back());
    }
    for (uint64_t i = 0; i < hole; ++i) {
      a.push_back(static_cast<uint16_t>(rng()));
      b.push_back(a.back());
    }
    a.push_back(1);
    b.push_back(2);
  }
  check_every_variant(a, b, {32768, 4096, 1000});
}

TEST_CASE("diff_emit16: groups of every change count, sparse and dense, equal the element-wise streams",
          "[sync][emit16]") {
  // The AVX2 kernel emits a 64-element group of <= 8 changes change by change (8 slots where the
  // previous window was dense, else 4 + 4) and bigger ones through the sub-group table: every
  // count 0..64, at random lanes, after a sparse and after a dense stretch, in tiles cut by the calls.
  std::mt19937_64 rng(11);
  std::vector<uint16_t> a, b;
  for (int stretch = 0; stretch < 2; ++stretch) {
    for (int i = 0; i < 8192; ++i) {  // sparse (1%), then dense (~20%)
      a.push_back(static_cast<uint16_t>(rng()));
      b.push_back(rng() % 100 < (stretch ? 20 : 1) ? static_cast<uint16_t>(a.back() - 1) : a.back());
    }
    for (int k = 0; k <= 64; ++k)
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<int> lanes(64);
        for (int l = 0; l < 64; ++l) lanes[l] = l;
        std::shuffle(lanes.begin(), lanes.end(), rng);
        std::vector<bool> changed(64, false);
        for (int l = 0; l < k; ++l) changed[lanes[l]] = true;
        for (int l = 0; l < 64; ++l) {
          a.push_back(static_cast<uint16_t>(rng()));
          b.push_back(changed[l] ? static_cast<uint16_t>(a.back() ^ (1 + rng() % 0xffff)) : a.back());
        }
      }
  }
  REQUIRE(a.size() % 64 == 0);  // the group boundaries above are the kernels' (calls start at 0 mod 64)
  check_every_variant(a, b, {32768, 4096, 576, 64});
}
TEST_CASE("diff_emit16: every path of the windowed SIMD kernels, switched mid-call, equals the streams",
          "[sync][emit16]") {
  // The SIMD kernels scan 8192-element windows and pick each window's path by the changes in the one
  // before (Emit16Cursor::recent_changes, carried across calls): AVX-512 one pass (from 2.2%) or two
  // passes; AVX2 groups by the set bits of the non-empty ones (below 2%), group by group with 4 slots
  // (2-3.1%) or with 8 (from 3.1%). Stretches of 0.5%, 2.5%, 10%, 0%, 1.5% and 3.5%, each two windows
  // and a bit long, in calls that cut windows anywhere, visit every path and every switch between them.
  std::mt19937_64 rng(13);
  std::vector<uint16_t> a, b;
  for (int per_mille : {5, 25, 100, 0, 15, 35, 100, 5}) {
    for (int i = 0; i < 2 * 8192 + 3000; ++i) {
      a.push_back(static_cast<uint16_t>(rng()));
      b.push_back(static_cast<int>(rng() % 1000) < per_mille ? static_cast<uint16_t>(a.back() + 1)
                                                             : a.back());
    }
  }
  // Each path must have run (with the 32768- and 8192-element calls, whose windows these are): the
  // changes per window cover AVX2's three ranges and AVX-512's two.
  const Streams want = reference(a, b, false);
  REQUIRE(want.changes > 0);
  std::vector<uint64_t> per_window((a.size() + 8191) / 8192);
  for (uint64_t i = 0; i < a.size(); ++i) per_window[i / 8192] += a[i] != b[i];
  for (auto [lo, hi] : {std::pair<uint64_t, uint64_t>{1, 163}, {180, 255}, {256, 100000}})
    CHECK(std::any_of(per_window.begin(), per_window.end(), [&](uint64_t k) { return k >= lo && k <= hi; }));
  check_every_variant(a, b, {32768, 8192, 10000, 4160, 577});
}

TEST_CASE("diff_emit16: huge gaps get full LEB128 tails", "[sync][emit16]") {
  // One change at element 5 of a block that starts `start` elements into the tensor, nothing before it:
  // gap = start + 5. The kernel writes tails of up to 3 bytes without a branch; longer ones take the
  // general path.
  std::vector<uint16_t> a(64, 0x3f80), b(64, 0x3f80);
  b[5] = 0x3f81;
  for (uint64_t start : {uint64_t{0}, uint64_t{200}, uint64_t{3'000'000}, uint64_t{1} << 21,
                         uint64_t{1} << 28, uint64_t{1} << 40, (uint64_t{1} << 63) - 100}) {
    const uint64_t gap = start + 5;
    std::vector<uint8_t> want_tail;
    for (uint64_t r = gap >> 7; r; r >>= 7)
      want_tail.push_back(static_cast<uint8_t>((r & 127) | (r >= 128 ? 128 : 0)));
    for (const char* isa : emit_isas()) {
      const bool portable = isa == std::string("portable");
      EmitIsa use(isa);
      INFO("start " << start << " variant " << isa);
      std::vector<uint8_t> head(128), tail(64), lo(128), hi(128);
      Emit16Cursor c{head.data(), tail.data(), lo.data(), hi.data(), 0};
      const auto* pa = reinterpret_cast<const uint8_t*>(a.data());
      const auto* pb = reinterpret_cast<const uint8_t*>(b.data());
      const uint64_t k = portable ? diff_emit16_portable(pa, pb, start, 64, false, c)
                                  : diff_emit16(pa, pb, start, 64, false, c);
      REQUIRE(k == 1);
      REQUIRE(c.head == head.data() + 1);
      REQUIRE(head[0] == static_cast<uint8_t>((gap & 127) | (gap >= 128 ? 128 : 0)));
      REQUIRE(std::vector<uint8_t>(tail.data(), c.tail) == want_tail);
      REQUIRE(c.next == start + 6);
      REQUIRE(lo[0] == 0x81);
      REQUIRE(hi[0] == 0x3f);
    }
  }
}

TEST_CASE("diff_emit16: fused XXH3 of both sides equals libxxhash", "[sync][emit16][hash]") {
  std::mt19937_64 rng(11);
  for (uint64_t n :
       {121ull, 128ull, 511ull, 512ull, 513ull, 1000ull, 32768ull, 32769ull, 70000ull, 131072ull}) {
    std::vector<uint16_t> a(n), b(n);
    for (uint64_t i = 0; i < n; ++i) {
      a[i] = static_cast<uint16_t>(rng());
      b[i] = rng() % 10 ? a[i] : static_cast<uint16_t>(a[i] + 1);
    }
    const auto* pa = reinterpret_cast<const uint8_t*>(a.data());
    const auto* pb = reinterpret_cast<const uint8_t*>(b.data());
    const uint64_t len = 2 * n;
    // The portable reference of the caller's part: full blocks with xxh3_long_accumulate_block.
    Xxh3LongState ref;
    xxh3_long_init(ref);
    for (uint64_t off = 0; off < xxh3_long_block_bytes(len); off += kXxh3BlockBytes)
      xxh3_long_accumulate_block(ref, pa + off);
    REQUIRE(xxh3_long_finish(ref, pa, len) == xxh3_64(pa, len));
    for (const char* isa : emit_isas()) {
      EmitIsa use(isa);
      if (!diff_emit16_fuses_hash()) continue;  // portable: the encoder hashes with libxxhash
      for (bool delta : {false, true}) {
        INFO("n " << n << " delta " << delta << " variant " << isa);
        Xxh3LongState sa, sb;
        xxh3_long_init(sa);
        xxh3_long_init(sb);
        Emit16Hash hash{&sa, &sb, xxh3_long_block_bytes(len), xxh3_default_secret()};
        std::vector<uint8_t> head(emit16_room(n) + 64), tail(emit16_tail_room(n) + 64),
            lo(emit16_room(n) + 64), hi(emit16_room(n) + 64);
        Emit16Cursor c{head.data(), tail.data(), lo.data(), hi.data(), 0};
        for (uint64_t start = 0; start < n; start += 32768)
          diff_emit16(pa + 2 * start, pb + 2 * start, start, std::min<uint64_t>(32768, n - start), delta, c,
                      &hash);
        REQUIRE(xxh3_long_finish(sa, pa, len) == xxh3_64(pa, len));
        REQUIRE(xxh3_long_finish(sb, pb, len) == xxh3_64(pb, len));
        // The streams are the same as without hashing.
        const Streams want = reference(a, b, delta);
        REQUIRE(std::vector<uint8_t>(head.data(), c.head) == want.head);
        REQUIRE(std::vector<uint8_t>(tail.data(), c.tail) == want.tail);
        REQUIRE(std::vector<uint8_t>(lo.data(), c.lo) == want.lo);
        REQUIRE(std::vector<uint8_t>(hi.data(), c.hi) == want.hi);
      }
    }
  }
}

TEST_CASE("diff_emit16: the portable variant refuses to hash, misaligned hashing is refused",
          "[sync][emit16]") {
  std::vector<uint16_t> a(512, 1), b(512, 2);
  const auto* pa = reinterpret_cast<const uint8_t*>(a.data());
  const auto* pb = reinterpret_cast<const uint8_t*>(b.data());
  Xxh3LongState sa;
  xxh3_long_init(sa);
  Emit16Hash hash{&sa, nullptr, xxh3_long_block_bytes(1024), xxh3_default_secret()};
  std::vector<uint8_t> head(1024), tail(1024), lo(1024), hi(1024);
  for (const char* isa : emit_isas()) {
    INFO("variant " << isa);
    EmitIsa use(isa);
    REQUIRE(std::string(diff_emit16_isa()) == isa);
    Emit16Cursor c{head.data(), tail.data(), lo.data(), hi.data(), 0};
    CHECK(diff_emit16_fuses_hash() == (isa != std::string("portable")));
    if (!diff_emit16_fuses_hash())
      CHECK_THROWS_AS(diff_emit16(pa, pb, 0, 512, false, c, &hash), std::invalid_argument);
    CHECK_THROWS_AS(diff_emit16(pa + 2, pb + 2, 1, 64, false, c, &hash), std::invalid_argument);
  }
  CHECK_FALSE(diff_emit16_force("sse9"));
  CHECK_FALSE(diff_emit16_supported(nullptr));
  CHECK(diff_emit16_supported("portable"));
}

TEST_CASE("patches are the same bytes whichever kernels encode and apply them", "[sync][emit16][patch]") {
  // Several BF16 tensors crossing the scan blocks, a 1-D one, an F16 one; both value modes.
  std::mt19937_64 rng(5);
  // Several BF16 tensors crossing the scan blocks at ~7% changed, one at ~1% (gaps with tails), a 1-D
  // one, an F16 one; both value modes.
  std::vector<std::string> names{"a.weight", "b.weight", "c.bias", "d.f16", "e.sparse"};
  std::vector<uint64_t> sizes{70001, 4096 * 33, 333, 5000, 200003};
  std::vector<std::vector<uint16_t>> base(names.size()), target(names.size());
  std::vector<TensorView> bv, tv;
  for (size_t i = 0; i < names.size(); ++i) {
    base[i].resize(sizes[i]);
    for (auto& x : base[i]) x = static_cast<uint16_t>(rng());
    target[i] = base[i];
    const uint64_t every = names[i] == "e.sparse" ? 100 : 14;
    for (auto& x : target[i])
      if (rng() % every == 0) x = static_cast<uint16_t>(x + (rng() % 2 ? 1 : -1));
  }
  for (size_t i = 0; i < names.size(); ++i) {
    const DType dt = i == 3 ? DType::F16 : DType::BF16;
    bv.push_back({names[i],
                  dt,
                  {static_cast<int64_t>(sizes[i])},
                  reinterpret_cast<const uint8_t*>(base[i].data()),
                  sizes[i] * 2});
    tv.push_back({names[i],
                  dt,
                  {static_cast<int64_t>(sizes[i])},
                  reinterpret_cast<const uint8_t*>(target[i].data()),
                  sizes[i] * 2});
  }
  for (ValueMode mode : {ValueMode::Absolute, ValueMode::Delta}) {
    PatchOptions opt;
    opt.values = mode;
    opt.threads = 2;
    const std::vector<uint8_t> fast = encode_patch(bv, tv, opt);
    for (const char* isa : emit_isas()) {
      INFO("variant " << isa);
      EmitIsa use(isa);
      REQUIRE(encode_patch(bv, tv, opt) == fast);
    }
    // Applied: bit-identical to the target.
    std::vector<std::vector<uint16_t>> w = base;
    std::vector<MutableTensorView> mv;
    for (size_t i = 0; i < names.size(); ++i)
      mv.push_back(
          {names[i], tv[i].dtype, tv[i].shape, reinterpret_cast<uint8_t*>(w[i].data()), sizes[i] * 2});
    REQUIRE(apply_patch(mv, fast.data(), fast.size(), 2));
    CHECK(w == target);
    // Applied with every apply kernel set: the same weights.
    for (const char* isa : {"avx512", "avx2", "portable"}) {
      if (!apply_kernels_force(isa)) {
        WARN("apply kernels '" << isa << "' not tested: this CPU cannot run them");
        continue;
      }
      std::vector<std::vector<uint16_t>> w2 = base;
      std::vector<MutableTensorView> mv2;
      for (size_t i = 0; i < names.size(); ++i)
        mv2.push_back(
            {names[i], tv[i].dtype, tv[i].shape, reinterpret_cast<uint8_t*>(w2[i].data()), sizes[i] * 2});
      const bool ok = apply_patch(mv2, fast.data(), fast.size(), 2);
      apply_kernels_force(nullptr);
      INFO("apply kernels " << isa);
      REQUIRE(ok);
      CHECK(w2 == target);
    }
  }
}
