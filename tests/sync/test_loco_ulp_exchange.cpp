// PULSELoCo contributions with ulp values (sync/loco_exchange.h, value_mode 1 of sync/LOCO_FORMAT.md):
// the documented byte layout, round trips of counts (1 .. 2^24, both signs) and FP32 escapes raw and
// zstd, exact integer sums against a reference (at thousands of ranks at the largest count), gate +
// coding + exchange conserving mass, and refusal of forged count streams and mismatched value modes.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kernels/loco_gate.h"
#include "kernels/loco_ulp.h"
#include "sync/byte_io.h"
#include "sync/hash.h"
#include "sync/loco_exchange.h"

using namespace pulse::sync;
using pulse::kernels::kLocoUlpEscape;
using pulse::kernels::kLocoUlpMaxCount;
using pulse::kernels::loco_ulp_step;

namespace {

struct UlpFired {
  std::vector<uint32_t> idx;
  std::vector<int32_t> cnt;
  std::vector<float> val;  // the escape values at escapes (anything elsewhere)
};

std::vector<LocoFiredView> views(const std::vector<UlpFired>& fired) {
  std::vector<LocoFiredView> v;
  for (const auto& f : fired) v.push_back({f.idx.data(), f.val.data(), f.idx.size(), f.cnt.data()});
  return v;
}

LocoEncodeOptions ulp_options(int level = 1) {
  LocoEncodeOptions o;
  o.values = LocoValues::Ulp;
  o.zstd_level = level;
  return o;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

void reseal(std::vector<uint8_t>& b) {
  const uint64_t h = xxh3_64(b.data(), b.size() - 8);
  for (int i = 0; i < 8; ++i) b[b.size() - 8 + i] = static_cast<uint8_t>(h >> (8 * i));
}

/// RL-like counts: mostly +-1, +-2, a tail up to the limit, every 50th an escape.
UlpFired random_ulp(std::mt19937_64& rng, uint64_t numel, double p) {
  UlpFired f;
  std::bernoulli_distribution b(p);
  std::geometric_distribution<int> small(0.6);
  for (uint64_t i = 0; i < numel; ++i) {
    if (!b(rng)) continue;
    f.idx.push_back(static_cast<uint32_t>(i));
    const size_t j = f.idx.size();
    int32_t c = 1 + small(rng);
    if (j % 97 == 3) c = kLocoUlpMaxCount;
    if (j % 89 == 7) c = 1 << (rng() % 24);
    c = rng() % 2 ? c : -c;
    if (j % 50 == 0) c = kLocoUlpEscape;
    f.cnt.push_back(c);
    f.val.push_back(c == kLocoUlpEscape ? std::normal_distribution<float>(0.f, 1e3f)(rng) : 0.0f);
  }
  return f;
}

void check_equal(const std::vector<UlpFired>& want, const LocoContribution& got) {
  REQUIRE(got.values == LocoValues::Ulp);
  REQUIRE(got.tensors.size() == want.size());
  for (size_t t = 0; t < want.size(); ++t) {
    REQUIRE(got.tensors[t].indices == want[t].idx);
    REQUIRE(got.tensors[t].counts == want[t].cnt);
    REQUIRE(got.tensors[t].values.size() == want[t].idx.size());
    for (size_t j = 0; j < want[t].idx.size(); ++j)
      if (want[t].cnt[j] == kLocoUlpEscape)
        REQUIRE(bits_of(got.tensors[t].values[j]) == bits_of(want[t].val[j]));
  }
}

std::vector<LocoTensorSpec> make_table(const std::vector<uint64_t>& numels) {
  std::vector<LocoTensorSpec> t;
  for (size_t i = 0; i < numels.size(); ++i) t.push_back({"t" + std::to_string(i), numels[i]});
  return t;
}

}  // namespace

TEST_CASE("loco ulp: the byte layout is the one LOCO_FORMAT.md documents", "[sync][loco]") {
  // Tensor 'a' numel 64: indices {1, 5, 9} with counts 1, -2 and an escape 0.5; 'b' nothing fired.
  const std::vector<LocoTensorSpec> table = {{"a", 64}, {"b", 8}};
  const std::vector<UlpFired> fired = {{{1, 5, 9}, {1, -2, kLocoUlpEscape}, {0.f, 0.f, 0.5f}}, {}};
  const auto buf = encode_loco_contribution(1, 2, 9, table, views(fired), ulp_options(0));
  std::vector<uint8_t> want;
  ByteWriter w(want);
  w.bytes("PULSELOC", 8);
  w.u32(2);  // format_version
  w.u32(1);  // value_mode: ulp
  w.u64(0);  // total, patched below
  w.u32(1);
  w.u32(2);
  w.u64(9);
  w.u64(loco_table_hash(table));
  w.u64(2);
  // a: codings 0 (gaps raw, counts raw), count 3, index raw 3 / stored 3, counts raw 3 / stored 3, 1 escape
  for (uint8_t b : {0, 3, 3, 3, 3, 3, 1}) w.u8(b);
  w.u8(0);  // b: codings 0, count 0
  w.u8(0);
  for (uint8_t b : {1, 3, 3}) w.u8(b);  // gaps
  for (uint8_t b : {2, 3, 0}) w.u8(b);  // zigzag(1) = 2, zigzag(-2) = 3, escape 0
  w.u32(bits_of(0.5f));
  w.u64(0);
  for (int i = 0; i < 8; ++i) want[16 + i] = static_cast<uint8_t>(want.size() >> (8 * i));
  reseal(want);
  CHECK(buf == want);
  const LocoContributionInfo info = inspect_loco_contribution(buf.data(), buf.size());
  CHECK(info.values == LocoValues::Ulp);
  CHECK(info.tensors[0].escapes == 1);
  CHECK(info.tensors[0].count_raw_bytes == 3);
  check_equal(fired, decode_loco_contribution(buf.data(), buf.size(), 1, 2, 9, table, LocoValues::Ulp));
}

TEST_CASE("loco ulp: counts and escapes round trip raw and zstd, and cost about a byte per entry",
          "[sync][loco]") {
  std::mt19937_64 rng(31);
  const auto table = make_table({1, 1000, 200000, 4096});
  std::vector<UlpFired> fired = {random_ulp(rng, 1, 1.0), random_ulp(rng, 1000, 0.3),
                                 random_ulp(rng, 200000, 0.14), random_ulp(rng, 4096, 0.0)};
  for (int level : {0, 1, 3}) {
    const auto buf = encode_loco_contribution(0, 3, 4, table, views(fired), ulp_options(level));
    INFO("level " << level << ", " << buf.size() << " bytes");
    check_equal(fired, decode_loco_contribution(buf.data(), buf.size(), 0, 3, 4, table, LocoValues::Ulp));
    // An FP32 receiver refuses it.
    CHECK_THROWS_WITH(decode_loco_contribution(buf.data(), buf.size(), 0, 3, 4, table),
                      Catch::Contains("ulp values, expected fp32"));
    if (level == 1) {
      const LocoContributionInfo info = inspect_loco_contribution(buf.data(), buf.size());
      const auto& t = info.tensors[2];
      REQUIRE(t.value_codec == LocoStreamCodec::Zstd);
      // ~28k entries, mostly |c| <= 3: the zstd count stream is well under a byte per entry.
      CHECK(static_cast<double>(t.count_stored_bytes) < 0.6 * static_cast<double>(t.count));
    }
  }
}

TEST_CASE("loco ulp: integer sums are exact at the largest count over thousands of ranks", "[sync][loco]") {
  // W = 4100 ranks each send +2^24 at element 0, -2^24 at element 1, +1 at 2 and an escape at 3: the
  // int64 sums (2^24 W = 68,786,585,600 > 2^32) are exact; float(C) * step + E is then one rounding of
  // an exact value. (int64 holds the sum for every uint32 world size: static_assert in loco_ulp.h.)
  const uint32_t world = 4100;
  const std::vector<LocoTensorSpec> table = {{"w", 5}};
  const std::vector<UlpFired> one = {
      {{0, 1, 2, 3}, {kLocoUlpMaxCount, -kLocoUlpMaxCount, 1, kLocoUlpEscape}, {0, 0, 0, 0.25f}}};
  std::vector<std::vector<uint8_t>> bufs;
  for (uint32_t r = 0; r < world; ++r)
    bufs.push_back(encode_loco_contribution(r, world, 0, table, views(one), ulp_options(0)));
  std::vector<LocoBufferView> bv;
  for (const auto& b : bufs) bv.push_back({b.data(), b.size()});
  const std::vector<float> global = {1.0f, 1e-3f, 0.0f, 3.0f, 1.0f};
  std::vector<float> sum(5, -1.0f);
  std::vector<LocoSumView> sv = {{sum.data(), 5, global.data()}};
  loco_decode_and_sum(bv, 0, table, sv, 2, LocoValues::Ulp);
  const double w = world;
  CHECK(sum[0] == static_cast<float>(w * kLocoUlpMaxCount * loco_ulp_step(1.0f)));
  CHECK(static_cast<double>(sum[0]) == w * 16777216.0 * 0.0078125);  // exact: 4100 * 2^17
  CHECK(sum[1] == -static_cast<float>(w * kLocoUlpMaxCount) * loco_ulp_step(1e-3f));
  CHECK(sum[2] == static_cast<float>(w) * loco_ulp_step(0.0f));
  float e = 0.0f;
  for (uint32_t r = 0; r < world; ++r) e += 0.25f;  // the escapes, in rank order
  CHECK(sum[3] == e);
  CHECK(bits_of(sum[4]) == 0);  // nothing sent: +0
}

TEST_CASE("loco ulp: sums equal a reference, and gate + coding + exchange conserve mass", "[sync][loco]") {
  // Three ranks gate and code the same tensor from the same global weights; each rank's decoded counts
  // times the step are exactly what it sent, sent + residual == s exactly, and the sum is float(sum of
  // counts) * step + (escapes in rank order).
  std::mt19937_64 rng(37);
  const size_t n = 30011;
  const uint32_t world = 3;
  std::normal_distribution<float> weight(0.f, 0.02f), d(0.f, 6e-5f);
  std::vector<float> g(n);
  for (auto& x : g) x = weight(rng);
  g[0] = 0.0f;
  g[1] = 1e-40f;
  const std::vector<LocoTensorSpec> table = {{"w", n}};
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<std::vector<float>> s_of(world), r_of(world);
  for (uint32_t rank = 0; rank < world; ++rank) {
    std::vector<float> l(n), r(n);
    for (size_t i = 0; i < n; ++i) l[i] = g[i] + d(rng), r[i] = d(rng) / 4;
    auto& s = s_of[rank];
    for (size_t i = 0; i < n; ++i) s.push_back(r[i] + (g[i] - l[i]));
    std::vector<uint32_t> idx(n);
    std::vector<float> val(n);
    std::vector<int32_t> cnt(n);
    const auto res =
        pulse::kernels::loco_gate(g.data(), l.data(), r.data(), n, false, idx.data(), val.data());
    pulse::kernels::loco_ulp_quantize(g.data(), r.data(), idx.data(), val.data(), cnt.data(), res.fired);
    const uint64_t sent = pulse::kernels::loco_ulp_compact(idx.data(), val.data(), cnt.data(), res.fired);
    bufs.push_back(encode_loco_contribution(rank, world, 2, table,
                                            {{idx.data(), val.data(), sent, cnt.data()}}, ulp_options()));
    // Mass: per element, the decoded sent value (count * step, or the escape) + the residual == s.
    const LocoContribution c = decode_loco_contribution(bufs.back().data(), bufs.back().size(), rank, world,
                                                        2, table, LocoValues::Ulp);
    std::vector<double> sent_value(n, 0.0);
    for (size_t j = 0; j < c.tensors[0].indices.size(); ++j) {
      const uint32_t i = c.tensors[0].indices[j];
      const int32_t k = c.tensors[0].counts[j];
      sent_value[i] =
          k == kLocoUlpEscape ? c.tensors[0].values[j] : static_cast<double>(k) * loco_ulp_step(g[i]);
    }
    for (size_t i = 0; i < n; ++i)
      REQUIRE(sent_value[i] + static_cast<double>(r[i]) == static_cast<double>(s[i]));
    r_of[rank] = r;
  }
  std::vector<LocoBufferView> bv;
  for (const auto& b : bufs) bv.push_back({b.data(), b.size()});
  std::vector<float> sum(n);
  std::vector<LocoSumView> sv = {{sum.data(), n, g.data()}};
  const auto decoded = loco_decode_and_sum(bv, 2, table, sv, 1, LocoValues::Ulp);
  std::vector<int64_t> counts(n, 0);
  std::vector<float> esc(n, 0.0f);
  for (const auto& c : decoded)
    for (size_t j = 0; j < c.tensors[0].indices.size(); ++j) {
      const uint32_t i = c.tensors[0].indices[j];
      if (c.tensors[0].counts[j] == kLocoUlpEscape)
        esc[i] += c.tensors[0].values[j];
      else
        counts[i] += c.tensors[0].counts[j];
    }
  uint64_t nonzero = 0;
  for (size_t i = 0; i < n; ++i) {
    const float want = static_cast<float>(counts[i]) * loco_ulp_step(g[i]) + esc[i];
    REQUIRE(bits_of(sum[i]) == bits_of(want));
    nonzero += counts[i] != 0;
  }
  CHECK(nonzero > n / 20);
  // A mismatched mode between ranks is refused before any sum is written.
  auto fp32_buf = encode_loco_contribution(1, world, 2, table, {{nullptr, nullptr, 0}});
  std::vector<LocoBufferView> mixed = {bv[0], {fp32_buf.data(), fp32_buf.size()}, bv[2]};
  std::fill(sum.begin(), sum.end(), 7.0f);
  CHECK_THROWS_WITH(loco_decode_and_sum(mixed, 2, table, sv, 1, LocoValues::Ulp),
                    Catch::Contains("from rank 1") && Catch::Contains("fp32 values, expected ulp"));
  CHECK(sum[5] == 7.0f);
  // Ulp sums without the global weights are refused.
  std::vector<LocoSumView> no_global = {{sum.data(), n, nullptr}};
  CHECK_THROWS_AS(loco_decode_and_sum(bv, 2, table, no_global, 1, LocoValues::Ulp), std::invalid_argument);
}

TEST_CASE("loco ulp: the encoder refuses zero and oversized counts, forged count streams are refused",
          "[sync][loco]") {
  const std::vector<LocoTensorSpec> table = {{"a", 64}};
  for (int32_t bad : {0, kLocoUlpMaxCount + 1, -kLocoUlpMaxCount - 1}) {
    const std::vector<UlpFired> f = {{{1, 2}, {1, bad}, {0.f, 0.f}}};
    CHECK_THROWS_WITH(encode_loco_contribution(0, 1, 0, table, views(f), ulp_options()),
                      Catch::Contains("tensor 'a'") && Catch::Contains("entry 1"));
  }
  const std::vector<UlpFired> nan = {{{1}, {kLocoUlpEscape}, {std::nanf("")}}};
  CHECK_THROWS_WITH(encode_loco_contribution(0, 1, 0, table, views(nan), ulp_options()),
                    Catch::Contains("non-finite"));
  const uint32_t idx[] = {3};
  const float val[] = {1.f};
  CHECK_THROWS_AS(encode_loco_contribution(0, 1, 0, table, {{idx, val, 1, nullptr}}, ulp_options()),
                  std::invalid_argument);

  // Raw streams: 'a' with {1, 5, 9} -> counts 1, -2, escape 0.5 (see the layout test for the offsets).
  const std::vector<UlpFired> fired = {{{1, 5, 9}, {1, -2, kLocoUlpEscape}, {0.f, 0.f, 0.5f}}};
  const auto buf = encode_loco_contribution(1, 2, 9, table, views(fired), ulp_options(0));
  const LocoContributionInfo info = inspect_loco_contribution(buf.data(), buf.size());
  const size_t counts_at = info.tensors[0].value_offset, esc_at = info.tensors[0].escape_offset;
  REQUIRE(esc_at == counts_at + 3);
  auto forged = [&](auto edit) {
    std::vector<uint8_t> b = buf;
    edit(b);
    reseal(b);
    return b;
  };
  auto decode = [&](const std::vector<uint8_t>& b) {
    return decode_loco_contribution(b.data(), b.size(), 1, 2, 9, table, LocoValues::Ulp);
  };
  // Codes 2, 0x83 0x00: two codes fill the 3 bytes, the third entry finds none.
  CHECK_THROWS_WITH(decode(forged([&](std::vector<uint8_t>& b) { b[counts_at + 1] = 0x83; })),
                    Catch::Contains("tensor 'a'") && Catch::Contains("count stream ends inside entry 2"));
  // A second escape code where the header declares one.
  CHECK_THROWS_WITH(decode(forged([&](std::vector<uint8_t>& b) { b[counts_at] = 0; })),
                    Catch::Contains("more escape codes than the 1 declared"));
  // The escape replaced by a count: fewer escape codes than declared.
  CHECK_THROWS_WITH(decode(forged([&](std::vector<uint8_t>& b) { b[counts_at + 2] = 4; })),
                    Catch::Contains("0 escape codes, the header declares 1"));
  // A non-finite escape value.
  CHECK_THROWS_WITH(
      decode(forged([&](std::vector<uint8_t>& b) {
        for (int i = 0; i < 4; ++i) b[esc_at + i] = static_cast<uint8_t>(0x7f800000u >> (8 * i));
      })),
      Catch::Contains("non-finite escape") && Catch::Contains("at byte " + std::to_string(esc_at)));
  // A stream that ends inside a code.
  CHECK_THROWS_WITH(
      decode(forged([&](std::vector<uint8_t>& b) { b[counts_at + 2] = 0x80; })),
      Catch::Contains("count stream ends inside entry 2") && Catch::Contains("(offset in the buffer)"));
}

TEST_CASE("loco ulp: count codes beyond 2^24 and longer than 4 bytes are refused", "[sync][loco]") {
  // One fired entry whose count code is written by hand: 5-byte and oversized codes.
  const std::vector<LocoTensorSpec> table = {{"a", 8}};
  auto build = [&](const std::vector<uint8_t>& code) {
    std::vector<uint8_t> b;
    ByteWriter w(b);
    w.bytes("PULSELOC", 8);
    w.u32(2);
    w.u32(1);
    w.u64(0);
    w.u32(0);
    w.u32(1);
    w.u64(0);
    w.u64(loco_table_hash(table));
    w.u64(1);
    for (uint8_t x : {0, 1, 1, 1}) w.u8(x);  // codings, count 1, index raw/stored 1
    w.u8(static_cast<uint8_t>(code.size()));
    w.u8(static_cast<uint8_t>(code.size()));
    w.u8(0);  // no escapes
    w.u8(4);  // gap 4: index 4
    for (uint8_t x : code) w.u8(x);
    w.u64(0);
    for (int i = 0; i < 8; ++i) b[16 + i] = static_cast<uint8_t>(b.size() >> (8 * i));
    reseal(b);
    return b;
  };
  auto decode = [&](const std::vector<uint8_t>& b) {
    return decode_loco_contribution(b.data(), b.size(), 0, 1, 0, table, LocoValues::Ulp);
  };
  // 2^25 = zigzag(2^24): accepted, the largest count.
  const auto ok = build({0x80, 0x80, 0x80, 0x10});
  CHECK(decode(ok).tensors[0].counts == std::vector<int32_t>{kLocoUlpMaxCount});
  CHECK(decode(build({0xff, 0xff, 0xff, 0x0f})).tensors[0].counts == std::vector<int32_t>{-kLocoUlpMaxCount});
  CHECK_THROWS_WITH(decode(build({0x81, 0x80, 0x80, 0x10})), Catch::Contains("beyond |count| <= 2^24"));
  // A 5-byte code cannot be declared (count_raw <= 4 per entry); inside a longer stream it is refused too.
  CHECK_THROWS_WITH(decode(build({0x81, 0x80, 0x80, 0x80, 0x00})),
                    Catch::Contains("count stream has 5 bytes"));
}

TEST_CASE("loco ulp: bytes per fired entry, fp32 vs ulp, on gated RL-scale data (prints a table)",
          "[.][loco_ulp_sizes]") {
  // 4 M weights ~ N(0, 0.02), one round's pseudo-gradient ~ N(0, sigma), residual 0: the real gate, then
  // fp32 values or ulp counts (zstd level 1). "H(codes)" is the empirical entropy of the count codes, the
  // floor any coder of independent codes reaches; "counts" what zigzag LEB128 + zstd stores.
  std::mt19937_64 rng(5);
  const uint64_t n = 4000000;
  const std::vector<LocoTensorSpec> table = {{"w", n}};
  std::vector<float> g(n);
  std::normal_distribution<float> weight(0.f, 0.02f);
  for (auto& x : g) x = weight(rng);
  std::printf(
      "sigma    fired   deferred  fp32_B/entry  ulp_B/entry  index_B  counts_B  H(codes)_B  escapes\n");
  for (double sigma : {1e-5, 2e-5, 4e-5, 1e-4, 3e-4}) {
    std::normal_distribution<float> d(0.f, static_cast<float>(sigma));
    std::vector<float> l(n), r(n, 0.0f), val(n);
    std::vector<uint32_t> idx(n);
    std::vector<int32_t> cnt(n);
    for (uint64_t i = 0; i < n; ++i) l[i] = g[i] - d(rng);
    const auto res =
        pulse::kernels::loco_gate(g.data(), l.data(), r.data(), n, false, idx.data(), val.data());
    const auto fp32 = encode_loco_contribution(0, 2, 0, table, {{idx.data(), val.data(), res.fired}});
    const uint64_t deferred =
        pulse::kernels::loco_ulp_quantize(g.data(), r.data(), idx.data(), val.data(), cnt.data(), res.fired);
    const uint64_t sent = pulse::kernels::loco_ulp_compact(idx.data(), val.data(), cnt.data(), res.fired);
    const auto ulp =
        encode_loco_contribution(0, 2, 0, table, {{idx.data(), val.data(), sent, cnt.data()}}, ulp_options());
    const auto info = inspect_loco_contribution(ulp.data(), ulp.size());
    std::map<int32_t, uint64_t> hist;
    uint64_t escapes = 0;
    for (uint64_t k = 0; k < sent; ++k) ++hist[cnt[k]], escapes += cnt[k] == kLocoUlpEscape;
    double h = 0;
    for (const auto& [c, m] : hist) {
      const double p = static_cast<double>(m) / static_cast<double>(sent);
      h -= p * std::log2(p);
    }
    const double per = static_cast<double>(sent);
    std::printf("%.0e  %6.2f%%  %7.2f%%  %12.3f  %11.3f  %7.3f  %8.3f  %10.3f  %7llu\n", sigma,
                100.0 * static_cast<double>(res.fired) / n, 100.0 * static_cast<double>(deferred) / res.fired,
                static_cast<double>(fp32.size()) / static_cast<double>(res.fired),
                static_cast<double>(ulp.size()) / per,
                static_cast<double>(info.tensors[0].index_stored_bytes) / per,
                static_cast<double>(info.tensors[0].count_stored_bytes) / per, h / 8,
                static_cast<unsigned long long>(escapes));
  }
}
