// The decoder's varint-gap kernels (kernels/apply_kernels.h): every SIMD path equals the portable one and a
// plain reference decoder, on random streams of every density, with tails of every length, short and
// odd-length tensors, first and last elements changed; the fast index validation accepts exactly what
// a change-by-change reference accepts.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/apply_kernels.h"
#include "sync/hash.h"
#include "sync/index_coding.h"
#include "sync/patch.h"

using namespace pulse::kernels;
using namespace pulse::sync;

namespace {

/// apply_varint_u16's block sink feeding an Xxh3Stream (as sync/patch_apply.cpp does).
BlockSink sink_of(Xxh3Stream& hash) {
  return {
      [](void* h, const uint8_t* data, uint64_t bytes) { static_cast<Xxh3Stream*>(h)->update(data, bytes); },
      &hash};
}

/// The kernel sets this CPU can run.
std::vector<const char*> isas() {
  std::vector<const char*> out;
  for (const char* isa : {"avx512", "avx2", "portable"}) {
    if (apply_kernels_force(isa))
      out.push_back(isa);
    else
      WARN("apply kernels '" << isa << "' not tested: this CPU cannot run them");
  }
  apply_kernels_force(nullptr);
  return out;
}

/// Runs on the kernels of `isa` while alive; the CPU's fastest again afterwards, even on a failed REQUIRE.
struct IsaGuard {
  explicit IsaGuard(const char* isa) { REQUIRE(apply_kernels_force(isa)); }
  ~IsaGuard() { apply_kernels_force(nullptr); }
};

/// Sorted distinct positions in [0, n): each element with probability p, plus `extra` forced ones.
std::vector<uint64_t> random_positions(std::mt19937_64& rng, uint64_t n, double p,
                                       const std::vector<uint64_t>& extra = {}) {
  std::vector<uint8_t> on(n, 0);
  std::bernoulli_distribution change(p);
  for (uint64_t i = 0; i < n; ++i) on[i] = change(rng);
  for (uint64_t e : extra)
    if (e < n) on[e] = 1;
  std::vector<uint64_t> pos;
  for (uint64_t i = 0; i < n; ++i)
    if (on[i]) pos.push_back(i);
  return pos;
}

std::vector<uint8_t> gap_stream(const std::vector<uint64_t>& pos) {
  GapEncoder enc;
  for (uint64_t p : pos) enc.add(p);
  std::vector<uint8_t> out;
  enc.append_to(out);
  return out;
}

/// Reference: the positions of a varint-gap stream, or false when the stream is invalid (FORMAT.md:
/// a head per change, one LEB128 tail chain per head with bit 7, the gap within 64 bits with at most
/// 9 tail bytes, every position < numel, no bytes left over). 128-bit arithmetic, no shortcuts.
bool reference_decode(const std::vector<uint8_t>& s, uint64_t changed, uint64_t numel,
                      std::vector<uint64_t>* out = nullptr) {
  if (changed > numel || s.size() < changed) return false;
  size_t t = changed;
  unsigned __int128 next = 0;
  for (uint64_t j = 0; j < changed; ++j) {
    unsigned __int128 gap = s[j] & 127;
    if (s[j] & 128) {
      unsigned __int128 rest = 0;
      int bytes = 0;
      for (;;) {
        if (t == s.size()) return false;
        const uint8_t b = s[t++];
        if (++bytes > 9) return false;
        rest |= static_cast<unsigned __int128>(b & 127) << (7 * (bytes - 1));
        if (!(b & 128)) break;
      }
      if (rest >> 57) return false;
      gap |= rest << 7;
    }
    const unsigned __int128 pos = next + gap;
    if (pos >= numel) return false;
    if (out) out->push_back(static_cast<uint64_t>(pos));
    next = pos + 1;
  }
  return t == s.size();
}

bool validates(const std::vector<uint8_t>& s, uint64_t changed, uint64_t numel) {
  try {
    validate_index_stream("t", kIndexVarintGaps, s.data(), s.size(), changed, numel, 0);
    return true;
  } catch (const PatchError&) {
    return false;
  }
}

}  // namespace

TEST_CASE("varint head sums: SIMD and portable kernels equal a plain loop", "[sync][apply]") {
  std::mt19937_64 rng(21);
  for (size_t n : {0, 1, 7, 8, 9, 31, 32, 33, 63, 64, 65, 127, 200, 2048 + 13, 100000}) {
    std::vector<uint8_t> h(n);
    for (auto& b : h) b = static_cast<uint8_t>(rng());
    uint64_t low = 0, flagged = 0;
    for (uint8_t b : h) {
      low += b & 127;
      flagged += b >> 7;
    }
    for (const char* isa : isas()) {
      IsaGuard guard(isa);
      INFO("n " << n << ", isa " << isa);
      const HeadSums fast = varint_head_sums(h.data(), n);
      CHECK(fast.low7 == low);
      CHECK(fast.flagged == flagged);
    }
  }
}

TEST_CASE("full gap batches: every variant spreads one-byte tails as the portable kernel does",
          "[sync][apply]") {
  // Batches of exactly 64 changes (the SIMD paths), at densities where a few or most gaps have a tail,
  // up to the end of the tail stream (the last batches fall back to the portable kernel), and with
  // some 2-byte tails (the batch is refused).
  for (const char* isa : isas()) {
    IsaGuard guard(isa);
    std::mt19937_64 rng(23);
    for (double p : {0.07, 0.02, 0.01, 0.005, 0.002, 0.0003}) {
      const uint64_t n = 1 << 20;
      const auto pos = random_positions(rng, n, p, {0, n - 1});
      const auto s = gap_stream(pos);
      const uint64_t changed = pos.size();
      uint64_t tail_used = 0;  // in the stream
      for (uint64_t j = 0; j < changed; j += kGapBatch) {
        const size_t count = static_cast<size_t>(std::min<uint64_t>(kGapBatch, changed - j));
        // The tail stream in an allocation of its own size, so that reading past it would be caught by
        // sanitizers.
        const std::vector<uint8_t> tail(s.begin() + static_cast<std::ptrdiff_t>(changed + tail_used),
                                        s.end());
        uint16_t fast[kGapBatch], portable[kGapBatch];
        const GapBatch a =
            decode_gap_batch(s.data() + j, tail.data(), tail.data() + tail.size(), count, fast);
        const GapBatch b =
            decode_gap_batch_portable(s.data() + j, tail.data(), tail.data() + tail.size(), count, portable);
        INFO("density " << p << ", change " << j << ", isa " << isa);
        REQUIRE(a.ok == b.ok);
        uint32_t flagged = 0;
        for (size_t i = 0; i < count; ++i) flagged += s[j + i] >> 7;
        if (a.ok) {
          CHECK(a.sum == b.sum);
          CHECK(a.tail_bytes == b.tail_bytes);
          CHECK(a.tail_bytes == flagged);
          for (size_t i = 0; i < count; ++i) CHECK(fast[i] == portable[i]);
          tail_used += a.tail_bytes;
        } else {
          for (size_t i = 0; i < count; ++i)
            if (s[j + i] & 128)
              while (s[changed + tail_used++] & 128) {
              }
        }
      }
      CHECK(changed + tail_used == s.size());
    }
  }
}

TEST_CASE("gap batches and value assembly: SIMD and portable kernels agree", "[sync][apply]") {
  for (const char* isa : isas()) {
    IsaGuard guard(isa);
    std::mt19937_64 rng(22);
    // Gap mixes: no tails, some one-byte tails, some longer tails (the batch is then refused).
    for (double p : {0.5, 0.07, 0.01, 0.002, 0.0001}) {
      const uint64_t n = 400000;
      const auto pos = random_positions(rng, n, p, {0, n - 1});
      const auto s = gap_stream(pos);
      const uint64_t changed = pos.size();
      std::vector<uint64_t> ref;
      REQUIRE(reference_decode(s, changed, n, &ref));
      REQUIRE(ref == pos);
      const uint8_t* tail = s.data() + changed;
      const uint8_t* tail_end = s.data() + s.size();
      uint64_t prev = ~uint64_t{0};
      for (uint64_t j = 0; j < changed;) {
        const size_t count = std::min<uint64_t>(changed - j, 1 + rng() % kGapBatch);
        uint16_t fast[kGapBatch], portable[kGapBatch];
        const GapBatch a = decode_gap_batch(s.data() + j, tail, tail_end, count, fast);
        const GapBatch b = decode_gap_batch_portable(s.data() + j, tail, tail_end, count, portable);
        bool long_tail = false;
        for (size_t i = 0; i < count; ++i)
          long_tail = long_tail || pos[j + i] - (j + i == 0 ? ~uint64_t{0} : pos[j + i - 1]) - 1 >= 16384;
        INFO("density " << p << ", change " << j << ", count " << count << ", isa " << isa);
        REQUIRE(a.ok == !long_tail);
        REQUIRE(b.ok == !long_tail);
        uint64_t tail_bytes = 0;
        for (size_t i = 0; i < count; ++i) {
          const uint64_t gap = pos[j + i] - prev - 1;
          prev = pos[j + i];
          tail_bytes += s[j + i] >> 7;
          if (!a.ok) continue;
          CHECK(fast[i] == gap + 1);
          CHECK(portable[i] == gap + 1);
        }
        if (a.ok) {
          CHECK(a.sum == pos[j + count - 1] - (j == 0 ? ~uint64_t{0} : pos[j - 1]));
          CHECK(b.sum == a.sum);
          CHECK(a.tail_bytes == tail_bytes);
          CHECK(b.tail_bytes == tail_bytes);
          tail += a.tail_bytes;
        } else {  // skip the batch's tails by hand
          for (size_t i = 0; i < count; ++i)
            if (s[j + i] & 128)
              while (*tail++ & 128) {
              }
        }
        j += count;
      }
      CHECK(tail == tail_end);
    }

    for (size_t count = 1; count <= kGapBatch; ++count) {
      std::vector<uint8_t> lo(count), hi(count);
      for (size_t i = 0; i < count; ++i) {
        lo[i] = static_cast<uint8_t>(rng());
        hi[i] = static_cast<uint8_t>(rng());
      }
      for (bool delta : {false, true}) {
        uint16_t fast[kGapBatch], portable[kGapBatch];
        assemble_u16_values(lo.data(), hi.data(), count, delta, fast);
        assemble_u16_values_portable(lo.data(), hi.data(), count, delta, portable);
        for (size_t i = 0; i < count; ++i) {
          const uint16_t z = static_cast<uint16_t>(lo[i] | hi[i] << 8);
          const int d = (z & 1) ? -(z >> 1) - 1 : z >> 1;  // zigzag read back as a signed difference
          const uint16_t want = delta ? static_cast<uint16_t>(d) : z;
          INFO("count " << count << " i " << i << " delta " << delta << " isa " << isa);
          CHECK(fast[i] == want);
          CHECK(portable[i] == want);
        }
      }
    }
  }
}

TEST_CASE("apply_varint_u16 equals a plain decode-and-write on every path", "[sync][apply]") {
  std::mt19937_64 rng(23);
  const std::vector<uint64_t> sizes = {1, 2, 63, 64, 65, 1000, 32768, 32768 * 2 + 5, 300001};
  for (uint64_t n : sizes) {
    for (double p : {1.0, 0.5, 0.07, 0.01, 0.0005}) {
      std::vector<uint64_t> extra;
      if (rng() % 2) extra.push_back(0);
      if (rng() % 2) extra.push_back(n - 1);
      auto pos = random_positions(rng, n, p, extra);
      if (pos.empty()) pos.push_back(n / 2);
      const uint64_t changed = pos.size();
      const auto index = gap_stream(pos);
      std::vector<uint16_t> base(n), values(changed);
      for (auto& v : base) v = static_cast<uint16_t>(rng());
      for (auto& v : values) v = static_cast<uint16_t>(rng() % 8 == 0 ? rng() : rng() % 5);  // small deltas
      // Stream: index, lo plane, hi plane, exactly sized (no padding past the end).
      std::vector<uint8_t> streams(index);
      for (int b = 0; b < 2; ++b)
        for (uint16_t v : values) streams.push_back(static_cast<uint8_t>(v >> (8 * b)));
      for (bool delta : {false, true}) {
        std::vector<uint16_t> want = base;
        std::vector<uint16_t> want_undo(changed);
        for (uint64_t j = 0; j < changed; ++j) {
          const uint16_t z = values[j];
          const uint16_t d = static_cast<uint16_t>((z >> 1) ^ (0u - (z & 1u)));
          want_undo[j] = want[pos[j]];
          want[pos[j]] = delta ? static_cast<uint16_t>(want[pos[j]] + d) : z;
        }
        const uint64_t want_hash = xxh3_64(want.data(), 2 * n);
        for (const char* isa : isas()) {
          IsaGuard guard(isa);
          std::vector<uint16_t> w = base, undo(changed, 0xdead);
          Xxh3Stream hash;
          apply_varint_u16(reinterpret_cast<uint8_t*>(w.data()), n, streams.data(), index.size(), changed,
                           delta, reinterpret_cast<uint8_t*>(undo.data()), sink_of(hash));
          INFO("n " << n << " density " << p << " changed " << changed << " delta " << delta << " isa "
                    << isa);
          CHECK(w == want);
          CHECK(undo == want_undo);
          CHECK(hash.digest() == want_hash);
        }
      }
    }
  }
}

TEST_CASE("fast varint validation accepts exactly the valid streams", "[sync][apply]") {
  std::mt19937_64 rng(24);
  size_t accepted = 0, rejected = 0;
  for (int round = 0; round < 400; ++round) {
    const uint64_t n = 1 + rng() % 5000;
    const double p = std::vector<double>{0.5, 0.07, 0.01, 0.001}[rng() % 4];
    auto pos = random_positions(rng, n, p, {rng() % 2 ? n - 1 : 0});
    auto s = gap_stream(pos);
    uint64_t changed = pos.size(), numel = n;
    // Corruptions: none, a flipped bit / random byte, a truncation or extra byte, a changed count or
    // numel, a tail chain made overlong (8..11 bytes, last value 0..3).
    switch (rng() % 7) {
      case 0:
        break;
      case 1:
        if (!s.empty()) s[rng() % s.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 2:
        if (!s.empty()) s[rng() % s.size()] = static_cast<uint8_t>(rng());
        break;
      case 3:
        if (rng() % 2 && !s.empty())
          s.pop_back();
        else
          s.push_back(static_cast<uint8_t>(rng()));
        break;
      case 4:
        changed += rng() % 2 ? 1 : -1;
        break;
      case 5:
        numel = pos.back() + (rng() % 2);  // exactly too small or exactly enough
        break;
      case 6: {
        // Replace the whole stream by one change with a long chain.
        const size_t len = 8 + rng() % 4;
        s = {static_cast<uint8_t>(0x80 | (rng() & 127))};
        for (size_t i = 0; i + 1 < len; ++i) s.push_back(static_cast<uint8_t>(0x80 | rng()));
        s.push_back(static_cast<uint8_t>(rng() % 4));
        changed = 1;
        numel = rng() % 2 ? ~uint64_t{0} : uint64_t{1} << (rng() % 64);
        break;
      }
    }
    const bool want = reference_decode(s, changed, numel);
    (want ? accepted : rejected) += 1;
    for (const char* isa : isas()) {
      IsaGuard guard(isa);
      INFO("round " << round << " isa " << isa);
      CHECK(validates(s, changed, numel) == want);
    }
  }
  CHECK(isas().back() == std::string("portable"));
  CHECK(accepted > 50);
  CHECK(rejected > 50);

  // The precise error message survives the fast path.
  const std::vector<uint8_t> s = {3, 0x81, 5, 2};  // gaps 3, 1 + 128 * 2, 5: positions 3, 261, 267
  CHECK(validates(s, 3, 268));
  try {
    validate_index_stream("layer.0.weight", kIndexVarintGaps, s.data(), s.size(), 3, 267, 1000);
    FAIL("out of bounds accepted");
  } catch (const PatchError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("layer.0.weight") != std::string::npos);
    CHECK(msg.find("position out of bounds (change 2") != std::string::npos);
    CHECK(msg.find("offset 1002") != std::string::npos);
  }
}
