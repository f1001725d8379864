// `pulse data fetch` below the CLI: SHA-256 pins against the ../shared copies, the Python-compatible JSON
// writer, the MATH release conversion (round trip from real rows through a real tar), install from local
// copies, corrupted copies refused with nothing installed, and a failed download that fails at once.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datasets/catalog.h"
#include "datasets/fetch.h"
#include "datasets/loaders.h"
#include "datasets/math_convert.h"
#include "datasets/mbpp_split.h"
#include "datasets/py_json.h"
#include "datasets/sha256.h"
#include "datasets/tar_reader.h"
#include "tests/datasets/fetch_test_util.h"
#include "tests/test_paths.h"

using namespace pulse::datasets;
using pulse::test::shared_path;
using pulse::test::slurp;
using pulse::test::spit;
using pulse::test::TempFolder;
namespace fs = std::filesystem;

namespace {

/// `tar -cf <tar> -C <dir> <member>` with GNU tar (the archive layout MATH.tar has).
void make_tar(const std::string& tar, const std::string& dir, const std::string& member) {
  const std::string cmd = "tar -cf '" + tar + "' -C '" + dir + "' '" + member + "'";
  REQUIRE(std::system(cmd.c_str()) == 0);
}

size_t count_files(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.is_regular_file() ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("sha256 matches the standard vectors and every catalog pin matches its ../shared copy",
          "[datasets][fetch]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  size_t files = 0;
  for (const auto& d : dataset_catalog()) {
    for (const auto& f : d.files) {
      const std::string path = shared_path("datasets/" + f.name);
      INFO(path);
      CHECK(fs::file_size(path) == f.bytes);
      CHECK(sha256_file_hex(path) == f.sha256);
      CHECK(pulse::test::jsonl_lines(path).size() == static_cast<size_t>(f.records));
      ++files;
    }
  }
  CHECK(files == 6);
  CHECK_THROWS_WITH(sha256_file_hex("/nonexistent/x.jsonl"), Catch::Contains("/nonexistent/x.jsonl"));
}

TEST_CASE("py_json writes what Python's json.dumps writes", "[datasets][fetch]") {
  // python3 -c 'import json; print(json.dumps("a\"b\\c\n\r\t\b\f\x01\x7f é∞😀 ~"))'
  CHECK(py_json_string("a\"b\\c\n\r\t\b\f\x01\x7f \xC3\xA9\xE2\x88\x9E\xF0\x9F\x98\x80 ~") ==
        R"("a\"b\\c\n\r\t\b\f\u0001\u007f \u00e9\u221e\ud83d\ude00 ~")");
  // python3 -c 'import json; print(json.dumps({"problem": "x", "level": None, "n": 5}))'
  CHECK(py_json_object({{"problem", PyJsonValue::str("x")},
                        {"level", PyJsonValue::null()},
                        {"n", PyJsonValue::integer(5)}}) == R"({"problem": "x", "level": null, "n": 5})");
  CHECK_THROWS_WITH(py_json_string("ok\xC3"), Catch::Contains("byte offset 2"));
  CHECK_THROWS_WITH(py_json_string("\xED\xA0\x80"), Catch::Contains("invalid UTF-8"));  // a lone surrogate
  CHECK_THROWS(py_json_string("\xC0\xAF"));                                             // overlong '/'
}

TEST_CASE("math_answer_from_solution reproduces the answer of every real MATH record", "[datasets][fetch]") {
  CHECK(math_answer_from_solution("so \\boxed{\\frac{1}{2}}.") == std::optional<std::string>("\\frac{1}{2}"));
  CHECK(math_answer_from_solution("\\boxed{1} then \\boxed{2}") == std::optional<std::string>("2"));
  CHECK(math_answer_from_solution("\\fbox{7}") == std::optional<std::string>("7"));
  CHECK_FALSE(math_answer_from_solution("the answer is \\boxed 2.").has_value());
  CHECK_FALSE(math_answer_from_solution("\\boxed{3").has_value());
  CHECK_FALSE(math_answer_from_solution("no box").has_value());
  size_t records = 0, nulls = 0;
  for (const char* file : {"datasets/math_train.jsonl", "datasets/math_test.jsonl"}) {
    for (const auto& line : pulse::test::jsonl_lines(shared_path(file))) {
      const auto rec = nlohmann::json::parse(line);
      const auto got = math_answer_from_solution(rec["solution"].get<std::string>());
      INFO(rec["unique_id"].get<std::string>());
      if (rec["answer"].is_null()) {
        CHECK_FALSE(got.has_value());
        ++nulls;
      } else {
        REQUIRE(got.has_value());
        CHECK(*got == rec["answer"].get<std::string>());
      }
      ++records;
    }
  }
  CHECK(records == 12500);
  CHECK(nulls == 2);  // train/algebra/24014.json and 25040.json (SOURCES.md)
}

TEST_CASE("MATH conversion round trip: real rows -> release files -> tar -> the same JSONL bytes",
          "[datasets][fetch]") {
  TempFolder tmp("mathrt");
  // A small release: the first 40 test rows and 40 train rows (several subjects, a null level among the
  // train rows is not in the first 40, so add the two null-level geometry rows by id).
  std::vector<std::string> test_rows = pulse::test::jsonl_lines(shared_path("datasets/math_test.jsonl"), 40);
  std::vector<std::string> train_rows;
  for (const auto& line : pulse::test::jsonl_lines(shared_path("datasets/math_train.jsonl"))) {
    const auto rec = nlohmann::json::parse(line);
    const std::string id = rec["unique_id"];
    if (train_rows.size() < 40 || rec["level"].is_null() || rec["answer"].is_null())
      train_rows.push_back(line);
  }
  REQUIRE(train_rows.size() == 44);
  for (const auto& r : test_rows) pulse::test::write_release_file(tmp.path(), r);
  for (const auto& r : train_rows) pulse::test::write_release_file(tmp.path(), r);
  spit(tmp / "MATH/README.txt", "not a problem file\n");
  make_tar(tmp / "MATH.tar", tmp.path(), "MATH");

  const std::vector<TarEntry> entries = read_tar(slurp(tmp / "MATH.tar"), "MATH.tar");
  CHECK(entries.size() == test_rows.size() + train_rows.size() + 1);
  auto splits = math_release_to_jsonl(entries, "MATH.tar");
  REQUIRE(splits.size() == 2);
  // Expected: the same rows in the documented order (subject directory, then n).
  auto sorted = [](std::vector<std::string> rows) {
    auto key = [](const std::string& row) {
      const std::string id = nlohmann::json::parse(row)["unique_id"];  // split/subject/n.json
      const size_t a = id.find('/'), b = id.rfind('/');
      return std::make_pair(id.substr(a + 1, b - a - 1), std::stoll(id.substr(b + 1)));
    };
    std::sort(rows.begin(), rows.end(), [&](const auto& x, const auto& y) { return key(x) < key(y); });
    std::string text;
    for (const auto& r : rows) text += r + "\n";
    return text;
  };
  CHECK(splits["test"] == sorted(test_rows));
  CHECK(splits["train"] == sorted(train_rows));
  // The unpacked folder converts to the same bytes.
  auto from_folder = math_release_to_jsonl(read_folder_files(tmp / "MATH"), "MATH/");
  CHECK(from_folder == splits);
}

TEST_CASE("MATH conversion of the whole release reproduces the pinned math_train/math_test hashes",
          "[datasets][fetch]") {
  TempFolder src("mathfull"), dst("mathfull_dst");
  for (const char* f : {"datasets/math_train.jsonl", "datasets/math_test.jsonl"})
    for (const auto& row : pulse::test::jsonl_lines(shared_path(f)))
      pulse::test::write_release_file(src.path(), row);
  make_tar(src / "MATH.tar", src.path(), "MATH");
  fs::remove_all(src / "MATH");  // --from finds MATH.tar only
  FetchOptions opt;
  opt.from = src.path();
  opt.dir = dst.path();
  auto got = fetch_dataset("math", opt);
  REQUIRE(got.size() == 2);
  CHECK(got[0].path == dst / "math_train.jsonl");
  CHECK(got[1].path == dst / "math_test.jsonl");
  CHECK_FALSE(got[0].already_installed);
  CHECK(slurp(dst / "math_train.jsonl") == slurp(shared_path("datasets/math_train.jsonl")));
  CHECK(slurp(dst / "math_test.jsonl") == slurp(shared_path("datasets/math_test.jsonl")));
}

TEST_CASE("fetch --from the ../shared copies installs all four datasets, verified, then keeps them",
          "[datasets][fetch]") {
  TempFolder dst("all");
  FetchOptions opt;
  opt.from = shared_path("datasets");
  opt.dir = dst / "data";  // created by fetch
  for (const auto& d : dataset_catalog()) {
    auto got = fetch_dataset(d.name, opt);
    REQUIRE(got.size() == d.files.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CHECK_FALSE(got[i].already_installed);
      CHECK(got[i].source == shared_path("datasets/" + d.files[i].name));
      CHECK(sha256_file_hex(got[i].path) == d.files[i].sha256);
    }
  }
  CHECK(count_files(dst / "data") == 6);  // no temp files left behind
  // A second fetch finds them installed (no source needed: --from a folder that does not exist).
  opt.from = dst / "nowhere";
  for (const auto& d : dataset_catalog())
    for (const auto& f : fetch_dataset(d.name, opt)) CHECK(f.already_installed);
}

TEST_CASE("corrupted copies are refused and nothing is installed", "[datasets][fetch]") {
  TempFolder src("bad"), dst("bad_dst");
  // gsm8k: train intact, one byte of test flipped -> neither is installed.
  fs::copy_file(shared_path("datasets/gsm8k_train.jsonl"), src / "gsm8k_train.jsonl");
  std::string test = slurp(shared_path("datasets/gsm8k_test.jsonl"));
  test[1000] ^= 0x01;
  spit(src / "gsm8k_test.jsonl", test);
  // mbpp: truncated by one byte (the final newline); math500: one record changed.
  std::string mbpp = slurp(shared_path("datasets/mbpp.jsonl"));
  spit(src / "mbpp.jsonl", mbpp.substr(0, mbpp.size() - 1));
  std::string m500 = slurp(shared_path("datasets/math500_test.jsonl"));
  m500.replace(m500.find("\"answer\": \""), 11, "\"answer\": \"9");
  spit(src / "math500_test.jsonl", m500);
  FetchOptions opt;
  opt.from = src.path();
  opt.dir = dst.path();
  CHECK_THROWS_WITH(fetch_dataset("gsm8k", opt),
                    Catch::Contains("gsm8k_test.jsonl has sha256") && Catch::Contains("nothing installed") &&
                        Catch::Contains("3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"));
  CHECK_THROWS_WITH(fetch_dataset("mbpp", opt), Catch::Contains("(563742 bytes), expected"));
  CHECK_THROWS_WITH(fetch_dataset("math500", opt), Catch::Contains("math500_test.jsonl has sha256"));
  CHECK(count_files(dst.path()) == 0);

  // MATH: one problem file's solution edited inside the release -> converted hash differs -> refused.
  TempFolder rel("bad_math");
  for (const char* f : {"datasets/math_train.jsonl", "datasets/math_test.jsonl"})
    for (const auto& row : pulse::test::jsonl_lines(shared_path(f)))
      pulse::test::write_release_file(rel.path(), row);
  const std::string victim = rel / "MATH/test/algebra/1.json";
  auto j = nlohmann::json::parse(slurp(victim));
  j["solution"] = j["solution"].get<std::string>() + " ";
  spit(victim, j.dump());
  opt.from = rel.path();  // the unpacked MATH/ folder
  CHECK_THROWS_WITH(fetch_dataset("math", opt),
                    Catch::Contains("math_test.jsonl has sha256") && Catch::Contains("nothing installed"));
  CHECK(count_files(dst.path()) == 0);  // math_train.jsonl verified fine, but was not installed either

  // MATH.tar with one byte of a member's data changed (headers intact): converted, refused.
  TempFolder tar_dir("bad_tar");
  make_tar(tar_dir / "MATH.tar", rel.path(), "MATH");
  std::string tar = slurp(tar_dir / "MATH.tar");
  const size_t at = tar.find("\"solution\"", tar.size() / 2);
  REQUIRE(at != std::string::npos);
  tar[at + 20] = tar[at + 20] == 'x' ? 'y' : 'x';
  spit(tar_dir / "MATH.tar", tar);
  opt.from = tar_dir.path();
  CHECK_THROWS_WITH(fetch_dataset("math", opt),
                    Catch::Contains("MATH.tar (converted, ") && Catch::Contains("nothing installed"));
  CHECK(count_files(dst.path()) == 0);
  // A damaged tar header is named by its offset.
  tar[0] ^= 0x01;  // the first header's name: its checksum no longer matches
  CHECK_THROWS_WITH(read_tar(tar, "MATH.tar"),
                    Catch::Contains("MATH.tar: tar header at byte offset 0: checksum"));

  // --from a folder without the files names what it looked for.
  TempFolder empty("empty");
  opt.from = empty.path();
  CHECK_THROWS_WITH(fetch_dataset("math", opt),
                    Catch::Contains("math_train.jsonl + math_test.jsonl, MATH.tar "
                                    "or a MATH/ folder"));
  CHECK(count_files(dst.path()) == 0);
}

TEST_CASE("a download that cannot connect fails at once, naming the URL and --from", "[datasets][fetch]") {
  TempFolder dst("net");
  FetchOptions opt;
  opt.dir = dst.path();
  opt.mirror = "http://127.0.0.1:1";  // nothing listens on port 1: refused at once, like a machine offline
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(
      fetch_dataset("gsm8k", opt),
      Catch::Contains("cannot download http://127.0.0.1:1/gsm8k_train.jsonl: could not connect") &&
          Catch::Contains("pulse data fetch gsm8k --from DIR") &&
          Catch::Contains("gsm8k_train.jsonl, gsm8k_test.jsonl"));
  CHECK_THROWS_WITH(
      fetch_dataset("math", opt),
      Catch::Contains("cannot download http://127.0.0.1:1/MATH.tar: could not connect") &&
          Catch::Contains("`pulse data fetch math --from DIR` (DIR holding MATH.tar, the unpacked "
                          "MATH/ folder, or math_train.jsonl + math_test.jsonl)"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(count_files(dst.path()) == 0);
  // The catalog's own URL in the message: the same path with a spec whose URL is unreachable.
  DatasetSpec spec = find_dataset("math500");
  spec.downloads[0].url = "https://127.0.0.1:1/prm800k/math_splits/test.jsonl";
  opt.mirror.clear();
  CHECK_THROWS_WITH(fetch_dataset(spec, opt),
                    Catch::Contains("math500: cannot download "
                                    "https://127.0.0.1:1/prm800k/math_splits/test.jsonl") &&
                        Catch::Contains("--from DIR` (DIR holding math500_test.jsonl)"));
}

TEST_CASE("the catalog names upstream sources and a missing data file's hint names the fetch to run",
          "[datasets][fetch]") {
  CHECK(find_dataset("math500").downloads[0].url.find("openai/prm800k") != std::string::npos);
  CHECK(find_dataset("math").downloads[0].url == "https://people.eecs.berkeley.edu/~hendrycks/MATH.tar");
  CHECK(find_dataset("mbpp").downloads[0].url.find("google-research/google-research/") != std::string::npos);
  CHECK(find_dataset("gsm8k").downloads.size() == 2);
  CHECK_THROWS_WITH(find_dataset("humaneval"),
                    "unknown dataset 'humaneval' (known: math500, math, mbpp, gsm8k)");
  CHECK(fetch_hint("datasets/data/math500_test.jsonl") == " (run `pulse data fetch math500` to download it)");
  CHECK(fetch_hint("./datasets/data/mbpp.jsonl") == " (run `pulse data fetch mbpp` to download it)");
  CHECK(fetch_hint("/data/x/gsm8k_test.jsonl") ==
        " (run `pulse data fetch gsm8k --dir /data/x` to download it)");
  CHECK(fetch_hint("datasets/data/mine.jsonl").empty());
}

TEST_CASE("mbpp_split selects the standard MBPP splits of the real file by task_id", "[datasets][fetch]") {
  const auto all = load_mbpp_jsonl(shared_path("datasets/mbpp.jsonl"));
  REQUIRE(all.size() == 974);
  const auto test = mbpp_split(all, "test");
  REQUIRE(test.size() == 500);
  CHECK(test.front().id == "mbpp/11");
  CHECK(test.back().id == "mbpp/510");
  CHECK(mbpp_split(all, "prompt").size() == 10);
  CHECK(mbpp_split(all, "validation").size() == 90);
  CHECK(mbpp_split(all, "train").size() == 374);
  CHECK(mbpp_split(all, "all").size() == 974);
  // The prompt carries the task's three asserts (the MBPP paper's format).
  CHECK(test.front().question.find(" Your code should pass these tests:\n\nassert ") != std::string::npos);
  CHECK(test.front().tests.size() == 3);
  CHECK_THROWS_WITH(mbpp_split(all, "dev"), Catch::Contains("'dev' is not one of"));
  std::vector<Problem> odd(1);
  odd[0].id = "synthetic/code/1";
  CHECK_THROWS_WITH(mbpp_split(odd, "test"), Catch::Contains("'synthetic/code/1' is not mbpp/<task_id>"));
}
