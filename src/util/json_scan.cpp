#include "fusesim/util/json_scan.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

namespace fusesim {
namespace {

// Bytes a string's fast loop stops at: the quote, the backslash, control characters (which JSON
// forbids unescaped) and non-ASCII bytes (checked as UTF-8).
constexpr std::array<bool, 256> string_stops() {
  std::array<bool, 256> t{};
  for (int c = 0; c < 0x20; ++c) t[static_cast<std::size_t>(c)] = true;
  for (int c = 0x80; c < 0x100; ++c) t[static_cast<std::size_t>(c)] = true;
  t['"'] = t['\\'] = true;
  return t;
}
constexpr std::array<bool, 256> kStringStop = string_stops();

bool is_digit(char c) { return c >= '0' && c <= '9'; }

class Scanner {
 public:
  Scanner(std::string_view text, nlohmann::json_sax<nlohmann::json>& h, JsonScanError& e)
      : p_(text.data()), begin_(text.data()), end_(text.data() + text.size()), h_(h), err_(e) {}

  bool run() {
    // nlohmann skips a UTF-8 byte order mark at the start.
    if (end_ - p_ >= 1 && static_cast<unsigned char>(*p_) == 0xEF) {
      if (end_ - p_ < 3 || static_cast<unsigned char>(p_[1]) != 0xBB || static_cast<unsigned char>(p_[2]) != 0xBF)
        return syntax(p_, "invalid BOM; must be 0xEF 0xBB 0xBF if given");
      p_ += 3;
    }
    // An explicit stack instead of recursion: a document nested a million deep is read like any other.
    std::vector<char> stack;  // '{' or '[' per open container
    bool need_value = true;
    for (;;) {
      if (need_value) {
        if (!value(stack, need_value)) return false;
        continue;
      }
      if (stack.empty()) break;
      ws();
      if (p_ == end_) return syntax(p_, "unexpected end of input");
      const char open = stack.back();
      if (*p_ == ',') {
        ++p_;
        if (open == '{' && !key()) return false;
        need_value = true;
      } else if (open == '{' && *p_ == '}') {
        ++p_;
        stack.pop_back();
        if (!h_.end_object()) return false;
      } else if (open == '[' && *p_ == ']') {
        ++p_;
        stack.pop_back();
        if (!h_.end_array()) return false;
      } else {
        return syntax(p_, open == '{' ? "unexpected character; expected ',' or '}'" : "unexpected character; expected ',' or ']'");
      }
    }
    ws();
    // nlohmann's lexer reads a NUL byte where a token starts as the end of the input (its C-string
    // heritage): what follows is not read. Inside a string a NUL is a control character, refused.
    if (p_ != end_ && *p_ != '\0') return syntax(p_, "unexpected character after the value; expected end of input");
    return true;
  }

 private:
  void ws() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool syntax(const char* at, const char* what) {
    err_.byte = static_cast<std::size_t>(at - begin_) + 1;
    err_.what = fmt::format("syntax error while parsing JSON - {}", what);
    return false;
  }

  // A key and its colon, at the quote.
  bool key() {
    ws();
    if (p_ == end_) return syntax(p_, "unexpected end of input; expected a string key");
    if (*p_ != '"') return syntax(p_, "unexpected character; expected a string key");
    if (!string()) return false;
    if (!h_.key(text_)) return false;
    ws();
    if (p_ == end_) return syntax(p_, "unexpected end of input; expected ':'");
    if (*p_ != ':') return syntax(p_, "unexpected character; expected ':'");
    ++p_;
    return true;
  }

  // One value, or a container's opening: then `need_value` says whether its first element follows
  // (run()'s loop reads it), else the value is complete.
  bool value(std::vector<char>& stack, bool& need_value) {
    need_value = false;
    ws();
    if (p_ == end_) return syntax(p_, "unexpected end of input; expected a value");
    switch (*p_) {
      case '{':
        ++p_;
        if (!h_.start_object(static_cast<std::size_t>(-1))) return false;
        ws();
        if (p_ != end_ && *p_ == '}') {
          ++p_;
          return h_.end_object();
        }
        stack.push_back('{');
        need_value = true;
        return key();
      case '[':
        ++p_;
        if (!h_.start_array(static_cast<std::size_t>(-1))) return false;
        ws();
        if (p_ != end_ && *p_ == ']') {
          ++p_;
          return h_.end_array();
        }
        stack.push_back('[');
        need_value = true;
        return true;
      case '"':
        return string() && h_.string(text_);
      case 't': return literal("true") && h_.boolean(true);
      case 'f': return literal("false") && h_.boolean(false);
      case 'n': return literal("null") && h_.null();
      default:
        if (*p_ == '-' || is_digit(*p_)) return number();
        return syntax(p_, "unexpected character; expected a value");
    }
  }

  bool literal(const char* word) {
    const std::size_t n = std::strlen(word);
    if (static_cast<std::size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0)
      return syntax(p_, "invalid literal");
    p_ += n;
    return true;
  }

  // JSON's number grammar; integers as nlohmann reports them (negative: number_integer, else
  // number_unsigned, a float when out of 64-bit range), fractions and exponents as doubles, refused
  // when not finite (nlohmann's "number overflow").
  bool number() {
    const char* start = p_;
    if (*p_ == '-') ++p_;
    if (p_ == end_ || !is_digit(*p_)) return syntax(p_, "invalid number; expected digit after '-'");
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ != end_ && is_digit(*p_)) ++p_;
    }
    bool integral = true;
    if (p_ != end_ && *p_ == '.') {
      integral = false;
      ++p_;
      if (p_ == end_ || !is_digit(*p_)) return syntax(p_, "invalid number; expected digit after '.'");
      while (p_ != end_ && is_digit(*p_)) ++p_;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      integral = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !is_digit(*p_)) return syntax(p_, "invalid number; expected digit after exponent sign");
      while (p_ != end_ && is_digit(*p_)) ++p_;
    }
    if (integral) {
      if (*start == '-') {
        std::int64_t v = 0;
        const auto r = std::from_chars(start, p_, v);
        if (r.ec == std::errc() && r.ptr == p_) return h_.number_integer(v);
      } else {
        std::uint64_t v = 0;
        const auto r = std::from_chars(start, p_, v);
        if (r.ec == std::errc() && r.ptr == p_) return h_.number_unsigned(v);
      }
    }
    double d = 0;
    const auto r = std::from_chars(start, p_, d);
    if ((r.ec != std::errc() && r.ec != std::errc::result_out_of_range) || r.ptr != p_)
      return syntax(start, "invalid number");
    number_text_.assign(start, p_);
    if (r.ec == std::errc::result_out_of_range) {
      // from_chars leaves the value alone out of range; strtod (the "C" locale's '.', as fusesim never
      // sets another) rounds an underflow to zero and an overflow to infinity, refused below as
      // nlohmann refuses it ("number overflow").
      d = std::strtod(number_text_.c_str(), nullptr);
    }
    if (!std::isfinite(d)) return overflow(start);
    return h_.number_float(d, number_text_);
  }

  bool overflow(const char* start) {
    err_.byte = static_cast<std::size_t>(p_ - begin_);
    err_.what = fmt::format("number overflow parsing '{}'", std::string_view(start, static_cast<std::size_t>(p_ - start)));
    return false;
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Four hex digits after "\u", at the 'u'.
  bool code_unit(unsigned& out) {
    if (end_ - p_ < 5) return syntax(end_, "invalid string: '\\u' must be followed by 4 hex digits");
    out = 0;
    for (int i = 1; i <= 4; ++i) {
      const int h = hex(p_[i]);
      if (h < 0) return syntax(p_ + i, "invalid string: '\\u' must be followed by 4 hex digits");
      out = out * 16 + static_cast<unsigned>(h);
    }
    p_ += 5;
    return true;
  }

  void append_utf8(unsigned cp) {
    if (cp < 0x80) {
      text_.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      text_.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      text_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      text_.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      text_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      text_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      text_.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      text_.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      text_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      text_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // A UTF-8 sequence at p_ (its lead byte >= 0x80), as RFC 3629 and nlohmann's lexer allow them.
  bool utf8() {
    const auto b = [&](std::ptrdiff_t i) { return static_cast<unsigned char>(p_[i]); };
    const unsigned char c = b(0);
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) {
      n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return syntax(p_, "invalid string: ill-formed UTF-8 byte");
    }
    if (end_ - p_ < n) return syntax(end_, "invalid string: ill-formed UTF-8 byte");
    if (b(1) < lo || b(1) > hi) return syntax(p_ + 1, "invalid string: ill-formed UTF-8 byte");
    for (int i = 2; i < n; ++i)
      if (b(i) < 0x80 || b(i) > 0xBF) return syntax(p_ + i, "invalid string: ill-formed UTF-8 byte");
    p_ += n;
    return true;
  }

  // A string at its opening quote, left in text_.
  bool string() {
    ++p_;
    const char* run = p_;
    text_.clear();
    for (;;) {
      while (p_ != end_ && !kStringStop[static_cast<unsigned char>(*p_)]) ++p_;
      if (p_ == end_) return syntax(p_, "invalid string: missing closing quote");
      const unsigned char c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        text_.append(run, p_);
        ++p_;
        return true;
      }
      if (c < 0x20) return syntax(p_, "invalid string: control character must be escaped");
      if (c >= 0x80) {
        if (!utf8()) return false;
        continue;
      }
      // A backslash.
      text_.append(run, p_);
      if (end_ - p_ < 2) return syntax(end_, "invalid string: missing closing quote");
      const char e = p_[1];
      switch (e) {
        case '"': text_.push_back('"'); p_ += 2; break;
        case '\\': text_.push_back('\\'); p_ += 2; break;
        case '/': text_.push_back('/'); p_ += 2; break;
        case 'b': text_.push_back('\b'); p_ += 2; break;
        case 'f': text_.push_back('\f'); p_ += 2; break;
        case 'n': text_.push_back('\n'); p_ += 2; break;
        case 'r': text_.push_back('\r'); p_ += 2; break;
        case 't': text_.push_back('\t'); p_ += 2; break;
        case 'u': {
          ++p_;
          unsigned cp = 0;
          if (!code_unit(cp)) return false;
          if (cp >= 0xDC00 && cp <= 0xDFFF)
            return syntax(p_ - 1, "invalid string: surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
              return syntax(p_, "invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF");
            ++p_;
            unsigned low = 0;
            if (!code_unit(low)) return false;
            if (low < 0xDC00 || low > 0xDFFF)
              return syntax(p_ - 1, "invalid string: surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(cp);
          break;
        }
        default: return syntax(p_ + 1, "invalid string: forbidden character after backslash");
      }
      run = p_;
    }
  }

  const char* p_;
  const char* begin_;
  const char* end_;
  nlohmann::json_sax<nlohmann::json>& h_;
  JsonScanError& err_;
  std::string text_;         // the last string or key read, unescaped
  std::string number_text_;  // the last float's text (nlohmann passes it with the value)
};

}  // namespace

bool json_scan(std::string_view text, nlohmann::json_sax<nlohmann::json>& handler, JsonScanError& error) {
  error = JsonScanError{};
  return Scanner(text, handler, error).run();
}

}  // namespace fusesim
