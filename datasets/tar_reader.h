// Reads the regular files of a tar archive (POSIX ustar, GNU long names, pax path records), enough for
// upstream dataset releases such as Hendrycks' MATH.tar. No compression, no links, nothing extracted to disk.
#pragma once
#include <string>
#include <vector>

namespace pulse::datasets {

/// One regular file of an archive: its path as stored (pax `path` or GNU long name when present, else
/// ustar prefix + "/" + name) and its bytes.
struct TarEntry {
  std::string path;
  std::string data;
};

/// Every regular file (type '0' or NUL) of the tar image `bytes`, in archive order; directories, links
/// and pax global headers are skipped. `source` names the archive in errors. Throws std::runtime_error
/// "<source>: tar header at byte offset N: <what>" on a bad checksum, a bad size field or a truncated
/// member. The archive ends at two zero blocks or at the end of `bytes`.
std::vector<TarEntry> read_tar(const std::string& bytes, const std::string& source);

}  // namespace pulse::datasets
