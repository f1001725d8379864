// sync/io/atomic_file.h: a failed atomic write names the file the caller asked for (then the temp file it
// went through) and leaves nothing behind.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "sync/io/atomic_file.h"

namespace fs = std::filesystem;

TEST_CASE("a failed atomic write names the destination first and leaves no temp file", "[sync][atomic]") {
  const fs::path dir = fs::temp_directory_path() / ("pulse-atomic-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string missing = (dir / "no-such-folder" / "x.bin").string();
  CHECK_THROWS_WITH(
      pulse::sync::write_file_atomic(missing, std::string("data")),
      Catch::StartsWith("cannot create '" + missing + "' (through its temp file '" + missing + ".tmp.") &&
          Catch::Contains("No such file or directory"));
  // A write that succeeds leaves exactly the file.
  const std::string ok = (dir / "y.bin").string();
  pulse::sync::write_file_atomic(ok, std::string("abc"));
  CHECK(pulse::sync::read_file(ok) == "abc");
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir)) entries += e.path().filename() == "y.bin" ? 1 : 100;
  CHECK(entries == 1);
  fs::remove_all(dir);
}
