// --resume guards: one process per run directory, no --set that changes the algorithm mid-run, and none
// that a resumed run would ignore.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>

#include "app/config.h"
#include "app/job.h"
#include "sync/atomic_file.h"
#include "tests/app/run_test_util.h"

namespace {

/// A run directory holding only the config a run of `overrides` would have written.
std::string fake_run(const std::string& name, const std::vector<std::string>& overrides) {
  const std::string dir = pulse::test_run::temp_dir(name);
  pulse::app::Config c = pulse::app::parse_config("", "x.toml", overrides);
  pulse::sync::write_file_atomic(dir + "/config.toml", pulse::app::to_toml(c));
  return dir;
}

std::string resume_error(const std::string& dir, const std::vector<std::string>& overrides) {
  pulse::app::JobOptions o;
  o.resume_dir = dir;
  o.overrides = overrides;
  o.quiet = true;
  try {
    pulse::app::run_job(o);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a run directory another process holds is refused", "[app][resume]") {
  const std::string dir = fake_run("guard-lock", {});
  const int fd = ::open((dir + "/.lock").c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  const std::string err = resume_error(dir, {});
  CHECK_THAT(err, Catch::Contains("in use by another pulse process"));
  ::close(fd);
  std::filesystem::remove_all(dir);
}

TEST_CASE("resume refuses --set of keys the run's state depends on", "[app][resume]") {
  const std::string dir = fake_run(
      "guard-set", {"multi.mode=pulseloco", "multi.inner_steps=2", "rl.steps=4", "run.checkpoint_every=2"});
  const std::string before = pulse::sync::read_file(dir + "/config.toml");
  CHECK_THAT(resume_error(dir, {"multi.mode=diloco"}),
             Catch::Contains("multi.mode cannot change on --resume"));
  CHECK_THAT(resume_error(dir, {"rl.kl_coef=0.1"}), Catch::Contains("rl.kl_coef"));
  // Keys a resumed run would never read again are refused, not ignored; the same value is no change.
  CHECK_THAT(resume_error(dir, {"run.dir=/tmp/elsewhere"}),
             Catch::Contains("--set run.dir has no effect on --resume"));
  CHECK_THAT(resume_error(dir, {"sft.steps=300"}), Catch::Contains("--set sft.* has no effect on --resume"));
  CHECK_THAT(resume_error(dir, {"model.path=/tmp/other-model"}),
             Catch::Contains("--set model.path has no effect"));
  const std::string err = resume_error(dir, {"run.name=default", "tokenizer.vocab_size=999"});
  CHECK_THAT(err, Catch::Contains("--set tokenizer.* has no effect on --resume"));
  CHECK_THAT(err, !Catch::Contains("run.name"));
  // A refused --set leaves config.toml as it was.
  CHECK(pulse::sync::read_file(dir + "/config.toml") == before);
  std::filesystem::remove_all(dir);
}
