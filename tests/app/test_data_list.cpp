// `pulse data list --dir` / `pulse data fetch --dir` when something other than a file sits where an
// installed dataset file belongs (a folder): listed as such with what to do, and a fetch installs nothing.
#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

#include "tests/app/cli_test_util.h"
#include "tests/app/run_test_util.h"
#include "tests/test_paths.h"

using pulse::test::shared_path;
using pulse::test_cli::pulse_cli;

TEST_CASE("pulse data list names a folder in place of a dataset file and says to remove it", "[app][data]") {
  namespace fs = std::filesystem;
  pulse::test_run::ScopedTempDir tmp("data-list-folder");
  const std::string dir = tmp.path + "/data";
  auto f = pulse_cli({"data", "fetch", "gsm8k", "--from", shared_path("datasets"), "--dir", dir});
  INFO(f.out << f.err);
  REQUIRE(f.code == 0);
  const std::string train = dir + "/gsm8k_train.jsonl", test = dir + "/gsm8k_test.jsonl";
  auto list = pulse_cli({"data", "list", "--dir", dir});
  CHECK(list.code == 0);
  CHECK(list.out.find(train + " 4166206 bytes sha256 "
                              "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465 (present, "
                              "verified)") != std::string::npos);

  fs::remove(train);
  fs::create_directory(train);
  fs::resize_file(test, 1000);  // the other file of the dataset is damaged too
  list = pulse_cli({"data", "list", "--dir", dir});
  INFO(list.out);
  CHECK(list.code == 1);  // damaged files fail the listing
  CHECK_THAT(list.err, Catch::Contains("2 installed file(s) damaged"));
  // It said 'DAMAGED: unreadable; `pulse data fetch gsm8k` replaces it', which the fetch cannot do.
  CHECK(list.out.find(train + " 4166206 bytes sha256 "
                              "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465 (present but "
                              "DAMAGED: not a regular file; remove it, then run `pulse data fetch gsm8k`)") !=
        std::string::npos);
  CHECK(list.out.find(test + " 749738 bytes sha256 "
                             "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14 (present but "
                             "DAMAGED: 1000 bytes sha256 ") != std::string::npos);

  // The fetch fails naming the folder, and installs neither file (the damaged one stays as it was).
  f = pulse_cli({"data", "fetch", "gsm8k", "--from", shared_path("datasets"), "--dir", dir});
  CHECK(f.code == 1);
  CHECK(f.err.find("'" + train + "': Is a directory") != std::string::npos);
  CHECK(fs::is_directory(train));
  CHECK(fs::file_size(test) == 1000);

  fs::remove(train);  // as the listing says: remove it, then fetch
  f = pulse_cli({"data", "fetch", "gsm8k", "--from", shared_path("datasets"), "--dir", dir});
  CHECK(f.code == 0);
  list = pulse_cli({"data", "list", "--dir", dir});
  CHECK(list.out.find(train + " 4166206 bytes sha256 "
                              "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465 (present, "
                              "verified)") != std::string::npos);
  CHECK(list.out.find(test + " 749738 bytes sha256 "
                             "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14 (present, "
                             "verified)") != std::string::npos);
  CHECK(list.out.find("DAMAGED") == std::string::npos);
}
