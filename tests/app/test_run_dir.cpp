// app/run/run_dir.h on its own: where a rank's run folder is, the lock, what discard() removes, and the
// common resume step of a group whose ranks' latest checkpoints differ.
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>

#include "app/run/checkpoints.h"
#include "app/run/run_dir.h"
#include "sync/io/atomic_file.h"
#include "tests/temp_dir.h"

namespace fs = std::filesystem;
using pulse::app::RunDir;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("run dir: a rank's folder, new or resumed, and the errors naming it", "[app][run dir]") {
  const std::string root = pulse::test::process_temp_dir("pulse_run_dir_", "paths");
  CHECK(RunDir::rank_suffix(0, 1).empty());
  CHECK(RunDir::rank_suffix(1, 2) == "/rank-1");
  CHECK(RunDir::new_path(root + "/run", 1, 2) == root + "/run/rank-1");

  fs::create_directories(root + "/done/checkpoints");
  pulse::sync::write_file_atomic(root + "/done/checkpoints/LATEST", "4\n");
  CHECK(error_of([&] { RunDir::new_path(root + "/done", 0, 1); }) ==
        root + "/done: already holds a run; use --resume " + root + "/done or another run.dir");

  CHECK(error_of([&] { RunDir::resumed_path(root + "/none", 0, 1); }) ==
        root + "/none: no config.toml (is this a run directory?)");
  for (int r = 0; r < 2; ++r) {
    fs::create_directories(root + "/two/rank-" + std::to_string(r));
    pulse::sync::write_file_atomic(root + "/two/rank-" + std::to_string(r) + "/config.toml", "");
  }
  CHECK(RunDir::resumed_path(root + "/two", 1, 2) == root + "/two/rank-1");
  CHECK(error_of([&] { RunDir::resumed_path(root + "/two", 0, 1); }) ==
        root + "/two: this run has 2 trainer ranks; resume it with `pulse launch --nproc 2 --resume " + root +
            "/two` (WORLD_SIZE is 1)");
}

TEST_CASE("run dir: one process holds the lock and discard removes what this process made", "[app][run dir]") {
  const std::string root = pulse::test::process_temp_dir("pulse_run_dir_", "lock");
  {
    RunDir a;
    a.open(root + "/runs/x/rank-0", /*resuming=*/false, /*world_size=*/2);
    CHECK(a.is_new());
    CHECK(fs::is_directory(root + "/runs/x/rank-0/checkpoints"));
    RunDir b;  // a second holder, as another pulse process would be (flock is per open file)
    CHECK(error_of([&] { b.open(root + "/runs/x/rank-0", true, 2); }) ==
          root + "/runs/x/rank-0: in use by another pulse process (" + root +
              "/runs/x/rank-0/.lock is locked)");
    CHECK_FALSE(b.is_new());
    b.discard();  // not new: keeps the folder
    CHECK(fs::exists(root + "/runs/x/rank-0/.lock"));
    fs::create_directories(root + "/runs/x/rank-1");  // another rank's folder keeps the run folder
    a.discard();
    CHECK_FALSE(fs::exists(root + "/runs/x/rank-0"));
    CHECK(fs::exists(root + "/runs/x/rank-1"));
    fs::remove(root + "/runs/x/rank-1");
  }
  {
    RunDir a;
    a.open(root + "/runs/x/rank-0", false, 2);  // runs/ and x/ exist now: only x/ is the run's
    a.discard();
    CHECK_FALSE(fs::exists(root + "/runs/x"));
    CHECK(fs::exists(root + "/runs"));
  }
  {
    RunDir a;
    a.open(root + "/fresh/deep/run", false, 1);  // every folder of the path is new
    a.discard();
    CHECK_FALSE(fs::exists(root + "/fresh"));
    CHECK(fs::exists(root));
  }
}

TEST_CASE("run dir: ranks whose latest checkpoints differ resume from the oldest", "[app][run dir][resume]") {
  const std::string run = pulse::test::process_temp_dir("pulse_run_dir_", "resume");
  CHECK(pulse::app::common_resume_step({6, 6}, 6, run) == 6);
  CHECK(pulse::app::common_resume_step({-1, 4}, 4, run) == -1);  // a rank without one: start over
  CHECK(
      error_of([&] {
        pulse::app::common_resume_step({8, 6}, 8, run);
      }) ==
      run +
          ": the ranks' latest checkpoints differ (rank 0: 8, rank 1: 6) and this rank no longer has step 6; "
          "start a new run");
  fs::create_directories(pulse::app::checkpoint_dir(run, 6) + "/state");
  CHECK(pulse::app::common_resume_step({8, 6}, 8, run) == 6);
}
