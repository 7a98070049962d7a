#pragma once
// Strict reading of JSON configuration. Every accessor knows the file and the JSON path it reads, so
// every error names both; finish() rejects keys nobody asked for (a typo is an error, not a default).
//
//   auto doc = JsonDocument::load("topologies/dgx-h100.json");
//   JsonObject root = doc.root();
//   int n = root.integer("nodes", 1, 100000);
//   JsonObject link = root.object("link");
//   double bw = link.sourced("bandwidth_bytes_per_s").positive();   // {"value": .., "source": ".."}
//   link.finish(); root.finish();
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fusesim {

class JsonObject;
class JsonArray;

// A number that came from outside the project, with the citation it carries in the file.
struct SourcedValue {
  double value = 0.0;
  std::string source;
};

// A value at a known place: the file and the JSON path. Cheap to copy (shares the document).
// A parsed document and the label its errors name, shared by every value read from it.
struct JsonSource {
  nlohmann::json doc;
  std::string file;
};

class JsonValue {
 public:
  JsonValue(std::shared_ptr<const JsonSource> source, const nlohmann::json* node, std::string path);

  const std::string& file() const { return source_->file; }
  const std::string& path() const { return path_; }
  const nlohmann::json& raw() const { return *node_; }

  [[noreturn]] void fail(const std::string& message) const;

  bool is_null() const { return node_->is_null(); }
  bool is_object() const { return node_->is_object(); }
  bool is_array() const { return node_->is_array(); }
  bool is_string() const { return node_->is_string(); }
  bool is_number() const { return node_->is_number(); }

  JsonObject as_object() const;
  JsonArray as_array() const;
  std::string as_string() const;                 // non-empty
  bool as_bool() const;
  double as_number() const;                      // finite
  double as_number(double min, double max) const;  // finite and within [min, max]
  std::int64_t as_integer(std::int64_t min, std::int64_t max) const;
  // {"value": <number>, "source": "<non-empty citation>"}; `min`/`max` bound the value.
  SourcedValue as_sourced(double min, double max) const;

 protected:
  std::shared_ptr<const JsonSource> source_;
  const nlohmann::json* node_;
  std::string path_;
};

class JsonObject : public JsonValue {
 public:
  using JsonValue::JsonValue;
  JsonObject(const JsonObject&) = default;
  JsonObject& operator=(const JsonObject&) = default;

  bool has(std::string_view key) const;
  // Marks the key as read. Throws "missing key" when absent.
  JsonValue at(std::string_view key) const;
  std::optional<JsonValue> find(std::string_view key) const;  // marks as read when present

  JsonObject object(std::string_view key) const { return at(key).as_object(); }
  JsonArray array(std::string_view key) const;
  std::string string(std::string_view key) const { return at(key).as_string(); }
  bool boolean(std::string_view key) const { return at(key).as_bool(); }
  double number(std::string_view key, double min, double max) const { return at(key).as_number(min, max); }
  std::int64_t integer(std::string_view key, std::int64_t min, std::int64_t max) const {
    return at(key).as_integer(min, max);
  }
  SourcedValue sourced(std::string_view key, double min, double max) const {
    return at(key).as_sourced(min, max);
  }

  std::string string_or(std::string_view key, std::string fallback) const;
  bool boolean_or(std::string_view key, bool fallback) const;
  double number_or(std::string_view key, double min, double max, double fallback) const;
  std::int64_t integer_or(std::string_view key, std::int64_t min, std::int64_t max, std::int64_t fallback) const;

  // One of `allowed`; the error lists them.
  std::string choice(std::string_view key, const std::vector<std::string>& allowed) const;
  std::string choice_or(std::string_view key, const std::vector<std::string>& allowed, std::string fallback) const;

  std::vector<std::string> keys() const;  // in document order is not kept by nlohmann: sorted

  // Rejects every key that no accessor read ("unknown key 'bandwith'").
  void finish() const;

 private:
  // The keys read, as the addresses of the document's own key strings (a node's keys do not move):
  // shared by the copies of this object, so that a key read through any copy counts.
  std::shared_ptr<std::vector<const std::string*>> read_keys_ = std::make_shared<std::vector<const std::string*>>();
};

class JsonArray : public JsonValue {
 public:
  using JsonValue::JsonValue;
  std::size_t size() const { return node_->size(); }
  JsonValue at(std::size_t index) const;
  // Fails unless min <= size <= max.
  void require_size(std::size_t min, std::size_t max) const;
};

// Owns a parsed document. Syntax errors become InputError at "$" with line and column.
class JsonDocument {
 public:
  static JsonDocument load(const std::string& file_path);
  static JsonDocument parse(std::string_view text, std::string file_label);
  static JsonDocument from_json(nlohmann::json value, std::string file_label);
  JsonObject root() const;  // fails unless the document is an object
  const std::string& file() const { return source_->file; }
  const nlohmann::json& raw() const { return source_->doc; }

 private:
  std::shared_ptr<const JsonSource> source_;
};

// Reads a whole file; InputError at "$" when it cannot be opened.
std::string read_text_file(const std::string& file_path);

}  // namespace fusesim
