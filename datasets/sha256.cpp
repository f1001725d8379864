// SHA-256 through OpenSSL's EVP interface (datasets/sha256.h).
#include "datasets/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <vector>

namespace pulse::datasets {
namespace {

/// One EVP digest context; update() any number of times, then hex().
class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1)
      throw std::runtime_error("sha256: EVP_DigestInit_ex failed");
  }
  void update(const void* data, size_t n) {
    if (EVP_DigestUpdate(ctx_.get(), data, n) != 1)
      throw std::runtime_error("sha256: EVP_DigestUpdate failed");
  }
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), md, &len) != 1)
      throw std::runtime_error("sha256: EVP_DigestFinal_ex failed");
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
      out += digits[md[i] >> 4];
      out += digits[md[i] & 15];
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

std::string sha256_file_hex(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open (" + std::strerror(errno) + ")");
  Sha256 h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) h.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  if (in.bad()) throw std::runtime_error(path + ": read error");
  return h.hex();
}

}  // namespace pulse::datasets
