// PULSELoCo round contributions (sync/loco_exchange.h, sync/LOCO_FORMAT.md): round trips over
// densities and tensor sizes, the chosen codings, bit-exact values, rank-order summation against a
// scalar reference, refusal of cut, corrupted, misaddressed and forged buffers, and sizes against the
// padded-int64 reference deployment.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "sync/byte_io.h"
#include "sync/hash.h"
#include "sync/loco_exchange.h"

using namespace pulse::sync;

namespace {

struct Fired {
  std::vector<uint32_t> idx;
  std::vector<float> val;
};

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

float float_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

std::vector<LocoFiredView> views(const std::vector<Fired>& fired) {
  std::vector<LocoFiredView> v;
  for (const auto& f : fired) v.push_back(LocoFiredView{f.idx.data(), f.val.data(), f.idx.size()});
  return v;
}

/// Pseudo-gradient-like values: N(0, sigma), every 37th a special value (-0, subnormals, extremes).
float random_value(std::mt19937_64& rng, uint64_t j, double sigma = 1e-4) {
  static const float specials[] = {-0.0f,    0.0f,     std::numeric_limits<float>::denorm_min(),
                                   -1e-40f,  1.5e-39f, FLT_MAX,
                                   -FLT_MAX, FLT_MIN,  -std::numeric_limits<float>::denorm_min()};
  if (j % 37 == 5) return specials[(j / 37) % (sizeof specials / sizeof specials[0])];
  std::normal_distribution<double> d(0.0, sigma);
  return static_cast<float>(d(rng));
}

/// `count` distinct ascending indices out of numel (count < 0: each element with probability p).
Fired random_fired(std::mt19937_64& rng, uint64_t numel, double p, int64_t count = -1) {
  Fired f;
  if (count >= 0) {
    if (static_cast<uint64_t>(count) * 2 <= numel) {
      std::vector<uint32_t> picked;
      std::uniform_int_distribution<uint64_t> u(0, numel - 1);
      while (picked.size() < static_cast<size_t>(count)) {
        picked.push_back(static_cast<uint32_t>(u(rng)));
        if (picked.size() == static_cast<size_t>(count)) {
          std::sort(picked.begin(), picked.end());
          picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
        }
      }
      f.idx = picked;
    } else {
      for (uint64_t i = 0; i < numel; ++i) f.idx.push_back(static_cast<uint32_t>(i));
      std::shuffle(f.idx.begin(), f.idx.end(), rng);
      f.idx.resize(static_cast<size_t>(count));
      std::sort(f.idx.begin(), f.idx.end());
    }
  } else {
    std::bernoulli_distribution b(p);
    for (uint64_t i = 0; i < numel; ++i)
      if (b(rng)) f.idx.push_back(static_cast<uint32_t>(i));
  }
  for (uint64_t j = 0; j < f.idx.size(); ++j) f.val.push_back(random_value(rng, j));
  return f;
}

std::vector<LocoTensorSpec> make_table(const std::vector<uint64_t>& numels) {
  std::vector<LocoTensorSpec> t;
  for (size_t i = 0; i < numels.size(); ++i)
    t.push_back({"model.layers." + std::to_string(i) + ".mlp.up_proj.weight", numels[i]});
  return t;
}

void check_equal(const std::vector<Fired>& want, const LocoContribution& got) {
  REQUIRE(got.tensors.size() == want.size());
  for (size_t t = 0; t < want.size(); ++t) {
    REQUIRE(got.tensors[t].indices == want[t].idx);
    REQUIRE(got.tensors[t].values.size() == want[t].val.size());
    for (size_t j = 0; j < want[t].val.size(); ++j)
      REQUIRE(bits_of(got.tensors[t].values[j]) == bits_of(want[t].val[j]));
  }
}

/// Rewrites the trailing checksum so that a forged buffer passes it (tests the checks after it).
void reseal(std::vector<uint8_t>& b) {
  const uint64_t h = xxh3_64(b.data(), b.size() - 8);
  for (int i = 0; i < 8; ++i) b[b.size() - 8 + i] = static_cast<uint8_t>(h >> (8 * i));
}

LocoContribution decode(const std::vector<uint8_t>& b, uint32_t rank, uint32_t world, uint64_t round,
                        const std::vector<LocoTensorSpec>& table) {
  return decode_loco_contribution(b.data(), b.size(), rank, world, round, table);
}

}  // namespace

TEST_CASE("loco: round trips over densities and tensor sizes, bit-exact", "[sync][loco]") {
  std::mt19937_64 rng(10);
  const std::vector<uint64_t> numels = {1, 7, 4096, 1000000};
  const auto table = make_table(numels);
  struct Density {
    const char* name;
    double p;       // Bernoulli probability, or
    int64_t count;  // exact count (-2 = all)
  };
  const Density densities[] = {{"0 fired", 0, 0}, {"1 fired", 0, 1}, {"all fired", 0, -2},
                               {"1%", 0.01, -1},  {"5%", 0.05, -1},  {"50%", 0.5, -1}};
  for (const auto& d : densities) {
    for (int level : {0, 1, 3}) {
      DYNAMIC_SECTION(d.name << " zstd " << level) {
        std::vector<Fired> fired;
        for (uint64_t n : numels) {
          const int64_t c = d.count == -2 ? static_cast<int64_t>(n) : d.count;
          fired.push_back(random_fired(rng, n, d.p, d.count == -1 ? -1 : std::min<int64_t>(c, n)));
        }
        LocoEncodeOptions opt;
        opt.zstd_level = level;
        const auto buf = encode_loco_contribution(1, 3, 7, table, views(fired), opt);
        check_equal(fired, decode(buf, 1, 3, 7, table));
        const LocoContributionInfo info = inspect_loco_contribution(buf.data(), buf.size());
        CHECK(info.rank == 1);
        CHECK(info.world_size == 3);
        CHECK(info.round == 7);
        CHECK(info.total_bytes == buf.size());
        CHECK(info.table_hash == loco_table_hash(table));
        uint64_t fired_total = 0;
        for (const auto& f : fired) fired_total += f.idx.size();
        CHECK(info.fired == fired_total);
        for (size_t t = 0; t < numels.size(); ++t) {
          const LocoTensorInfo& ti = info.tensors[t];
          INFO("tensor " << t << " numel " << numels[t] << " count " << ti.count);
          CHECK(ti.count == fired[t].idx.size());
          if (ti.count == numels[t] && ti.count > 0) CHECK(ti.index_coding == LocoIndexCoding::Dense);
          if (level == 0) {
            CHECK(ti.index_codec == LocoStreamCodec::Raw);
            CHECK(ti.value_codec == LocoStreamCodec::Raw);
          }
        }
        // Codings chosen on the 1e6-element tensor by density.
        const LocoTensorInfo& big = info.tensors[3];
        if (d.p == 0.01 || d.p == 0.05) CHECK(big.index_coding == LocoIndexCoding::VarintGaps);
        if (d.p == 0.5) CHECK(big.index_coding == LocoIndexCoding::Bitmap);
        if (d.count == 1) CHECK(big.index_coding == LocoIndexCoding::VarintGaps);
        if (level > 0 && big.count > 1000) CHECK(big.value_codec == LocoStreamCodec::BytePlanes);
        if (level > 0 && d.p == 0.01) CHECK(big.index_codec == LocoStreamCodec::Zstd);
      }
    }
  }
}

TEST_CASE("loco: special values survive bit for bit, the encoder is deterministic and thread-independent",
          "[sync][loco]") {
  const std::vector<uint32_t> patterns = {0x80000000u, 0x00000000u, 0x00000001u, 0x80000001u, 0x007fffffu,
                                          0x807fffffu, 0x00800000u, 0x7f7fffffu, 0xff7fffffu, 0x3f800000u};
  const auto table = make_table({64, 100000, 3});
  std::vector<Fired> fired(3);
  for (size_t j = 0; j < patterns.size(); ++j) {
    fired[0].idx.push_back(static_cast<uint32_t>(3 * j + 1));
    fired[0].val.push_back(float_of(patterns[j]));
  }
  std::mt19937_64 rng(3);
  fired[1] = random_fired(rng, 100000, 0.05);
  for (uint32_t i = 0; i < 3; ++i) {
    fired[2].idx.push_back(i);
    fired[2].val.push_back(float_of(patterns[i]));
  }
  LocoEncodeOptions one, many;
  many.threads = 4;
  const auto a = encode_loco_contribution(0, 2, 1, table, views(fired), one);
  const auto b = encode_loco_contribution(0, 2, 1, table, views(fired), many);
  CHECK(a == b);
  check_equal(fired, decode(a, 0, 2, 1, table));
}

TEST_CASE("loco: a tensor with nothing fired costs 2 bytes, an empty contribution is 66", "[sync][loco]") {
  std::vector<Fired> fired(1);
  const auto one = encode_loco_contribution(0, 1, 0, make_table({4096}), views(fired));
  CHECK(one.size() == 56 + 2 + 8);
  fired.resize(2);
  const auto two = encode_loco_contribution(0, 1, 0, make_table({4096, 9}), views(fired));
  CHECK(two.size() == one.size() + 2);
  const auto none = encode_loco_contribution(0, 1, 0, {}, {});
  CHECK(none.size() == 64);
  CHECK(decode(none, 0, 1, 0, {}).tensors.empty());
}

namespace {

/// The documented example of LOCO_FORMAT.md built byte by byte (not by the encoder), as format
/// `version` writes it (1: field 12 is flags = 0; 2: value_mode 0 = FP32): tensor 'a' numel 64, indices
/// {1, 5, 9} (gaps 1, 3, 3; 3 bytes < an 8-byte bitmap), values 1.0, -2.0, 0.5; 'b' numel 8 with nothing
/// fired; 'c' numel 2 with both fired (dense). Raw streams.
std::vector<uint8_t> documented_fp32_buffer(uint32_t version, const std::vector<LocoTensorSpec>& table) {
  std::vector<uint8_t> want;
  ByteWriter w(want);
  w.bytes("PULSELOC", 8);
  w.u32(version);  // format_version
  w.u32(0);        // version 1: flags; version 2: value_mode 0 (FP32)
  const size_t total_at = want.size();
  w.u64(0);  // total_bytes, patched below
  w.u32(2);  // rank
  w.u32(4);  // world_size
  w.u64(0x1234567890ull);
  // table hash: u64 n, then per tensor u64 name length, name, u64 numel
  std::vector<uint8_t> rec;
  ByteWriter th(rec);
  th.u64(3);
  for (const auto& t : table) {
    th.u64(t.name.size());
    th.bytes(t.name.data(), t.name.size());
    th.u64(t.numel);
  }
  w.u64(xxh3_64(rec.data(), rec.size()));
  w.u64(3);  // n_tensors
  // entries: codings byte, uleb count, [uleb index_raw, uleb index_stored, uleb value_stored]
  w.u8(0x00);
  w.u8(3);
  w.u8(3);
  w.u8(3);
  w.u8(12);
  w.u8(0x00);
  w.u8(0);
  w.u8(0x02);  // dense
  w.u8(2);
  w.u8(0);
  w.u8(0);
  w.u8(8);
  CHECK(want.size() == 56 + 5 + 2 + 5);
  // payload: tensor a's gaps then values, tensor c's values
  w.u8(1);
  w.u8(3);
  w.u8(3);
  for (float f : {1.0f, -2.0f, 0.5f, 3.0f, -0.0f}) w.u32(bits_of(f));
  w.u64(0);  // checksum, patched below
  const uint64_t total = want.size();
  for (int i = 0; i < 8; ++i) want[total_at + i] = static_cast<uint8_t>(total >> (8 * i));
  reseal(want);
  return want;
}

}  // namespace

TEST_CASE("loco: the byte layout is the one LOCO_FORMAT.md documents", "[sync][loco]") {
  const std::vector<LocoTensorSpec> table = {{"a", 64}, {"b", 8}, {"c", 2}};
  std::vector<Fired> fired = {{{1, 5, 9}, {1.0f, -2.0f, 0.5f}}, {}, {{0, 1}, {3.0f, -0.0f}}};
  LocoEncodeOptions opt;
  opt.zstd_level = 0;
  const auto buf = encode_loco_contribution(2, 4, 0x1234567890ull, table, views(fired), opt);
  CHECK(buf == documented_fp32_buffer(2, table));
}

TEST_CASE("loco: a version 1 payload is still read, as FP32 values", "[sync][loco]") {
  const std::vector<LocoTensorSpec> table = {{"a", 64}, {"b", 8}, {"c", 2}};
  const std::vector<Fired> fired = {{{1, 5, 9}, {1.0f, -2.0f, 0.5f}}, {}, {{0, 1}, {3.0f, -0.0f}}};
  const auto v1 = documented_fp32_buffer(1, table);
  const LocoContributionInfo info = inspect_loco_contribution(v1.data(), v1.size());
  CHECK(info.version == 1);
  CHECK(info.values == LocoValues::Fp32);
  const LocoContribution c = decode(v1, 2, 4, 0x1234567890ull, table);
  CHECK(c.values == LocoValues::Fp32);
  check_equal(fired, c);
  // A receiver in ulp mode refuses it, naming both modes.
  CHECK_THROWS_WITH(
      decode_loco_contribution(v1.data(), v1.size(), 2, 4, 0x1234567890ull, table, LocoValues::Ulp),
      Catch::Contains("at byte 12") && Catch::Contains("fp32 values, expected ulp"));
  // Version 1 knew no value modes: its flags must stay 0. Unknown versions are named.
  auto flagged = v1;
  flagged[12] = 1;
  reseal(flagged);
  CHECK_THROWS_WITH(decode(flagged, 2, 4, 0x1234567890ull, table), Catch::Contains("unknown flags 1"));
  for (uint32_t version : {0u, 3u}) {
    auto other = v1;
    other[8] = static_cast<uint8_t>(version);
    reseal(other);
    CHECK_THROWS_WITH(
        decode(other, 2, 4, 0x1234567890ull, table),
        Catch::Contains("format version " + std::to_string(version) + ", this reader knows versions 1 to 2"));
  }
}

TEST_CASE("loco: rank-order sums equal a scalar reference, whatever the densities", "[sync][loco]") {
  std::mt19937_64 rng(42);
  const std::vector<uint64_t> numels = {1, 7, 4096, 200000};
  const auto table = make_table(numels);
  const uint32_t world = 4;
  // rank 0: nothing fired; rank 1: ~5%; rank 2: everything; rank 3: ~50% (large magnitudes).
  std::vector<std::vector<Fired>> fired(world);
  std::vector<std::vector<uint8_t>> bufs;
  for (uint32_t r = 0; r < world; ++r) {
    for (uint64_t n : numels) {
      Fired f;
      if (r == 1) f = random_fired(rng, n, 0.05);
      if (r == 2) f = random_fired(rng, n, 0, static_cast<int64_t>(n));
      if (r == 3) {
        f = random_fired(rng, n, 0.5);
        for (auto& v : f.val)
          if (std::fabs(v) < 1.0f) v = v * 1e4f + 1.0f;
      }
      fired[r].push_back(std::move(f));
    }
    bufs.push_back(encode_loco_contribution(r, world, 5, table, views(fired[r])));
  }
  // Scalar reference: per element, 0 then + each rank's value in rank order.
  std::vector<std::vector<float>> ref(numels.size());
  for (size_t t = 0; t < numels.size(); ++t) {
    ref[t].assign(numels[t], 0.0f);
    for (uint32_t r = 0; r < world; ++r)
      for (size_t j = 0; j < fired[r][t].idx.size(); ++j) {
        volatile float s = ref[t][fired[r][t].idx[j]] + fired[r][t].val[j];
        ref[t][fired[r][t].idx[j]] = s;
      }
  }
  for (int threads : {1, 3}) {
    std::vector<std::vector<float>> sums(numels.size());
    std::vector<LocoSumView> sv;
    for (size_t t = 0; t < numels.size(); ++t) {
      sums[t].assign(numels[t], 12345.0f);  // garbage: the helper zero-fills
      sv.push_back({sums[t].data(), numels[t]});
    }
    std::vector<LocoBufferView> bv;
    for (const auto& b : bufs) bv.push_back({b.data(), b.size()});
    const auto decoded = loco_decode_and_sum(bv, 5, table, sv, threads);
    REQUIRE(decoded.size() == world);
    for (uint32_t r = 0; r < world; ++r) check_equal(fired[r], decoded[r]);
    for (size_t t = 0; t < numels.size(); ++t)
      for (uint64_t i = 0; i < numels[t]; ++i) REQUIRE(bits_of(sums[t][i]) == bits_of(ref[t][i]));

    // loco_accumulate one rank at a time into zeros gives the same.
    std::vector<std::vector<float>> acc(numels.size());
    std::vector<LocoSumView> av;
    for (size_t t = 0; t < numels.size(); ++t) {
      acc[t].assign(numels[t], 0.0f);
      av.push_back({acc[t].data(), numels[t]});
    }
    for (const auto& c : decoded) loco_accumulate(c, av);
    CHECK(acc == sums);
  }
}

TEST_CASE("loco: summation refuses misordered contributions and mismatched buffers", "[sync][loco]") {
  const auto table = make_table({8});
  std::vector<Fired> f = {{{2}, {1.0f}}};
  std::vector<LocoContribution> c;
  for (uint32_t r = 0; r < 2; ++r) {
    const auto b = encode_loco_contribution(r, 2, 0, table, views(f));
    c.push_back(decode(b, r, 2, 0, table));
  }
  std::vector<float> sum(8, 7.0f);
  std::vector<LocoSumView> sv = {{sum.data(), 8}};
  std::swap(c[0], c[1]);
  CHECK_THROWS_AS(loco_sum_in_rank_order(c, sv), std::invalid_argument);
  CHECK(sum[0] == 7.0f);  // nothing written
  std::swap(c[0], c[1]);
  std::vector<LocoSumView> small = {{sum.data(), 2}};
  CHECK_THROWS_AS(loco_sum_in_rank_order(c, small), std::invalid_argument);
  CHECK_THROWS_AS(loco_accumulate(c[0], small), std::invalid_argument);
  CHECK_THROWS_AS(loco_accumulate(c[0], {}), std::invalid_argument);
  loco_sum_in_rank_order(c, sv);
  CHECK(sum[2] == 2.0f);
  CHECK(sum[0] == 0.0f);
}

TEST_CASE("loco: the encoder refuses bad input", "[sync][loco]") {
  const auto table = make_table({16});
  auto enc = [&](std::vector<uint32_t> idx, std::vector<float> val, uint32_t rank = 0, uint32_t world = 2) {
    std::vector<Fired> f = {{idx, val}};
    return encode_loco_contribution(rank, world, 0, table, views(f));
  };
  CHECK_NOTHROW(enc({0, 15}, {1, 2}));
  CHECK_THROWS_AS(enc({3, 3}, {1, 2}), std::invalid_argument);
  CHECK_THROWS_AS(enc({4, 3}, {1, 2}), std::invalid_argument);
  CHECK_THROWS_AS(enc({16}, {1}), std::invalid_argument);
  CHECK_THROWS_AS(enc({1}, {std::nanf("")}), std::invalid_argument);
  CHECK_THROWS_AS(enc({1}, {std::numeric_limits<float>::infinity()}), std::invalid_argument);
  CHECK_THROWS_AS(enc({1}, {1}, 2, 2), std::invalid_argument);
  CHECK_THROWS_AS(enc({1}, {1}, 0, 0), std::invalid_argument);
  CHECK_THROWS_WITH(enc({4, 3}, {1, 2}), Catch::Contains("model.layers.0.mlp.up_proj.weight"));
  std::vector<LocoFiredView> null_view = {{nullptr, nullptr, 1}};
  CHECK_THROWS_AS(encode_loco_contribution(0, 1, 0, table, null_view), std::invalid_argument);
  CHECK_THROWS_AS(encode_loco_contribution(0, 1, 0, table, {}), std::invalid_argument);
  CHECK_THROWS_AS(encode_loco_contribution(0, 1, 0, {{"huge", (uint64_t{1} << 32) + 1}}, {{}}),
                  std::invalid_argument);
}

namespace {

/// A small contribution that uses every coding: gaps (raw and zstd), bitmap, dense, zero fired, raw and
/// byte-plane zstd values.
std::vector<uint8_t> mixed_buffer(std::vector<LocoTensorSpec>& table, std::vector<Fired>& fired) {
  std::mt19937_64 rng(77);
  table = make_table({4096, 3, 512, 7, 2000});
  fired.clear();
  fired.push_back(random_fired(rng, 4096, 0.05));
  fired.push_back({});
  fired.push_back(random_fired(rng, 512, 0.5));
  fired.push_back(random_fired(rng, 7, 0, 7));
  fired.push_back(random_fired(rng, 2000, 0, 2));
  return encode_loco_contribution(1, 2, 3, table, views(fired));
}

}  // namespace

TEST_CASE("loco: every truncation and every flipped byte is refused with a LocoError", "[sync][loco]") {
  std::vector<LocoTensorSpec> table;
  std::vector<Fired> fired;
  const auto buf = mixed_buffer(table, fired);
  const auto info = inspect_loco_contribution(buf.data(), buf.size());
  CHECK(info.tensors[0].index_coding == LocoIndexCoding::VarintGaps);
  CHECK(info.tensors[2].index_coding == LocoIndexCoding::Bitmap);
  CHECK(info.tensors[3].index_coding == LocoIndexCoding::Dense);
  CHECK(info.tensors[0].value_codec == LocoStreamCodec::BytePlanes);
  CHECK(info.tensors[4].value_codec == LocoStreamCodec::Raw);
  check_equal(fired, decode(buf, 1, 2, 3, table));
  for (size_t len = 0; len < buf.size(); ++len) {
    // A copy of exactly `len` bytes, so that a sanitizer would see any over-read.
    std::vector<uint8_t> cut(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(len));
    INFO("length " << len);
    CHECK_THROWS_AS(decode_loco_contribution(cut.empty() ? nullptr : cut.data(), len, 1, 2, 3, table),
                    LocoError);
    CHECK_THROWS_AS(inspect_loco_contribution(cut.data(), len), LocoError);
  }
  // One byte longer is refused too.
  std::vector<uint8_t> longer = buf;
  longer.push_back(0);
  CHECK_THROWS_WITH(decode(longer, 1, 2, 3, table), Catch::Contains("overlong"));
  for (size_t at = 0; at < buf.size(); ++at)
    for (uint8_t x : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      std::vector<uint8_t> bad = buf;
      bad[at] ^= x;
      INFO("byte " << at << " xor " << int(x));
      CHECK_THROWS_AS(decode(bad, 1, 2, 3, table), LocoError);
    }
  CHECK_THROWS_WITH(
      decode_loco_contribution(buf.data(), 8, 1, 2, 3, table),
      Catch::Contains("PULSELoCo contribution from rank 1, round 3 at byte") && Catch::Contains("truncated"));
  std::vector<uint8_t> flipped = buf;
  flipped[buf.size() / 2] ^= 4;
  CHECK_THROWS_WITH(decode(flipped, 1, 2, 3, table), Catch::Contains("checksum mismatch"));
}

TEST_CASE("loco: any edit behind a valid checksum is refused or decodes to a valid contribution",
          "[sync][loco]") {
  // The checks after the checksum on their own: every byte edited, checksum recomputed. Either a
  // LocoError or (e.g. an edited value byte) a contribution that still satisfies every invariant.
  std::vector<LocoTensorSpec> table;
  std::vector<Fired> fired;
  for (int level : {1, 0}) {
    LocoEncodeOptions opt;
    opt.zstd_level = level;
    auto buf = mixed_buffer(table, fired);
    if (level == 0) buf = encode_loco_contribution(1, 2, 3, table, views(fired), opt);
    size_t refused = 0, accepted = 0;
    for (size_t at = 0; at + 8 < buf.size(); ++at)
      for (uint8_t x : {uint8_t{0x01}, uint8_t{0x40}, uint8_t{0x80}, uint8_t{0xff}}) {
        std::vector<uint8_t> bad = buf;
        bad[at] ^= x;
        reseal(bad);
        INFO("level " << level << " byte " << at << " xor " << int(x));
        try {
          const LocoContribution c = decode(bad, 1, 2, 3, table);
          ++accepted;
          REQUIRE(c.tensors.size() == table.size());
          for (size_t t = 0; t < table.size(); ++t) {
            const auto& ct = c.tensors[t];
            REQUIRE(ct.values.size() == ct.indices.size());
            for (size_t j = 0; j < ct.indices.size(); ++j) {
              REQUIRE(ct.indices[j] < table[t].numel);
              if (j) REQUIRE(ct.indices[j] > ct.indices[j - 1]);
              REQUIRE(std::isfinite(ct.values[j]));
            }
          }
        } catch (const LocoError&) {
          ++refused;
        }
      }
    CHECK(refused > 0);
    CHECK(accepted > 0);
  }
}

TEST_CASE("loco: wrong rank, world size, round or tensor table is refused", "[sync][loco]") {
  std::vector<LocoTensorSpec> table;
  std::vector<Fired> fired;
  const auto buf = mixed_buffer(table, fired);  // rank 1 of 2, round 3
  CHECK_THROWS_WITH(decode(buf, 0, 2, 3, table), Catch::Contains("from rank 0") && Catch::Contains("rank 1"));
  CHECK_THROWS_WITH(decode(buf, 1, 3, 3, table), Catch::Contains("world size 2"));
  CHECK_THROWS_WITH(decode(buf, 1, 2, 4, table), Catch::Contains("round 3, expected round 4"));
  CHECK_THROWS_AS(decode(buf, 2, 2, 3, table), std::invalid_argument);
  auto renamed = table;
  renamed[2].name += "x";
  CHECK_THROWS_WITH(decode(buf, 1, 2, 3, renamed), Catch::Contains("tensor table hash"));
  auto resized = table;
  resized[0].numel += 1;
  CHECK_THROWS_AS(decode(buf, 1, 2, 3, resized), LocoError);
  auto swapped = table;
  std::swap(swapped[1], swapped[3]);
  CHECK_THROWS_AS(decode(buf, 1, 2, 3, swapped), LocoError);
  auto longer = table;
  longer.push_back({"extra", 1});
  CHECK_THROWS_AS(decode(buf, 1, 2, 3, longer), LocoError);
  // The error carries its fields.
  try {
    decode(buf, 1, 2, 4, table);
    FAIL("no throw");
  } catch (const LocoError& e) {
    CHECK(e.source_rank == 1);
    CHECK(e.round == 4);
    CHECK(e.tensor.empty());
    CHECK(e.byte_offset == 32);
  }
  // loco_decode_and_sum reports the bad buffer and leaves the sums alone.
  std::vector<Fired> f0(table.size());
  const auto b0 = encode_loco_contribution(0, 2, 3, table, views(f0));
  std::vector<std::vector<float>> sums;
  std::vector<LocoSumView> sv;
  for (const auto& t : table) sums.emplace_back(t.numel, 9.0f);
  for (auto& s : sums) sv.push_back({s.data(), s.size()});
  std::vector<uint8_t> bad = buf;
  bad[bad.size() - 1] ^= 1;
  CHECK_THROWS_WITH(loco_decode_and_sum({{b0.data(), b0.size()}, {bad.data(), bad.size()}}, 3, table, sv, 2),
                    Catch::Contains("from rank 1"));
  for (const auto& s : sums) CHECK(std::all_of(s.begin(), s.end(), [](float v) { return v == 9.0f; }));
  // Buffers in the wrong slots: rank 1's buffer at slot 0.
  CHECK_THROWS_WITH(loco_decode_and_sum({{buf.data(), buf.size()}, {b0.data(), b0.size()}}, 3, table, sv),
                    Catch::Contains("from rank 0"));
}

TEST_CASE("loco: forged streams with a valid checksum are refused by the structural checks", "[sync][loco]") {
  // Raw streams (level 0) so that bytes can be edited in place: tensor 'a' numel 100, gaps {1, 5, 9}
  // (3 bytes < a 13-byte bitmap); tensor 'b' numel 12 as a bitmap (7 of 12 fired: 2 bytes < 7 of gaps).
  const std::vector<LocoTensorSpec> table = {{"model.layers.0.mlp.up_proj.weight", 100}, {"b", 12}};
  std::vector<Fired> fired = {{{1, 5, 9}, {1.0f, -2.0f, 0.5f}},
                              {{0, 1, 2, 3, 5, 8, 11}, {1, 2, 3, 4, 5, 6, 7}}};
  LocoEncodeOptions opt;
  opt.zstd_level = 0;
  const auto buf = encode_loco_contribution(1, 2, 3, table, views(fired), opt);
  const auto info = inspect_loco_contribution(buf.data(), buf.size());
  REQUIRE(info.tensors[0].index_coding == LocoIndexCoding::VarintGaps);
  REQUIRE(info.tensors[1].index_coding == LocoIndexCoding::Bitmap);
  const size_t gaps = info.tensors[0].index_offset, vals = info.tensors[0].value_offset;
  const size_t bitmap = info.tensors[1].index_offset;
  auto forged = [&](auto edit) {
    std::vector<uint8_t> b = buf;
    edit(b);
    reseal(b);
    return b;
  };
  // Last gap 3 -> 100: position 106 >= numel.
  auto past = forged([&](std::vector<uint8_t>& b) { b[gaps + 2] = 100; });
  CHECK_THROWS_WITH(decode(past, 1, 2, 3, table),
                    Catch::Contains("PULSELoCo contribution from rank 1, round 3, tensor "
                                    "'model.layers.0.mlp.up_proj.weight' at byte " +
                                    std::to_string(gaps)) &&
                        Catch::Contains("gap index stream") && Catch::Contains("numel 100") &&
                        Catch::Contains("out of bounds"));
  // A head that promises a tail byte that is not there.
  CHECK_THROWS_AS(decode(forged([&](std::vector<uint8_t>& b) { b[gaps + 2] = 0x83; }), 1, 2, 3, table),
                  LocoError);
  // Bitmap: a bit set past numel (padding), and one bit too many / too few.
  CHECK_THROWS_WITH(decode(forged([&](std::vector<uint8_t>& b) { b[bitmap + 1] |= 0x10; }), 1, 2, 3, table),
                    Catch::Contains("padding"));
  CHECK_THROWS_WITH(decode(forged([&](std::vector<uint8_t>& b) { b[bitmap] |= 0x40; }), 1, 2, 3, table),
                    Catch::Contains("bits set"));
  CHECK_THROWS_WITH(decode(forged([&](std::vector<uint8_t>& b) { b[bitmap] &= 0xfe; }), 1, 2, 3, table),
                    Catch::Contains("bits set"));
  // Non-finite values.
  for (uint32_t pattern : {0x7fc00000u, 0x7f800000u, 0xff800000u, 0xffffffffu, 0x7f800001u}) {
    auto nan = forged([&](std::vector<uint8_t>& b) {
      for (int i = 0; i < 4; ++i) b[vals + 4 + i] = static_cast<uint8_t>(pattern >> (8 * i));
    });
    INFO("pattern " << pattern);
    CHECK_THROWS_WITH(decode(nan, 1, 2, 3, table),
                      Catch::Contains("non-finite") && Catch::Contains("entry 1"));
  }
  // Entry fields: the count of tensor 'a' (byte 57, after its codings byte) 3 -> 2: the value stream no
  // longer matches the count. Codings byte -> unknown. Value size -> past the end.
  CHECK(buf[56] == 0x00);
  CHECK(buf[57] == 3);
  CHECK_THROWS_WITH(decode(forged([&](std::vector<uint8_t>& b) { b[57] = 2; }), 1, 2, 3, table),
                    Catch::Contains("raw value stream has 12 bytes for 2 FP32 values"));
  CHECK_THROWS_WITH(decode(forged([&](std::vector<uint8_t>& b) { b[56] = 0x3f; }), 1, 2, 3, table),
                    Catch::Contains("unknown codings"));
  CHECK_THROWS_AS(decode(forged([&](std::vector<uint8_t>& b) { b[56] = 0x01; }), 1, 2, 3, table), LocoError);
  CHECK_THROWS_AS(decode(forged([&](std::vector<uint8_t>& b) { b[56] = 0x02; }), 1, 2, 3, table), LocoError);
  CHECK_THROWS_AS(decode(forged([&](std::vector<uint8_t>& b) { b[56] = 0x10; }), 1, 2, 3, table), LocoError);
  // n_tensors absurdly large, and a 10-byte ULEB that overflows 64 bits.
  CHECK_THROWS_WITH(
      inspect_loco_contribution(forged([&](std::vector<uint8_t>& b) { b[55] = 0x40; }).data(), buf.size()),
      Catch::Contains("n_tensors"));
  {
    std::vector<uint8_t> b(buf.begin(), buf.begin() + 56);
    b[48] = 1;  // one tensor
    b.push_back(0);
    for (int i = 0; i < 9; ++i) b.push_back(0xff);
    b.push_back(0x7f);
    for (int i = 0; i < 8; ++i) b.push_back(0);
    const uint64_t total = b.size();
    for (int i = 0; i < 8; ++i) b[16 + i] = static_cast<uint8_t>(total >> (8 * i));
    reseal(b);
    CHECK_THROWS_WITH(inspect_loco_contribution(b.data(), b.size()), Catch::Contains("overflows 64 bits"));
  }
  // Stream sizes that overflow when added: a zstd value stream claiming 2^63 bytes.
  {
    std::vector<uint8_t> b(buf.begin(), buf.begin() + 56);
    b[48] = 1;
    b.push_back(0x10);  // gaps raw, values zstd
    b.push_back(1);     // count
    b.push_back(1);     // index raw
    b.push_back(1);     // index stored
    for (int i = 0; i < 9; ++i) b.push_back(0x80);
    b.push_back(0x01);  // value stored = 2^63
    b.push_back(0);     // the gap
    for (int i = 0; i < 8; ++i) b.push_back(0);
    const uint64_t total = b.size();
    for (int i = 0; i < 8; ++i) b[16 + i] = static_cast<uint8_t>(total >> (8 * i));
    reseal(b);
    CHECK_THROWS_WITH(inspect_loco_contribution(b.data(), b.size()),
                      Catch::Contains("runs past the payload end"));
  }
  // A zstd value stream that decompresses to the wrong size (forged count with a zstd stream).
  {
    std::vector<Fired> many = {{{}, {}}, {{}, {}}};
    for (uint32_t i = 0; i < 16; i += 2) {  // 8 gaps of 1 byte (< a 13-byte bitmap)
      many[0].idx.push_back(i);
      many[0].val.push_back(0.25f);
    }
    const auto z = encode_loco_contribution(1, 2, 3, table, views(many));
    const auto zi = inspect_loco_contribution(z.data(), z.size());
    REQUIRE(zi.tensors[0].value_codec != LocoStreamCodec::Raw);
    REQUIRE(z[57] == 8);
    std::vector<uint8_t> b = z;
    b[57] = 7;  // count 7: the 8 gaps leave a trailing byte, and the values decompress to 32 != 28 bytes
    reseal(b);
    CHECK_THROWS_AS(decode(b, 1, 2, 3, table), LocoError);
  }
}

TEST_CASE("loco: at 5% density the contribution is much smaller than the padded int64 reference",
          "[sync][loco]") {
  std::mt19937_64 rng(2024);
  const std::vector<uint64_t> numels = {1000000, 250000, 4096, 1000000};
  const auto table = make_table(numels);
  const uint32_t world = 2;
  std::vector<std::vector<uint64_t>> counts;
  std::vector<uint64_t> encoded;
  for (uint32_t r = 0; r < world; ++r) {
    std::vector<Fired> fired;
    for (uint64_t n : numels) fired.push_back(random_fired(rng, n, r == 0 ? 0.05 : 0.04));
    const auto buf = encode_loco_contribution(r, world, 0, table, views(fired));
    check_equal(fired, decode(buf, r, world, 0, table));
    counts.push_back(loco_fired_counts(views(fired)));
    encoded.push_back(buf.size());
  }
  const uint64_t reference = loco_reference_padded_bytes(counts);  // per rank
  const uint64_t dense = loco_dense_bytes(table);
  for (uint32_t r = 0; r < world; ++r) {
    const double ratio = static_cast<double>(reference) / static_cast<double>(encoded[r]);
    const double unpadded = static_cast<double>(loco_reference_unpadded_bytes(counts[r])) / encoded[r];
    INFO("rank " << r << ": " << encoded[r] << " B vs padded int64 reference " << reference << " B (" << ratio
                 << "x), unpadded " << unpadded << "x, dense " << dense << " B");
    CHECK(ratio >= 1.5);
    CHECK(unpadded >= 1.5);
    CHECK(encoded[r] * 4 < dense);
  }
  // The padded reference is what the largest rank would send: more than rank 1's own unpadded bytes.
  CHECK(reference > loco_reference_unpadded_bytes(counts[1]));
  CHECK(reference == loco_reference_unpadded_bytes(counts[0]));  // rank 0 is the largest in every tensor
  CHECK(dense == 4 * (1000000 + 250000 + 4096 + 1000000));
  CHECK_THROWS_AS(loco_reference_padded_bytes({{1, 2}, {3}}), std::invalid_argument);
}

TEST_CASE("loco: sizes vs the padded int64 reference by density (prints a table)", "[.][loco_sizes]") {
  std::mt19937_64 rng(1);
  const uint64_t n = 4000000;
  const auto table = make_table({n});
  std::printf(
      "density  fired     encoded_B  B/entry  ref_padded_B  ratio  dense_B  dense_ratio  coding"
      "  enc_ms dec_ms\n");
  for (double p : {0.001, 0.01, 0.03, 0.05, 0.10, 0.20, 0.50}) {
    std::vector<std::vector<Fired>> fired(2);
    std::vector<std::vector<uint64_t>> counts;
    std::vector<uint8_t> buf0;
    for (int r = 0; r < 2; ++r) {
      fired[r].push_back(random_fired(rng, n, r == 0 ? p : p * 0.9));
      counts.push_back(loco_fired_counts(views(fired[r])));
      if (r == 0) buf0 = encode_loco_contribution(0, 2, 0, table, views(fired[r]));
    }
    using clock = std::chrono::steady_clock;
    const auto t0 = clock::now();
    const auto again = encode_loco_contribution(0, 2, 0, table, views(fired[0]));
    const auto t1 = clock::now();
    const auto back = decode(again, 0, 2, 0, table);
    const auto t2 = clock::now();
    const double enc_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    const double dec_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    const auto info = inspect_loco_contribution(buf0.data(), buf0.size());
    const uint64_t ref = loco_reference_padded_bytes(counts);
    std::printf(
        "%6.3f  %8llu  %10zu  %7.3f  %12llu  %5.2fx  %7llu  %6.1fx  idx=%d/%d val=%d/%x  %6.1f %6.1f\n", p,
        static_cast<unsigned long long>(counts[0][0]), buf0.size(),
        static_cast<double>(buf0.size()) / counts[0][0], static_cast<unsigned long long>(ref),
        static_cast<double>(ref) / buf0.size(), static_cast<unsigned long long>(loco_dense_bytes(table)),
        static_cast<double>(loco_dense_bytes(table)) / buf0.size(), int(info.tensors[0].index_coding),
        int(info.tensors[0].index_codec), int(info.tensors[0].value_codec),
        unsigned(info.tensors[0].plane_zstd_mask), enc_ms, dec_ms);
    CHECK(back.tensors[0].indices == fired[0][0].idx);
  }
}
