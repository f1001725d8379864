// SHA-256 of bytes and files (OpenSSL libcrypto EVP), as the hex digests datasets/catalog.h pins.
#pragma once
#include <string>
#include <string_view>

namespace pulse::datasets {

/// Lower-case hex SHA-256 (64 characters) of `bytes`. Thread-safe. Throws std::runtime_error if
/// libcrypto fails (out of memory).
std::string sha256_hex(std::string_view bytes);

/// Lower-case hex SHA-256 of the file at `path`, read in 1 MiB chunks. Throws std::runtime_error naming
/// the path when it cannot be read.
std::string sha256_file_hex(const std::string& path);

}  // namespace pulse::datasets
