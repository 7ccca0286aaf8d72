// NFC (UAX #15): full canonical decomposition, canonical ordering of combining marks, then canonical
// composition of primary composites. Hangul syllables are decomposed and composed algorithmically.
#include <algorithm>
#include <vector>

#include "io/unicode.hpp"
#include "io/unicode_nfc_data.hpp"

namespace latentllm::io {
namespace {

using namespace nfc_data;

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

int ccc(char32_t cp) {
  if (cp < 0x300) return 0;
  const CccRange* end = kCcc + kCccCount;
  const CccRange* it = std::upper_bound(kCcc, end, cp, [](char32_t c, const CccRange& r) { return c < r.first; });
  if (it == kCcc) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const Decomposition* end = kDecomp + kDecompCount;
  const Decomposition* it =
      std::lower_bound(kDecomp, end, cp, [](const Decomposition& d, char32_t c) { return d.cp < c; });
  if (cp < 0xC0 || it == end || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);  // the first part may decompose further; the second never does
  if (it->second != 0) out.push_back(it->second);
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const Composition* end = kComp + kCompCount;
  const Composition* it = std::lower_bound(kComp, end, std::pair{a, b}, [](const Composition& c, auto key) {
    return c.first < key.first || (c.first == key.first && c.second < key.second);
  });
  return (it != end && it->first == a && it->second == b) ? it->composite : 0;
}

// Stable sort of every run of non-starters by combining class.
void canonical_order(std::vector<char32_t>& cps) {
  std::size_t i = 0;
  while (i < cps.size()) {
    if (ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j, [](char32_t x, char32_t y) { return ccc(x) < ccc(y); });
    i = j;
  }
}

// Canonical composition: a character combines with the last starter unless a character in between
// has class 0 or a class >= its own ("blocked").
std::vector<char32_t> canonical_compose(const std::vector<char32_t>& cps) {
  std::vector<char32_t> out;
  out.reserve(cps.size());
  std::ptrdiff_t starter = -1;
  int last_ccc = 0;
  for (char32_t c : cps) {
    const int cc = ccc(c);
    if (starter >= 0) {
      const bool adjacent = static_cast<std::ptrdiff_t>(out.size()) - 1 == starter;
      if (adjacent || (last_ccc != 0 && last_ccc < cc)) {
        if (char32_t comp = compose(out[starter], c)) {
          out[starter] = comp;
          continue;
        }
      }
    }
    if (cc == 0) {
      starter = static_cast<std::ptrdiff_t>(out.size());
      last_ccc = 0;
    } else {
      last_ccc = cc;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string nfc(std::string_view s) {
  // Text below U+0300 without combining marks is already NFC (no decomposition of a code point
  // below U+00C0, and precomposed Latin-1 letters are their own NFC).
  bool trivial = true;
  for (unsigned char c : s) {
    if (c >= 0xCC) {  // lead bytes of U+0300 and above
      trivial = false;
      break;
    }
  }
  if (trivial) return std::string(s);
  std::vector<char32_t> cps;
  cps.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) decompose(next_code_point(s, i), cps);
  canonical_order(cps);
  std::string out;
  out.reserve(s.size());
  for (char32_t c : canonical_compose(cps)) append_utf8(out, c);
  return out;
}

const char* nfc_unicode_version() { return nfc_data::kUnicodeVersion; }

}  // namespace latentllm::io
