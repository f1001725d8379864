// NFC against cases from UAX #15 and the Unicode normalisation test data.
#include <catch2/catch.hpp>

#include "model/unicode.h"

using pulse::model::nfc;

TEST_CASE("NFC composes, reorders marks and leaves NFC text alone", "[model][unicode]") {
  CHECK(nfc("plain ASCII") == "plain ASCII");
  CHECK(nfc("e\xCC\x81") == "\xC3\xA9");     // e + U+0301 -> U+00E9
  CHECK(nfc("\xC3\xA9") == "\xC3\xA9");      // already composed
  CHECK(nfc("A\xCC\x8A") == "\xC3\x85");     // A + ring -> U+00C5
  CHECK(nfc("\xE2\x84\xAB") == "\xC3\x85");  // U+212B ANGSTROM SIGN (singleton)
  // U+1E0B U+0323 (d-dot-above, dot-below) -> U+1E0D U+0307 (UAX #15 figure 6 example).
  CHECK(nfc("\xE1\xB8\x8B\xCC\xA3") == "\xE1\xB8\x8D\xCC\x87");
  // Hangul: L + V + T jamo compose to one syllable U+D4DB.
  CHECK(nfc("\xE1\x84\x91\xE1\x85\xB1\xE1\x86\xB6") == "\xED\x93\x9B");
  // Composition exclusion: U+0958 stays decomposed (U+0915 U+093C).
  CHECK(nfc("\xE0\xA5\x98") == "\xE0\xA4\x95\xE0\xA4\xBC");
  CHECK(nfc("\xFF\xFE bad utf8") == "\xFF\xFE bad utf8");  // malformed input unchanged
}
