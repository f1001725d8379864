// UTF-8 helpers and Unicode NFC normalisation (UAX #15) for the tokenizers.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pulse::model {

/// Decodes UTF-8 into code points. Returns false (and leaves `out` partial) on malformed input.
bool utf8_decode(std::string_view s, std::vector<uint32_t>& out);
/// Appends the UTF-8 encoding of `cp` to `out`.
void utf8_append(uint32_t cp, std::string& out);
/// Byte length of the UTF-8 sequence starting with `lead` (1 for a stray continuation byte).
size_t utf8_len(unsigned char lead);

/// Replaces each byte that does not start a valid UTF-8 sequence with U+FFFD (as the HF and
/// SentencePiece decoders do for broken byte sequences).
std::string utf8_lossy(const std::string& s);

/// Canonical composition (NFC) of UTF-8 text: canonical decomposition, canonical ordering of combining
/// marks, then composition of primary composites (Hangul algorithmically). Tables come from Python's
/// unicodedata (model/gen_unicode_nfc.py). Malformed UTF-8 is returned unchanged.
std::string nfc(std::string_view s);

}  // namespace pulse::model
