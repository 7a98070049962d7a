#pragma once
// Strings joined from pieces, sized once. Task and buffer names are built millions of times per
// generated graph; fmt::format parses its format string and grows its buffer on every call, which
// cost a sixth of a search candidate's instructions (callgrind, BENCHMARKS.md "fusesim search").
#include <charconv>
#include <concepts>
#include <string>
#include <string_view>

namespace fusesim {

namespace detail {

// A piece as characters: string-like pieces as they are, integers in decimal (kept in the piece
// itself, so that a copy stays valid).
class ConcatPiece {
 public:
  ConcatPiece(std::string_view s) : text_(s) {}  // NOLINT(google-explicit-constructor): pieces convert implicitly
  ConcatPiece(const std::string& s) : text_(s) {}  // NOLINT(google-explicit-constructor)
  ConcatPiece(const char* s) : text_(s) {}         // NOLINT(google-explicit-constructor)
  ConcatPiece(char c) = delete;                    // would read as a number: pass "x", not 'x'
  ConcatPiece(bool b) = delete;
  template <std::integral I>
  ConcatPiece(I n) {  // NOLINT(google-explicit-constructor)
    const auto r = std::to_chars(digits_, digits_ + sizeof digits_, n);
    length_ = static_cast<unsigned char>(r.ptr - digits_);
    number_ = true;
  }

  std::string_view view() const { return number_ ? std::string_view(digits_, length_) : text_; }

 private:
  std::string_view text_;
  char digits_[24] = {};  // an int64's 20 characters and its sign
  unsigned char length_ = 0;
  bool number_ = false;
};

}  // namespace detail

// concat("r", 3, "/", name) == fmt::format("r{}/{}", 3, name), in one allocation.
template <class... Parts>
std::string concat(const Parts&... parts) {
  if constexpr (sizeof...(Parts) == 0) {
    return {};
  } else {
    const detail::ConcatPiece pieces[] = {detail::ConcatPiece(parts)...};
    std::size_t size = 0;
    for (const detail::ConcatPiece& p : pieces) size += p.view().size();
    std::string out;
    out.reserve(size);
    for (const detail::ConcatPiece& p : pieces) out += p.view();
    return out;
  }
}

}  // namespace fusesim
