#include "fusesim/util/json_reader.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "fusesim/util/error.hpp"
#include "fusesim/util/json_syntax.hpp"

namespace fusesim {
namespace {

std::string type_name(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::object: return "an object";
    case nlohmann::json::value_t::array: return "an array";
    case nlohmann::json::value_t::string: return "a string";
    case nlohmann::json::value_t::boolean: return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "an integer";
    case nlohmann::json::value_t::number_float: return "a number";
    default: return "an unsupported value";
  }
}

// Built for every value read (a profile reads tens of thousands): appended, not formatted.
std::string child_path(const std::string& parent, std::string_view key) {
  std::string p;
  p.reserve(parent.size() + 1 + key.size());
  p += parent;
  p += '.';
  p += key;
  return p;
}

std::string index_path(const std::string& parent, std::size_t index) {
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, index).ptr;
  std::string p;
  p.reserve(parent.size() + 2 + static_cast<std::size_t>(end - digits));
  p += parent;
  p += '[';
  p.append(digits, end);
  p += ']';
  return p;
}

// nlohmann reports a byte offset; people want a line and a column.
std::pair<std::size_t, std::size_t> line_and_column(std::string_view text, std::size_t byte) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {line, column};
}

// Builds the document as nlohmann's own DOM parser does, and refuses what that parser lets through:
// a key given twice in one object (nlohmann keeps the last, so a typo'd copy silently wins) and a
// number beyond the range of a double (nlohmann's out_of_range 406, not a parse_error). Either stops
// the parse with the JSON path of the value; syntax errors are left to the parse_error path.
class CheckingSax {
 public:
  using json = nlohmann::json;
  explicit CheckingSax(json& result) : dom_(result, true) {}

  bool null() { return scalar() && dom_.null(); }
  bool boolean(bool v) { return scalar() && dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return scalar() && dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return scalar() && dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return scalar() && dom_.number_float(v, s); }
  bool string(json::string_t& v) { return scalar() && dom_.string(v); }
  bool binary(json::binary_t& v) { return scalar() && dom_.binary(v); }
  bool start_object(std::size_t n) {
    open(false);
    return dom_.start_object(n);
  }
  bool key(json::string_t& k) {
    Frame& f = frames_[depth_ - 1];
    if (!f.insert(k)) {
      error_path_ = path() + "." + k;
      error_ = fmt::format("the key '{}' is given twice in this object", k);
      return false;
    }
    f.key = k;
    return dom_.key(k);
  }
  bool end_object() {
    close();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) {
    open(true);
    return dom_.start_array(n);
  }
  bool end_array() {
    close();
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string& token, const Exception& ex) {
    if (ex.id == 406) {  // number overflow: the path of the value being read
      error_path_ = element_path();
      error_ = fmt::format("the number {} is beyond the range of a double", token);
      return false;
    }
    return dom_.parse_error(position, token, ex);  // throws the parse_error
  }

  // Empty when the document was accepted.
  const std::string& error() const { return error_; }
  const std::string& error_path() const { return error_path_; }

 private:
  // Frames are kept when their container closes and reused by the next one at that depth, so that a
  // document of many small objects (a profile's samples) allocates for its keys once per depth.
  struct Frame {
    bool array = false;
    std::size_t index = 0;  // arrays: elements completed
    std::vector<std::string> keys;  // objects: the keys so far (few: a linear search)
    std::set<std::string, std::less<>> many_keys;  // objects past kLinearKeys keys: all of them
    std::string key;  // objects: the key of the value being read

    static constexpr std::size_t kLinearKeys = 16;
    void reset(bool is_array) {
      array = is_array;
      index = 0;
      keys.clear();
      many_keys.clear();
      key.clear();
    }
    // False when the object already has the key.
    bool insert(const std::string& k) {
      if (!many_keys.empty()) return many_keys.insert(k).second;
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) return false;
      keys.push_back(k);
      if (keys.size() > kLinearKeys) {
        many_keys.insert(keys.begin(), keys.end());
        keys.clear();
      }
      return true;
    }
  };

  std::string path() const {
    std::string p = "$";
    for (std::size_t i = 0; i + 1 < depth_; ++i) p += step(frames_[i]);
    return p;
  }
  static std::string step(const Frame& f) { return f.array ? fmt::format("[{}]", f.index) : "." + f.key; }
  // The path of the value now being read inside the innermost container.
  std::string element_path() const {
    std::string p = "$";
    for (std::size_t i = 0; i < depth_; ++i) p += step(frames_[i]);
    return p;
  }
  bool scalar() {
    if (depth_ > 0 && frames_[depth_ - 1].array) ++frames_[depth_ - 1].index;
    return true;
  }
  void open(bool array) {
    if (depth_ == frames_.size()) frames_.emplace_back();
    frames_[depth_++].reset(array);
  }
  void close() {
    --depth_;
    scalar();  // the container just closed is one completed element of its parent
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<Frame> frames_;
  std::size_t depth_ = 0;  // frames_[0, depth_) are the open containers
  std::string error_, error_path_;
};

}  // namespace

JsonValue::JsonValue(std::shared_ptr<const JsonSource> source, const nlohmann::json* node, std::string path)
    : source_(std::move(source)), node_(node), path_(std::move(path)) {}

void JsonValue::fail(const std::string& message) const { throw InputError(source_->file, path_, message); }

JsonObject JsonValue::as_object() const {
  if (!node_->is_object()) fail(fmt::format("expected an object, found {}", type_name(*node_)));
  return JsonObject(source_, node_, path_);
}

JsonArray JsonValue::as_array() const {
  if (!node_->is_array()) fail(fmt::format("expected an array, found {}", type_name(*node_)));
  return JsonArray(source_, node_, path_);
}

std::string JsonValue::as_string() const {
  if (!node_->is_string()) fail(fmt::format("expected a string, found {}", type_name(*node_)));
  auto s = node_->get<std::string>();
  if (s.empty()) fail("expected a non-empty string");
  return s;
}

bool JsonValue::as_bool() const {
  if (!node_->is_boolean()) fail(fmt::format("expected true or false, found {}", type_name(*node_)));
  return node_->get<bool>();
}

double JsonValue::as_number() const {
  if (!node_->is_number()) fail(fmt::format("expected a number, found {}", type_name(*node_)));
  const double v = node_->get<double>();
  if (!std::isfinite(v)) fail("expected a finite number");
  return v;
}

double JsonValue::as_number(double min, double max) const {
  const double v = as_number();
  if (v < min || v > max) fail(fmt::format("value {} is outside the allowed range [{}, {}]", v, min, max));
  return v;
}

std::int64_t JsonValue::as_integer(std::int64_t min, std::int64_t max) const {
  std::int64_t v = 0;
  if (node_->is_number_integer()) {
    v = node_->get<std::int64_t>();
  } else if (node_->is_number_unsigned()) {
    const auto u = node_->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(max)) fail(fmt::format("value {} exceeds the maximum {}", u, max));
    v = static_cast<std::int64_t>(u);
  } else if (node_->is_number_float()) {
    const double d = node_->get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e15)
      fail(fmt::format("expected an integer, found {}", d));
    v = static_cast<std::int64_t>(d);
  } else {
    fail(fmt::format("expected an integer, found {}", type_name(*node_)));
  }
  if (v < min || v > max) fail(fmt::format("value {} is outside the allowed range [{}, {}]", v, min, max));
  return v;
}

SourcedValue JsonValue::as_sourced(double min, double max) const {
  if (node_->is_number())
    fail("a figure from outside the project must carry its source: write {\"value\": ..., \"source\": \"...\"}");
  JsonObject obj = as_object();
  SourcedValue out;
  out.value = obj.number("value", min, max);
  out.source = obj.string("source");
  obj.finish();
  return out;
}

bool JsonObject::has(std::string_view key) const { return node_->contains(key); }

JsonValue JsonObject::at(std::string_view key) const {
  auto it = node_->find(key);
  if (it == node_->end()) throw InputError(source_->file, child_path(path_, key), "missing required key");
  read_keys_->push_back(&it.key());
  return JsonValue(source_, &*it, child_path(path_, key));
}

std::optional<JsonValue> JsonObject::find(std::string_view key) const {
  auto it = node_->find(key);
  if (it == node_->end()) return std::nullopt;
  read_keys_->push_back(&it.key());
  return JsonValue(source_, &*it, child_path(path_, key));
}

JsonArray JsonObject::array(std::string_view key) const { return at(key).as_array(); }

std::string JsonObject::string_or(std::string_view key, std::string fallback) const {
  auto v = find(key);
  return v ? v->as_string() : fallback;
}

bool JsonObject::boolean_or(std::string_view key, bool fallback) const {
  auto v = find(key);
  return v ? v->as_bool() : fallback;
}

double JsonObject::number_or(std::string_view key, double min, double max, double fallback) const {
  auto v = find(key);
  return v ? v->as_number(min, max) : fallback;
}

std::int64_t JsonObject::integer_or(std::string_view key, std::int64_t min, std::int64_t max,
                                    std::int64_t fallback) const {
  auto v = find(key);
  return v ? v->as_integer(min, max) : fallback;
}

static std::string join_choices(const std::vector<std::string>& allowed) {
  std::string out;
  for (std::size_t i = 0; i < allowed.size(); ++i) out += (i ? ", " : "") + ("'" + allowed[i] + "'");
  return out;
}

std::string JsonObject::choice(std::string_view key, const std::vector<std::string>& allowed) const {
  JsonValue v = at(key);
  std::string s = v.as_string();
  for (const auto& a : allowed)
    if (a == s) return s;
  v.fail(fmt::format("'{}' is not one of {}", s, join_choices(allowed)));
}

std::string JsonObject::choice_or(std::string_view key, const std::vector<std::string>& allowed,
                                  std::string fallback) const {
  return has(key) ? choice(key, allowed) : fallback;
}

std::vector<std::string> JsonObject::keys() const {
  std::vector<std::string> out;
  for (auto it = node_->begin(); it != node_->end(); ++it) out.push_back(it.key());
  return out;
}

void JsonObject::finish() const {
  std::vector<const std::string*>& read = *read_keys_;
  std::sort(read.begin(), read.end(), std::less<>());
  for (auto it = node_->begin(); it != node_->end(); ++it) {
    if (!std::binary_search(read.begin(), read.end(), &it.key(), std::less<>()))
      throw InputError(source_->file, child_path(path_, it.key()), "unknown key");
  }
}

JsonValue JsonArray::at(std::size_t index) const {
  if (index >= node_->size()) fail(fmt::format("index {} is past the end (size {})", index, node_->size()));
  return JsonValue(source_, &(*node_)[index], index_path(path_, index));
}

void JsonArray::require_size(std::size_t min, std::size_t max) const {
  if (node_->size() < min || node_->size() > max) {
    if (min == max) fail(fmt::format("expected exactly {} elements, found {}", min, node_->size()));
    fail(fmt::format("expected between {} and {} elements, found {}", min, max, node_->size()));
  }
}

InputError json_syntax_error(std::string file, std::string_view text, std::size_t byte, const std::string& what) {
  // `what` repeats nlohmann's own prefix; keep the part after "parse error".
  const auto pos = what.find("syntax error");
  const std::string detail = pos == std::string::npos ? what : what.substr(pos);
  const auto [line, column] = line_and_column(text, byte == 0 ? 0 : byte - 1);
  return InputError(std::move(file), "$", fmt::format("JSON syntax error at line {}, column {}: {}", line, column, detail));
}

std::string read_text_file(const std::string& file_path) {
  // An input that is a folder opens and reads as empty: say what it is instead of "syntax error".
  std::error_code ec;
  if (std::filesystem::is_directory(file_path, ec)) throw InputError(file_path, "$", "is a directory, not a file");
  std::ifstream in(file_path, std::ios::binary);
  if (!in) throw InputError(file_path, "$", "cannot open the file");
  // A regular file in one read of its size (a stream copy would pass over a large trace twice);
  // anything else (a pipe, /dev/stdin) through the stream buffer.
  const auto size = std::filesystem::is_regular_file(file_path, ec) ? std::filesystem::file_size(file_path, ec) : 0;
  if (!ec && size > 0) {
    std::string text(static_cast<std::size_t>(size), '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    if (in.bad() || static_cast<std::size_t>(in.gcount()) != text.size())
      throw InputError(file_path, "$", "cannot read the file");
    return text;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InputError(file_path, "$", "cannot read the file");
  return ss.str();
}

JsonDocument JsonDocument::load(const std::string& file_path) {
  return parse(read_text_file(file_path), file_path);
}

JsonDocument JsonDocument::parse(std::string_view text, std::string file_label) {
  nlohmann::json parsed;
  try {
    CheckingSax sax(parsed);
    nlohmann::json::sax_parse(text, &sax);
    if (!sax.error().empty()) throw InputError(file_label, sax.error_path(), sax.error());
  } catch (const nlohmann::json::parse_error& e) {
    throw json_syntax_error(std::move(file_label), text, e.byte, e.what());
  }
  return from_json(std::move(parsed), std::move(file_label));
}

JsonDocument JsonDocument::from_json(nlohmann::json value, std::string file_label) {
  JsonDocument d;
  d.source_ = std::make_shared<const JsonSource>(JsonSource{std::move(value), std::move(file_label)});
  return d;
}

JsonObject JsonDocument::root() const { return JsonValue(source_, &source_->doc, "$").as_object(); }

}  // namespace fusesim
