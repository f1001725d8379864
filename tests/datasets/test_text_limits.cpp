// Length limits on problems and reference responses (datasets::TextLimits, the settings
// data.max_question_chars and data.max_answer_chars): a record over a limit is refused at load naming the
// file, the line and the field. One 10 MB problem in data.eval_path used to reach 11.2 GB of RSS and fail
// with "can't allocate memory ... 5352914432 bytes", naming no file.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "datasets/loaders.h"
#include "tests/temp_dir.h"
#include "tests/test_paths.h"

using namespace pulse::datasets;
using nlohmann::json;

namespace {

/// A folder removed when the test process exits.
std::string limits_dir() {
  static const std::string dir = [] {
    const auto p =
        std::filesystem::temp_directory_path() / ("pulse_test_limits_" + std::to_string(::getpid()));
    std::filesystem::create_directories(p);
    pulse::test::remove_at_exit(p);
    return p.string();
  }();
  return dir;
}

/// `lines` JSON records, one per line, in a file named `name`.
std::string jsonl(const std::string& name, const std::vector<json>& lines) {
  const std::string path = limits_dir() + "/" + name;
  std::ofstream out(path);
  for (const auto& l : lines) out << l.dump() << "\n";
  return path;
}

std::string load_error(const std::function<void()>& load) {
  try {
    load();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a 10 MB problem is refused at load naming file, line and field", "[datasets][limits]") {
  const json ok = {{"problem", "What is 1+1?"}, {"solution", "\\boxed{2}"}};
  const std::string huge(10 * 1000 * 1000, 'x');
  const std::string path =
      jsonl("math_huge.jsonl", {ok, ok, {{"problem", huge}, {"solution", "\\boxed{2}"}}});
  // With a LoadReport (how `pulse run` loads MATH) too: a refusal, not a skipped data error.
  LoadReport report;
  const std::string what = load_error([&] { load_math_jsonl(path, &report); });
  CHECK(what ==
        path + ":3: field \"problem\" has 10000000 characters, more than data.max_question_chars = 16384");
}

TEST_CASE("a line longer than any record within the limits is refused before it is read whole",
          "[datasets][limits]") {
  // 65 MiB without a newline (not even JSON): stored only up to the cap, then refused by its size.
  const std::string path = limits_dir() + "/huge_line.jsonl";
  {
    std::ofstream out(path, std::ios::binary);
    out << "{\"problem\": \"What is 1+1?\", \"solution\": \"\\\\boxed{2}\"}\n";
    const std::string chunk(1 << 20, 'x');
    for (int i = 0; i < 65; ++i) out << chunk;
  }
  LoadReport report;
  CHECK(load_error([&] { load_math_jsonl(path, &report); }) ==
        path + ":2: record longer than 67108864 bytes, more than data.max_question_chars and "
               "data.max_answer_chars allow");
  std::filesystem::remove(path);
}

TEST_CASE("each text field of MATH, GSM8K and MBPP has its limit, in characters", "[datasets][limits]") {
  TextLimits limits;
  limits.max_question_chars = 20;
  limits.max_answer_chars = 30;
  const std::string q21(21, 'q'), a31(31, 'a');
  // MATH: problem, solution, answer.
  const json math_ok = {{"problem", "What is 1+1?"}, {"solution", "\\boxed{2}"}};
  json long_solution = math_ok;
  long_solution["solution"] = a31 + "\\boxed{2}";
  json long_answer = math_ok;
  long_answer["answer"] = a31;
  const std::string math = jsonl("math.jsonl", {math_ok, long_solution});
  CHECK_THAT(load_error([&] { load_math_jsonl(math, nullptr, limits); }),
             Catch::StartsWith(math + ":2: field \"solution\" has 40 characters, more than "
                                      "data.max_answer_chars = 30"));
  const std::string math2 = jsonl("math2.jsonl", {long_answer});
  CHECK_THAT(load_error([&] { load_math_jsonl(math2, nullptr, limits); }),
             Catch::StartsWith(math2 + ":1: field \"answer\""));
  // Characters, not bytes: 20 two-byte characters fit a 20-character limit.
  std::string accents;
  for (int i = 0; i < 20; ++i) accents += "\xC3\xA9";
  const std::string math3 = jsonl("math3.jsonl", {{{"problem", accents}, {"solution", "\\boxed{2}"}}});
  CHECK(load_math_jsonl(math3, nullptr, limits).size() == 1);
  const std::string math4 = jsonl("math4.jsonl", {{{"problem", accents + "e"}, {"solution", "\\boxed{2}"}}});
  CHECK_THAT(load_error([&] { load_math_jsonl(math4, nullptr, limits); }),
             Catch::Contains("field \"problem\" has 21 characters"));

  // GSM8K: question, answer.
  const std::string gsm = jsonl("gsm.jsonl", {{{"question", q21}, {"answer", "#### 2"}}});
  CHECK_THAT(load_error([&] { load_gsm8k_jsonl(gsm, nullptr, limits); }),
             Catch::StartsWith(gsm + ":1: field \"question\" has 21 characters, more than "
                                     "data.max_question_chars = 20"));
  const std::string gsm2 = jsonl("gsm2.jsonl", {{{"question", "q"}, {"answer", a31 + "#### 2"}}});
  CHECK_THAT(load_error([&] { load_gsm8k_jsonl(gsm2, nullptr, limits); }),
             Catch::StartsWith(gsm2 + ":1: field \"answer\""));

  // MBPP: text, code, test_list.
  const json mbpp_ok = {{"task_id", 11},
                        {"text", "Add one."},
                        {"code", "def f(x): return x+1"},
                        {"test_list", {"assert f(1)==2"}}};
  json long_text = mbpp_ok, long_code = mbpp_ok, long_tests = mbpp_ok;
  long_text["text"] = q21;
  long_code["code"] = a31;
  long_tests["test_list"] = {"assert f(1)==2", "assert f(2)==3", "assert f(3)==4"};
  const std::string mbpp = jsonl("mbpp.jsonl", {mbpp_ok, long_text});
  CHECK_THAT(load_error([&] { load_mbpp_jsonl(mbpp, limits); }),
             Catch::StartsWith(mbpp + ":2: field \"text\""));
  const std::string mbpp2 = jsonl("mbpp2.jsonl", {long_code});
  CHECK_THAT(load_error([&] { load_mbpp_jsonl(mbpp2, limits); }),
             Catch::StartsWith(mbpp2 + ":1: field \"code\""));
  const std::string mbpp3 = jsonl("mbpp3.jsonl", {long_tests});
  CHECK_THAT(load_error([&] { load_mbpp_jsonl(mbpp3, limits); }),
             Catch::StartsWith(mbpp3 + ":1: field \"test_list\" has 42 characters"));
  CHECK(load_mbpp_jsonl(jsonl("mbpp4.jsonl", {mbpp_ok}), limits).size() == 1);
}

TEST_CASE("the default limits pass every record of the real datasets", "[datasets][limits]") {
  LoadReport report;  // MATH train has 2 data errors (datasets/loaders.h)
  CHECK(load_math_jsonl(pulse::test::shared_path("datasets/math_train.jsonl"), &report).size() > 7000);
  CHECK(load_gsm8k_jsonl(pulse::test::shared_path("datasets/gsm8k_train.jsonl")).size() > 7000);
  CHECK(load_mbpp_jsonl(pulse::test::shared_path("datasets/mbpp.jsonl")).size() == 974);
}
