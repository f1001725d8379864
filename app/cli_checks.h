// CLI11 validators shared by the subcommands.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

namespace pulse::app {

/// For an unsigned integer option: CLI11 reads "-1" into a uint64_t as 2^64 - 1 without a word, so a
/// leading '-' is refused ("must be >= 0 (got -1)"). The number itself is parsed by CLI11 afterwards.
inline CLI::Validator non_negative_integer() {
  return CLI::Validator(
      [](std::string& text) {
        const auto at = text.find_first_not_of(" \t");
        return at != std::string::npos && text[at] == '-' ? "must be >= 0 (got " + text + ")" : std::string();
      },
      "UINT");
}

}  // namespace pulse::app
