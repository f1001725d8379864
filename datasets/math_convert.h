// The documented conversion of Hendrycks' MATH release (one JSON file per problem,
// `<split>/<subject_dir>/<n>.json` holding {"problem", "level", "type", "solution"}) into the JSONL
// files pulse reads (math_train.jsonl, math_test.jsonl), byte-identical to the derived files described in
// ../shared/datasets/SOURCES.md ("MATH full splits as JSONL").
//
// Each output line is Python's `json.dumps({"problem", "solution", "answer", "subject", "level",
// "unique_id"})` (datasets/py_json.h), lines end with "\n", records sorted by subject directory, then by n:
//   problem, solution  unchanged;
//   answer             math_answer_from_solution(solution), null when there is none;
//   subject            the original `type`;
//   level              N of "Level N" as an integer, null otherwise ("Level ?");
//   unique_id          "<split>/<subject_dir>/<n>.json".
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "datasets/tar_reader.h"

namespace pulse::datasets {

/// The final answer of a MATH solution the way the MATH release (and prm800k) computes it: the last
/// "\boxed" (or, when there is none, the last "\fbox"), read up to the brace that closes its first "{";
/// the answer is what lies inside when that text starts with "\boxed{" or "\fbox{"; otherwise (no box,
/// "\boxed 2" with no braces after it, unclosed) there is none. Hendrycks' last_boxed_only_string +
/// remove_boxed.
std::optional<std::string> math_answer_from_solution(const std::string& solution);

/// Converts the per-problem files among `files` (paths ending in "<split>/<subject_dir>/<n>.json" with
/// split "train" or "test", any leading folders such as "MATH/" allowed; other files such as README.txt
/// are ignored) into {split: JSONL text}. `source` names the archive or folder in errors. Throws
/// std::runtime_error "<source>: <path>: <what>" on bad JSON, a missing or non-string field, a non-numeric
/// file name or a duplicate unique_id, and "<source>: no MATH problem files (...)" when none is found.
std::map<std::string, std::string> math_release_to_jsonl(const std::vector<TarEntry>& files,
                                                         const std::string& source);

/// Every regular file under `dir` with its path relative to `dir` ("MATH/test/algebra/1.json"), for a
/// release that was unpacked instead of kept as MATH.tar. Throws std::runtime_error naming an unreadable
/// file.
std::vector<TarEntry> read_folder_files(const std::string& dir);

}  // namespace pulse::datasets
