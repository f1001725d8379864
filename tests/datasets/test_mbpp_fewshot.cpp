// The few-shot MBPP prompt (datasets/mbpp_fewshot.h) on the real MBPP file, and the [DONE] cut of
// rl::extract_code that reads its responses.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "datasets/loaders.h"
#include "datasets/mbpp_fewshot.h"
#include "datasets/mbpp_split.h"
#include "tests/test_paths.h"

using namespace pulse::datasets;

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t pos = 0; (pos = text.find(what, pos)) != std::string::npos; pos += what.size()) ++n;
  return n;
}

}  // namespace

TEST_CASE("MBPP few-shot prompt: exemplars 2, 3, 4 in the [BEGIN]/[DONE] format", "[datasets][mbpp]") {
  const std::string path = pulse::test::shared_path("datasets/mbpp.jsonl");
  const std::vector<Problem> file = load_mbpp_jsonl(path);
  std::vector<Problem> test = mbpp_split(file, "test");
  REQUIRE(test.size() == 500);
  const std::string bare = test.front().question;
  REQUIRE(test.front().id == "mbpp/11");
  apply_mbpp_fewshot(test, file, 3, path);
  const std::string& q = test.front().question;
  const std::string header = "You are an expert Python programmer, and here is your task: ";
  // Task 2 first (its text opens the prompt), then 3 and 4, then task 11 itself, open at [BEGIN].
  CHECK(q.rfind(header + "Write a function to find the similar elements from the given two tuple lists.",
                0) == 0);
  CHECK(count(q, header) == 4);
  CHECK(count(q, "[BEGIN]\n") == 4);
  CHECK(count(q, "[DONE]\n") == 3);
  CHECK(q.size() > bare.size());
  CHECK(q.compare(q.size() - bare.size() - 8, bare.size() + 8, bare + "[BEGIN]\n") == 0);
  for (int id : {2, 3, 4}) {
    const Problem* shot = nullptr;
    for (const auto& p : file)
      if (p.id == "mbpp/" + std::to_string(id)) shot = &p;
    REQUIRE(shot != nullptr);
    CHECK(q.find(shot->question + "[BEGIN]\n") != std::string::npos);  // its text and asserts
    CHECK(q.find("\r") == std::string::npos);
  }
  for (const auto& p : test) CHECK(p.question.substr(p.question.size() - 8) == "[BEGIN]\n");

  std::vector<Problem> one = mbpp_split(file, "test");
  apply_mbpp_fewshot(one, file, 1, path);
  CHECK(count(one.front().question, "[DONE]\n") == 1);
  std::vector<Problem> none = mbpp_split(file, "test");
  CHECK(apply_mbpp_fewshot(none, file, 0, path) == 0);
  CHECK(none.front().question == bare);
  // The prompt split holds the exemplars: they are left out (their answers are in the prompt).
  std::vector<Problem> prompt_split = mbpp_split(file, "prompt");
  REQUIRE(prompt_split.size() == 10);
  CHECK(apply_mbpp_fewshot(prompt_split, file, 3, path) == 3);
  REQUIRE(prompt_split.size() == 7);
  for (const auto& p : prompt_split) CHECK((p.id != "mbpp/2" && p.id != "mbpp/3" && p.id != "mbpp/4"));
}

TEST_CASE("MBPP few-shot prompt: a file without the exemplars is refused by name", "[datasets][mbpp]") {
  const std::string path = pulse::test::shared_path("datasets/mbpp.jsonl");
  const std::vector<Problem> file = load_mbpp_jsonl(path);
  std::vector<Problem> test = mbpp_split(file, "test");
  std::vector<Problem> no_prompt_split = test;  // task_ids 11-510 only
  CHECK_THROWS_WITH(apply_mbpp_fewshot(test, no_prompt_split, 3, "x.jsonl"),
                    Catch::Contains("x.jsonl") && Catch::Contains("task_id 2"));
  CHECK_THROWS_WITH(apply_mbpp_fewshot(test, file, 4, path), Catch::Contains("0..3"));
}
