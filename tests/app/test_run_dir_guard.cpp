// --resume guards: one process per run directory, no --set that changes the algorithm mid-run, and none
// that a resumed run would ignore.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>

#include "app/config.h"
#include "app/job.h"
#include "sync/io/atomic_file.h"
#include "tests/app/run_test_util.h"
#include "tests/test_paths.h"

namespace {

/// A run directory holding only the config a run of `overrides` would have written.
/// A run directory holding only config.toml (the defaults with `overrides`); removed when the test ends,
/// also when a REQUIRE ends it early.
struct FakeRun : pulse::test_run::ScopedTempDir {
  FakeRun(const std::string& name, const std::vector<std::string>& overrides) : ScopedTempDir(name) {
    pulse::app::Config c = pulse::app::parse_config("", "x.toml", overrides);
    pulse::sync::write_file_atomic(path + "/config.toml", pulse::app::to_toml(c));
  }
};

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
  const FakeRun run("guard-lock", {});
  const std::string& dir = run.path;
  const int fd = ::open((dir + "/.lock").c_str(), O_RDWR | O_CREAT, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(::flock(fd, LOCK_EX | LOCK_NB) == 0);
  const std::string err = resume_error(dir, {});
  CHECK_THAT(err, Catch::Contains("in use by another pulse process"));
  ::close(fd);
}

TEST_CASE("resume refuses --set of keys the run's state depends on", "[app][resume]") {
  const FakeRun run("guard-set",
                    {"multi.mode=pulseloco", "multi.inner_steps=2", "rl.steps=4", "run.checkpoint_every=2"});
  const std::string& dir = run.path;
  const std::string before = pulse::sync::read_file(dir + "/config.toml");
  CHECK_THAT(resume_error(dir, {"multi.mode=diloco"}),
             Catch::Contains("multi.mode cannot change on --resume"));
  CHECK_THAT(resume_error(dir, {"rl.kl_coef=0.1"}), Catch::Contains("rl.kl_coef"));
  // Where the run lives is never read on a resume; the same folder spelled otherwise is no change.
  CHECK_THAT(resume_error(dir, {"run.dir=/tmp/elsewhere"}),
             Catch::Contains("--resume " + dir + ": --set run.dir has no effect on --resume"));
  // Without a checkpoint the run starts over and reads sft.*: not refused for it (run.dir, refused after
  // it, ends the call before anything runs).
  CHECK_THAT(resume_error(dir, {"sft.steps=300", "run.dir=/tmp/elsewhere"}),
             Catch::Contains("--set run.dir has no effect"));
  // With a checkpoint: model, tokenizer and SFT keys are refused, named; the same value is no change.
  std::filesystem::create_directories(dir + "/checkpoints");
  pulse::sync::write_file_atomic(dir + "/checkpoints/LATEST", "2\n");
  pulse::sync::write_file_atomic(dir + "/run_state.json", "{}");
  CHECK_THAT(resume_error(dir, {"sft.steps=300"}),
             Catch::Contains("--set sft.steps has no effect on --resume"));
  CHECK_THAT(resume_error(dir, {"model.path=/tmp/other-model"}),
             Catch::Contains("--set model.path has no effect"));
  const std::string err =
      resume_error(dir, {"run.name=default", "run.dir=" + dir + "/", "tokenizer.vocab_size=999"});
  CHECK_THAT(err, Catch::Contains("--set tokenizer.vocab_size has no effect on --resume"));
  CHECK_THAT(err, !Catch::Contains("run.name"));
  // A refused --set leaves config.toml as it was.
  CHECK(pulse::sync::read_file(dir + "/config.toml") == before);
}

TEST_CASE("a new run that cannot set up its model leaves no run directory", "[app][resume]") {
  pulse::test_run::ScopedTempDir tmp("guard-new");
  const std::string run = tmp.path + "/run";
  pulse::app::Config c = pulse::app::parse_config(
      "", "x.toml",
      {"run.dir=" + run, "model.path=" + tmp.path + "/no-such-model",
       "tokenizer.path=" + pulse::test::shared_path("models/llama2-tokenizer/tokenizer.model")});
  pulse::sync::write_file_atomic(tmp.path + "/c.toml", pulse::app::to_toml(c));
  pulse::app::JobOptions o;
  o.config_path = tmp.path + "/c.toml";
  o.quiet = true;
  CHECK_THROWS_WITH(pulse::app::run_job(o), Catch::Contains("no-such-model"));
  CHECK_FALSE(std::filesystem::exists(run));
  // A run directory that existed before (here: made by hand) is left as it was.
  std::filesystem::create_directories(run + "/mine");
  CHECK_THROWS(pulse::app::run_job(o));
  CHECK(std::filesystem::exists(run + "/mine"));
}
