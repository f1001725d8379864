// The dataset catalog (datasets/catalog.h). URLs, sizes and SHA-256 from ../shared/datasets/SOURCES.md.
#include "datasets/catalog.h"

#include <stdexcept>

namespace pulse::datasets {
namespace {

std::vector<DatasetSpec> build_catalog() {
  std::vector<DatasetSpec> c;
  c.push_back(
      {"math500",
       "MATH-500 test problems (prm800k math_splits/test.jsonl, 500 records)",
       UpstreamFormat::Jsonl,
       {{"https://media.githubusercontent.com/media/openai/prm800k/00811d6de065642a6967b9017d4cee59550c0ef4/"
         "prm800k/math_splits/test.jsonl",
         "math500_test.jsonl"}},
       {{"math500_test.jsonl", 446564, "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
         500}},
       "MIT (openai/prm800k; problems from MATH, MIT)",
       "the Git LFS oid (sha256) and size of prm800k math_splits/test.jsonl at commit 00811d6d: the upstream "
       "file's own hash"});
  c.push_back(
      {"math",
       "MATH (Hendrycks et al. 2021) train 7500 / test 5000, converted from the release's per-problem files",
       UpstreamFormat::MathTar,
       {{"https://people.eecs.berkeley.edu/~hendrycks/MATH.tar", "MATH.tar"}},
       {{"math_train.jsonl", 6967673, "d7e240fd221036ddd0d50cc0722c6262f93dbc453f3837bce7cbb59cd6b44205",
         7500},
        {"math_test.jsonl", 4376895, "60a9e8e792878bb6eaea958899cc38e628c59efa3f35b45d4c6695a2fc708382",
         5000}},
       "MIT (hendrycks/math)",
       "hashes of the converted JSONL (datasets/math_convert.h), equal to the derived files "
       "../shared/datasets/math_{train,test}.jsonl of SOURCES.md, which were converted from the release as "
       "vendored in aiwaves-cn/agents@e8c4e3c2; MATH.tar itself has no published hash"});
  c.push_back(
      {"mbpp",
       "MBPP (Austin et al. 2021), all 974 tasks (test split: task_id 11-510)",
       UpstreamFormat::Jsonl,
       {{"https://raw.githubusercontent.com/google-research/google-research/"
         "30adf0ec5f35f9609c2f1d896005e184195d9146/mbpp/mbpp.jsonl",
         "mbpp.jsonl"}},
       {{"mbpp.jsonl", 563743, "ccf64ceae9c5403bf50a044cb6d505bfd2a2963ee58338ba268fd65beab92a9f", 974}},
       "CC-BY-4.0",
       "hash of ../shared/datasets/mbpp.jsonl, the copy SOURCES.md reconstructed from muitiiifruckt/ASE and "
       "checked (length and three windows, not every byte) against google-research@30adf0ec; upstream "
       "publishes no hash"});
  c.push_back({"gsm8k",
               "GSM8K (Cobbe et al. 2021) train 7473 / test 1319",
               UpstreamFormat::Jsonl,
               {{"https://raw.githubusercontent.com/openai/grade-school-math/"
                 "3101c7d5072418e28b9008a6636bde82a006892c/"
                 "grade_school_math/data/train.jsonl",
                 "gsm8k_train.jsonl"},
                {"https://raw.githubusercontent.com/openai/grade-school-math/"
                 "3101c7d5072418e28b9008a6636bde82a006892c/"
                 "grade_school_math/data/test.jsonl",
                 "gsm8k_test.jsonl"}},
               {{"gsm8k_train.jsonl", 4166206,
                 "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465", 7473},
                {"gsm8k_test.jsonl", 749738,
                 "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14", 1319}},
               "MIT (openai/grade-school-math)",
               "hashes of the byte-exact copies in ../shared/datasets (git blobs e4c2ff49 / 7d97154b of "
               "openai/grade-school-math@3101c7d5)"});
  return c;
}

}  // namespace

const std::vector<DatasetSpec>& dataset_catalog() {
  static const std::vector<DatasetSpec> catalog = build_catalog();
  return catalog;
}

const DatasetSpec& find_dataset(const std::string& name) {
  std::string known;
  for (const auto& d : dataset_catalog()) {
    if (d.name == name) return d;
    known += (known.empty() ? "" : ", ") + d.name;
  }
  throw std::invalid_argument("unknown dataset '" + name + "' (known: " + known + ")");
}

std::string fetch_hint(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  while (dir.size() > 2 && dir.compare(0, 2, "./") == 0) dir = dir.substr(2);
  const std::string dir_opt = dir == kDefaultDataDir ? "" : " --dir " + dir;
  for (const auto& d : dataset_catalog())
    for (const auto& f : d.files)
      if (f.name == base) return " (run `pulse data fetch " + d.name + dir_opt + "` to download it)";
  return "";
}

}  // namespace pulse::datasets
