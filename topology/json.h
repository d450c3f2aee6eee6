#pragma once

// A minimal JSON value with a strict reader (RFC 8259) and a writer, enough for the topology's
// dump format. Numbers keep their literal text, so 64-bit integers and doubles round-trip exactly
// (doubles are written in the shortest form that reads back to the same value).
//
// The reader rejects with InvalidArgument (naming line and column): trailing commas, comments,
// leading zeros, NaN/Infinity, unescaped control characters, invalid escapes or lone surrogates,
// duplicate object keys, anything after the value, and nesting deeper than kMaxJsonDepth.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::topology {

inline constexpr int kMaxJsonDepth = 256;

class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  using Array = std::vector<JsonValue>;
  using Object = std::vector<std::pair<std::string, JsonValue>>;  // document order, unique keys

  JsonValue() = default;  // null
  static JsonValue Bool(bool value);
  static JsonValue Int(int64_t value);
  static JsonValue Uint(uint64_t value);
  // Non-finite values have no JSON form and become null.
  static JsonValue Double(double value);
  static JsonValue String(std::string value);
  static JsonValue MakeArray(Array items = {});
  static JsonValue MakeObject(Object members = {});
  // A number from its literal text; the caller guarantees it matches the JSON number grammar.
  static JsonValue NumberLiteral(std::string literal);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }

  // Typed reads: InvalidArgument when the kind differs or the number does not fit.
  absl::StatusOr<bool> GetBool() const;
  absl::StatusOr<int64_t> GetInt() const;  // integral literals only
  absl::StatusOr<uint64_t> GetUint() const;
  absl::StatusOr<double> GetDouble() const;
  absl::StatusOr<std::string> GetString() const;

  // Valid only for the matching kind (checked with assert-free fallbacks: empty for other kinds).
  const Array& array() const { return array_; }
  const Object& object() const { return object_; }
  const std::string& number_literal() const { return text_; }

  // Object member by key, or nullptr (also for non-objects).
  const JsonValue* Find(absl::string_view key) const;
  // Appends to an array / adds a member to an object (the caller keeps keys unique).
  void Append(JsonValue item) { array_.push_back(std::move(item)); }
  void Add(std::string key, JsonValue value) {
    object_.emplace_back(std::move(key), std::move(value));
  }

  bool operator==(const JsonValue& other) const = default;

 private:
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  std::string text_;  // string contents, or the number's literal
  Array array_;
  Object object_;
};

// Parses one complete JSON document.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text);

// Writes `value`. With `indent` > 0 objects and arrays of non-scalars are spread over lines;
// arrays of scalars stay on one line. Output ends without a newline.
std::string WriteJson(const JsonValue& value, int indent = 2);

}  // namespace baton::topology
