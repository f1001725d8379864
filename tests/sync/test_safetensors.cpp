// safetensors reader/writer against the upstream sample files and hand-made malformed headers.
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "sync/io/atomic_file.h"
#include "sync/hash.h"
#include "sync/io/safetensors.h"
#include "tests/temp_dir.h"
#include "tests/test_paths.h"

using namespace pulse::sync;

namespace {

std::string temp_dir() {
  static const std::string dir = pulse::test::process_temp_dir("pulse_test_safetensors", "");
  return dir;
}

std::string sample(const std::string& name) {
  return pulse::test::shared_path("models/safetensors-samples/" + name + ".safetensors");
}

template <typename T>
std::vector<T> values_of(const TensorView& t) {
  std::vector<T> v(t.nbytes / sizeof(T));
  std::memcpy(v.data(), t.data, t.nbytes);
  return v;
}

// A file from a raw JSON header and data bytes (header not padded, as the samples).
std::string write_raw(const std::string& name, const std::string& json, const std::string& data,
                      uint64_t header_len_override = 0) {
  std::string path = temp_dir() + "/" + name;
  std::string bytes(8, '\0');
  uint64_t len = header_len_override ? header_len_override : json.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(len >> (8 * i));
  bytes += json + data;
  write_file_atomic(path, bytes.data(), bytes.size());
  return path;
}

void require_refused(const std::string& path, const std::string& needle) {
  try {
    SafetensorsFile::open(path);
    FAIL("no error for " << path);
  } catch (const std::runtime_error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find(needle) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("safetensors samples parse with the documented values", "[sync][safetensors]") {
  {
    auto f = SafetensorsFile::open(sample("B"));
    REQUIRE(f.tensors().size() == 1);
    CHECK(f.tensors()[0].name == "B");
    CHECK(f.tensors()[0].dtype == DType::U8);
    CHECK(f.tensors()[0].shape == std::vector<int64_t>{6});
    CHECK(values_of<uint8_t>(f.tensors()[0]) == std::vector<uint8_t>{253, 254, 255, 0, 1, 2});
    CHECK(f.metadata().at("test") == "a");
  }
  CHECK(values_of<uint16_t>(SafetensorsFile::open(sample("H")).tensors()[0]) ==
        std::vector<uint16_t>{65533, 65534, 65535, 0, 1, 2});
  CHECK(values_of<uint32_t>(SafetensorsFile::open(sample("I")).tensors()[0]) ==
        std::vector<uint32_t>{4294967293u, 4294967294u, 4294967295u, 0, 1, 2});
  const std::vector<int64_t> ints{-3, -2, -1, 0, 1, 2};
  auto as_i64 = [](auto v) { return std::vector<int64_t>(v.begin(), v.end()); };
  CHECK(as_i64(values_of<int8_t>(SafetensorsFile::open(sample("b")).tensors()[0])) == ints);
  CHECK(as_i64(values_of<int16_t>(SafetensorsFile::open(sample("h")).tensors()[0])) == ints);
  CHECK(as_i64(values_of<int32_t>(SafetensorsFile::open(sample("i")).tensors()[0])) == ints);
  CHECK(values_of<double>(SafetensorsFile::open(sample("d")).tensors()[0]) ==
        std::vector<double>{-3, -2, -1, 0, 1, 2});
  CHECK(values_of<float>(SafetensorsFile::open(sample("f")).tensors()[0]) ==
        std::vector<float>{-3, -2, -1, 0, 1, 2});
  // F16 -3..2: sign/exponent/mantissa patterns of IEEE binary16.
  CHECK(values_of<uint16_t>(SafetensorsFile::open(sample("e")).tensors()[0]) ==
        std::vector<uint16_t>{0xC200, 0xC000, 0xBC00, 0x0000, 0x3C00, 0x4000});

  auto overall = SafetensorsFile::open(sample("overall"));
  std::vector<std::string> order;
  for (const auto& t : overall.tensors()) order.push_back(t.name);
  CHECK(order == std::vector<std::string>{"B", "H", "I", "b", "d", "e", "f", "h", "i"});
  CHECK(values_of<float>(overall.tensors()[6]) == std::vector<float>{-3, -2, -1, 0, 1, 2});
}

TEST_CASE("safetensors samples round-trip through write_safetensors", "[sync][safetensors]") {
  for (const char* name : {"B", "H", "I", "b", "d", "e", "f", "h", "i", "overall"}) {
    INFO(name);
    auto src = SafetensorsFile::open(sample(name));
    const std::string out = temp_dir() + "/rt_" + name + ".safetensors";
    write_safetensors(out, src.tensors(), src.metadata());
    auto back = SafetensorsFile::open(out);
    CHECK(back.metadata() == src.metadata());
    REQUIRE(back.tensors().size() == src.tensors().size());
    for (size_t i = 0; i < src.tensors().size(); ++i) {
      const auto& a = src.tensors()[i];
      const auto& b = back.tensors()[i];
      CHECK(a.name == b.name);
      CHECK(a.dtype == b.dtype);
      CHECK(a.shape == b.shape);
      REQUIRE(a.nbytes == b.nbytes);
      CHECK(std::memcmp(a.data, b.data, a.nbytes) == 0);
      if (i == 0) CHECK(reinterpret_cast<uintptr_t>(b.data) % 8 == 0);  // header padded to 8 bytes
    }
    CHECK(root_hash(back.tensors()) == root_hash(src.tensors()));
  }
}

TEST_CASE("safetensors malformed headers are refused naming the file", "[sync][safetensors]") {
  const std::string six(6, 'x');
  require_refused(write_raw("overlap.safetensors",
                            R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                            six),
                  "overlaps");
  require_refused(
      write_raw("range.safetensors", R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", six),
      "past the end");
  require_refused(
      write_raw("size.safetensors", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,6]}})", six),
      "needs 8");
  require_refused(write_raw("huge.safetensors", R"({})", six, 1ull << 40), "exceeds");
  require_refused(write_raw("long.safetensors", R"({})", six, 100), "truncated");
  require_refused(write_raw("json.safetensors", R"({"a":{"dtype":)", six), "bad JSON");
  require_refused(
      write_raw("dtype.safetensors", R"({"a":{"dtype":"Q4","shape":[6],"data_offsets":[0,6]}})", six),
      "unknown dtype");
  require_refused(
      write_raw("neg.safetensors", R"({"a":{"dtype":"U8","shape":[-6],"data_offsets":[0,6]}})", six),
      "shape");
  // A tensor or a field named twice (JSON keeps the last one silently): refused, naming the key.
  require_refused(write_raw("dup.safetensors",
                            R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
                            R"("a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})",
                            six),
                  "key 'a' twice");
  require_refused(write_raw("dupfield.safetensors",
                            R"({"a":{"dtype":"U8","shape":[6],"dtype":"I8","data_offsets":[0,6]}})", six),
                  "key 'dtype' twice");
  {  // The same field name in two tensors is fine.
    const std::string path = write_raw("two.safetensors",
                                       R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]},)"
                                       R"("b":{"dtype":"U8","shape":[3],"data_offsets":[3,6]}})",
                                       six);
    CHECK(SafetensorsFile::open(path).tensors().size() == 2);
  }
  {
    const std::string path = temp_dir() + "/short.safetensors";
    write_file_atomic(path, "abc", 3);
    require_refused(path, "truncated");
  }
  {  // truncating a real file anywhere is refused
    const std::string bytes = read_file(sample("overall"));
    for (size_t n : {size_t(0), size_t(7), size_t(8), size_t(100), bytes.size() - 1}) {
      const std::string path = temp_dir() + "/trunc" + std::to_string(n) + ".safetensors";
      write_file_atomic(path, bytes.data(), n);
      CHECK_THROWS_AS(SafetensorsFile::open(path), std::runtime_error);
    }
  }
}

TEST_CASE("safetensors header-length errors name the length and the file size", "[sync][safetensors]") {
  const std::string six(6, 'x');
  // 8-byte length + 2-byte "{}" + 6 data bytes = 16 bytes.
  const std::string huge = write_raw("huge_len.safetensors", R"({})", six, 1ull << 40);
  require_refused(huge, "header length 1099511627776");
  require_refused(huge, "file size 16 bytes");
  const std::string past = write_raw("past_len.safetensors", R"({})", six, 100);
  require_refused(past, "header length 100");
  require_refused(past, "file size 16 bytes");
  require_refused(past, "at most 8 header bytes fit");
}

TEST_CASE("safetensors layout policy: holes, leading gaps and trailing bytes are refused",
          "[sync][safetensors]") {
  const std::string six(6, 'x');
  // The header below is 105 bytes, so data offset d is file offset 113 + d.
  auto two = [](int a0, int a1, int b0, int b1) {
    char buf[160];
    std::snprintf(buf, sizeof buf,
                  R"({"a":{"dtype":"U8","shape":[%d],"data_offsets":[%d,%d]},)"
                  R"("b":{"dtype":"U8","shape":[%d],"data_offsets":[%d,%d]}})",
                  a1 - a0, a0, a1, b1 - b0, b0, b1);
    REQUIRE(std::strlen(buf) == 105);
    return std::string(buf);
  };
  {  // a hole between two tensors: data bytes [2, 4)
    const std::string path = write_raw("hole.safetensors", two(0, 2, 4, 6), six);
    require_refused(path,
                    "hole: data bytes [2, 4) (file offsets [115, 117)) between tensor 'a' and tensor 'b'");
  }
  {  // a hole found in offset order, whatever the header order
    const std::string path = write_raw("hole_order.safetensors", two(3, 6, 0, 2), six);
    require_refused(path,
                    "hole: data bytes [2, 3) (file offsets [115, 116)) between tensor 'b' and tensor 'a'");
  }
  {  // a leading gap before the first tensor: data bytes [0, 1)
    const std::string path = write_raw("lead.safetensors", two(1, 3, 3, 6), six);
    require_refused(path,
                    "leading gap: data bytes [0, 1) (file offsets [113, 114)) before the first tensor 'a'");
  }
  {  // trailing bytes after the last tensor: data bytes [5, 6)
    const std::string path = write_raw("trail.safetensors", two(0, 2, 2, 5), six);
    require_refused(path,
                    "trailing bytes: data bytes [5, 6) (file offsets [118, 119)) after the last tensor 'b'");
  }
  {  // a file with no tensors but data bytes
    const std::string path = write_raw("trail_empty.safetensors", R"({"__metadata__":{"k":"v"}})", six);
    require_refused(path, "trailing bytes: data bytes [0, 6)");
    require_refused(path, "no tensors");
  }
  {  // a real file with one extra byte appended
    std::string bytes = read_file(sample("overall"));
    const size_t end = bytes.size();
    bytes += '\0';
    const std::string path = temp_dir() + "/overall_plus1.safetensors";
    write_file_atomic(path, bytes.data(), bytes.size());
    require_refused(path, "trailing bytes");
    require_refused(path, "file offsets [" + std::to_string(end) + ", " + std::to_string(end + 1) + "))");
  }
  // Accepted: contiguous in offset order whatever the header order, zero-sized tensors on the seams,
  // a header padded with spaces, an empty file with no tensors.
  CHECK(SafetensorsFile::open(write_raw("swapped.safetensors", two(3, 6, 0, 3), six)).tensors().size() == 2);
  {
    const std::string path = write_raw("zero.safetensors",
                                       R"({"z0":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                                       R"("a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
                                       R"("z6":{"dtype":"BF16","shape":[2,0],"data_offsets":[6,6]}})",
                                       six);
    auto f = SafetensorsFile::open(path);
    REQUIRE(f.tensors().size() == 3);
    CHECK(f.tensors()[0].name == "z0");
    CHECK(f.tensors()[2].name == "z6");
  }
  {  // a zero-sized tensor inside another one is an overlap
    const std::string path = write_raw("zero_inside.safetensors",
                                       R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]},)"
                                       R"("z":{"dtype":"U8","shape":[0],"data_offsets":[3,3]}})",
                                       six);
    require_refused(path, "tensor 'z' at data offset 3 overlaps tensor 'a' ending at 6");
  }
  CHECK(SafetensorsFile::open(write_raw("padded.safetensors",
                                        R"({"a":{"dtype":"U8","shape":[6],"data_offsets":[0,6]}}    )", six))
            .tensors()
            .size() == 1);
  CHECK(SafetensorsFile::open(write_raw("empty.safetensors", R"({})", "")).tensors().empty());
}

TEST_CASE("every real safetensors file under ../shared/models loads and tiles its data exactly",
          "[sync][safetensors]") {
  namespace fs = std::filesystem;
  const std::string root = pulse::test::shared_path("models");
  REQUIRE(fs::is_directory(root));
  size_t files = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    if (!entry.is_regular_file() || entry.path().extension() != ".safetensors") continue;
    const std::string path = entry.path().string();
    INFO(path);
    auto f = SafetensorsFile::open(path);
    // The policy leaves no byte unaccounted for: header + the tensors' bytes = the file.
    const std::string bytes = read_file(path);
    uint64_t header = 0;
    for (int i = 0; i < 8; ++i) header |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[i])) << (8 * i);
    uint64_t data = 0;
    for (const auto& t : f.tensors()) data += t.nbytes;
    CHECK(8 + header + data == bytes.size());
    ++files;
  }
  // safetensors-samples (10 files) and stories260k/model.safetensors at least.
  CHECK(files >= 11);
  CHECK(SafetensorsFile::open(pulse::test::shared_path("models/stories260k/model.safetensors"))
            .tensors()
            .size() > 0);
}

TEST_CASE("checkpoint folders: single file and sharded index", "[sync][safetensors]") {
  const std::string dir = temp_dir() + "/sharded";
  REQUIRE(::mkdir(dir.c_str(), 0755) == 0);
  auto overall = SafetensorsFile::open(sample("overall"));
  const auto& ts = overall.tensors();
  write_safetensors(dir + "/model-00001-of-00002.safetensors", {ts.begin(), ts.begin() + 4});
  write_safetensors(dir + "/model-00002-of-00002.safetensors", {ts.begin() + 4, ts.end()});
  std::string index = R"({"metadata":{},"weight_map":{)";
  for (size_t i = 0; i < ts.size(); ++i)
    index += (i ? "," : "") + std::string("\"") + ts[i].name + "\":\"model-0000" + (i < 4 ? "1" : "2") +
             "-of-00002.safetensors\"";
  index += "}}";
  write_file_atomic(dir + "/model.safetensors.index.json", index);
  auto ckpt = Checkpoint::open(dir);
  REQUIRE(ckpt.tensors().size() == ts.size());
  CHECK(root_hash(ckpt.tensors()) == root_hash(ts));
  REQUIRE(ckpt.find("f") != nullptr);
  CHECK(values_of<float>(*ckpt.find("f")) == std::vector<float>{-3, -2, -1, 0, 1, 2});
  CHECK(ckpt.find("zz") == nullptr);

  auto single = Checkpoint::open(sample("overall"));
  CHECK(single.tensors().size() == 9);
  CHECK(std::is_sorted(single.tensors().begin(), single.tensors().end(),
                       [](const auto& a, const auto& b) { return a.name < b.name; }));
  CHECK_THROWS_WITH(Checkpoint::open(temp_dir()), Catch::Contains("neither model.safetensors"));
}

TEST_CASE("hashes: xxh3 per tensor, root over sorted names", "[sync][hash]") {
  auto f = SafetensorsFile::open(sample("overall"));
  std::vector<TensorView> ts = f.tensors();
  const uint64_t root = root_hash(ts);
  std::reverse(ts.begin(), ts.end());
  CHECK(root_hash(ts) == root);  // order-independent
  ts[0].name = "renamed";
  CHECK(root_hash(ts) != root);
  CHECK(hash_hex(0x0123456789abcdefull) == "0123456789abcdef");
  TensorView empty{"e", DType::BF16, {0}, nullptr, 0};
  CHECK(tensor_hash(empty) == tensor_hash(TensorView{"x", DType::U8, {0}, nullptr, 0}));
  CHECK(tensor_hash(f.tensors()[0]) != tensor_hash(f.tensors()[1]));
}
