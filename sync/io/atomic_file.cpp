#include "sync/io/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace pulse::sync {

namespace {

std::runtime_error io_error(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " '" + path + "': " + std::strerror(errno));
}

/// The same for a failure on the temp file of `path`: the file the caller asked for comes first.
std::runtime_error temp_error(const std::string& what, const std::string& path, const std::string& tmp) {
  const int err = errno;
  return std::runtime_error(what + " '" + path + "' (through its temp file '" + tmp +
                            "'): " + std::strerror(err));
}

std::string parent_dir(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string temp_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

void write_all(int fd, const void* data, size_t size, const std::string& path, const std::string& tmp) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw temp_error("cannot write", path, tmp);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

void fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) throw io_error("cannot open directory", dir);
  int rc = ::fsync(fd);
  ::close(fd);
  if (rc != 0) throw io_error("cannot fsync directory", dir);
}

void write_file_atomic_stream(
    const std::string& path,
    const std::function<void(const std::function<void(const void*, size_t)>&)>& fill) {
  const std::string tmp = temp_name(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw temp_error("cannot create", path, tmp);
  try {
    fill([&](const void* data, size_t size) { write_all(fd, data, size, path, tmp); });
    if (::fsync(fd) != 0) throw temp_error("cannot fsync", path, tmp);
    if (::close(fd) != 0) {
      fd = -1;
      throw temp_error("cannot close", path, tmp);
    }
    fd = -1;
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw io_error("cannot rename into", path);
    fsync_dir(parent_dir(path));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
  write_file_atomic_stream(path, [&](const auto& write) { write(data, size); });
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw io_error("cannot open", path);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw io_error("cannot read", path);
  return ss.str();
}

}  // namespace pulse::sync
