#include "topology/json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace baton::topology {

JsonValue JsonValue::Bool(bool value) {
  JsonValue v;
  v.kind_ = Kind::kBool;
  v.bool_ = value;
  return v;
}

JsonValue JsonValue::Int(int64_t value) { return NumberLiteral(std::to_string(value)); }

JsonValue JsonValue::Uint(uint64_t value) { return NumberLiteral(std::to_string(value)); }

JsonValue JsonValue::Double(double value) {
  if (!std::isfinite(value)) return JsonValue();
  char buffer[64];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string literal(buffer, result.ptr);
  // to_chars may pick exponent notation without a fraction ("1e+20"), which is valid JSON.
  return NumberLiteral(std::move(literal));
}

JsonValue JsonValue::String(std::string value) {
  JsonValue v;
  v.kind_ = Kind::kString;
  v.text_ = std::move(value);
  return v;
}

JsonValue JsonValue::MakeArray(Array items) {
  JsonValue v;
  v.kind_ = Kind::kArray;
  v.array_ = std::move(items);
  return v;
}

JsonValue JsonValue::MakeObject(Object members) {
  JsonValue v;
  v.kind_ = Kind::kObject;
  v.object_ = std::move(members);
  return v;
}

JsonValue JsonValue::NumberLiteral(std::string literal) {
  JsonValue v;
  v.kind_ = Kind::kNumber;
  v.text_ = std::move(literal);
  return v;
}

namespace {

const char* KindName(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kNull:
      return "null";
    case JsonValue::Kind::kBool:
      return "a boolean";
    case JsonValue::Kind::kNumber:
      return "a number";
    case JsonValue::Kind::kString:
      return "a string";
    case JsonValue::Kind::kArray:
      return "an array";
    case JsonValue::Kind::kObject:
      return "an object";
  }
  return "?";
}

absl::Status WrongKind(JsonValue::Kind want, JsonValue::Kind got) {
  return absl::InvalidArgumentError(
      absl::StrCat("expected ", KindName(want), ", found ", KindName(got)));
}

template <typename T>
absl::StatusOr<T> ParseIntegral(const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  const std::from_chars_result result = std::from_chars(text.data(), end, value);
  if (result.ec != std::errc() || result.ptr != end) {
    return absl::InvalidArgumentError(absl::StrCat("number ", text, " is not an integer in range"));
  }
  return value;
}

}  // namespace

absl::StatusOr<bool> JsonValue::GetBool() const {
  if (kind_ != Kind::kBool) return WrongKind(Kind::kBool, kind_);
  return bool_;
}

absl::StatusOr<int64_t> JsonValue::GetInt() const {
  if (kind_ != Kind::kNumber) return WrongKind(Kind::kNumber, kind_);
  return ParseIntegral<int64_t>(text_);
}

absl::StatusOr<uint64_t> JsonValue::GetUint() const {
  if (kind_ != Kind::kNumber) return WrongKind(Kind::kNumber, kind_);
  return ParseIntegral<uint64_t>(text_);
}

absl::StatusOr<double> JsonValue::GetDouble() const {
  if (kind_ != Kind::kNumber) return WrongKind(Kind::kNumber, kind_);
  double value = 0;
  const char* end = text_.data() + text_.size();
  const std::from_chars_result result = std::from_chars(text_.data(), end, value);
  if (result.ec != std::errc() || result.ptr != end) {
    return absl::InvalidArgumentError(absl::StrCat("number ", text_, " is out of range"));
  }
  return value;
}

absl::StatusOr<std::string> JsonValue::GetString() const {
  if (kind_ != Kind::kString) return WrongKind(Kind::kString, kind_);
  return text_;
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const auto& [name, value] : object_) {
    if (name == key) return &value;
  }
  return nullptr;
}

namespace {

class JsonParser {
 public:
  explicit JsonParser(absl::string_view text) : text_(text) {}

  absl::StatusOr<JsonValue> Parse() {
    SkipSpace();
    absl::StatusOr<JsonValue> value = ParseValue(0);
    if (!value.ok()) return value;
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text after the value");
    return value;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("JSON line ", line, " column ", pos_ - line_start + 1, ": ", what));
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  void SkipSpace() {
    while (!AtEnd() && (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' ||
                        text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Consume(absl::string_view literal) {
    if (text_.substr(pos_, literal.size()) != literal) return false;
    pos_ += literal.size();
    return true;
  }

  absl::StatusOr<JsonValue> ParseValue(int depth) {
    if (depth > kMaxJsonDepth) return Error("nested too deeply");
    if (AtEnd()) return Error("unexpected end of input");
    const char c = text_[pos_];
    if (c == '{') return ParseObject(depth);
    if (c == '[') return ParseArray(depth);
    if (c == '"') {
      absl::StatusOr<std::string> s = ParseString();
      if (!s.ok()) return s.status();
      return JsonValue::String(*std::move(s));
    }
    if (Consume("true")) return JsonValue::Bool(true);
    if (Consume("false")) return JsonValue::Bool(false);
    if (Consume("null")) return JsonValue();
    if (c == '-' || absl::ascii_isdigit(static_cast<unsigned char>(c))) return ParseNumber();
    return Error(absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  absl::StatusOr<JsonValue> ParseNumber() {
    const size_t start = pos_;
    auto digit = [&] {
      return !AtEnd() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]));
    };
    if (text_[pos_] == '-') ++pos_;
    if (!digit()) return Error("expected a digit");
    if (text_[pos_] == '0') {
      ++pos_;
      if (digit()) return Error("leading zero in a number");
    } else {
      while (digit()) ++pos_;
    }
    if (!AtEnd() && text_[pos_] == '.') {
      ++pos_;
      if (!digit()) return Error("expected a digit after '.'");
      while (digit()) ++pos_;
    }
    if (!AtEnd() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      ++pos_;
      if (!AtEnd() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digit()) return Error("expected a digit in the exponent");
      while (digit()) ++pos_;
    }
    // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
    return JsonValue::NumberLiteral(std::string(text_.substr(start, pos_ - start)));
  }

  absl::StatusOr<uint32_t> ParseHex4() {
    if (pos_ + 4 > text_.size()) return Error("truncated \\u escape");
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      int digit;
      if (c >= '0' && c <= '9') {
        digit = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        digit = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        digit = c - 'A' + 10;
      } else {
        return Error("bad hex digit in \\u escape");
      }
      value = value * 16 + static_cast<uint32_t>(digit);
    }
    return value;
  }

  absl::StatusOr<std::string> ParseString() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (AtEnd()) return Error("unterminated string");
      const char c = text_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) return Error("control character in a string");
      if (c != '\\') {
        out.push_back(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (AtEnd()) return Error("unterminated escape");
      const char e = text_[pos_++];
      switch (e) {
        case '"':
          out.push_back('"');
          break;
        case '\\':
          out.push_back('\\');
          break;
        case '/':
          out.push_back('/');
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          absl::StatusOr<uint32_t> unit = ParseHex4();
          if (!unit.ok()) return unit.status();
          uint32_t code = *unit;
          if (code >= 0xDC00 && code <= 0xDFFF) return Error("lone low surrogate");
          if (code >= 0xD800 && code <= 0xDBFF) {
            if (!Consume("\\u")) return Error("lone high surrogate");
            absl::StatusOr<uint32_t> low = ParseHex4();
            if (!low.ok()) return low.status();
            if (*low < 0xDC00 || *low > 0xDFFF) return Error("bad surrogate pair");
            code = 0x10000 + ((code - 0xD800) << 10) + (*low - 0xDC00);
          }
          AppendUtf8(code, &out);
          break;
        }
        default:
          return Error(absl::StrCat("bad escape '\\", std::string(1, e), "'"));
      }
    }
  }

  static void AppendUtf8(uint32_t code, std::string* out) {
    if (code < 0x80) {
      out->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (code >> 6)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (code >> 12)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (code >> 18)));
      out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  absl::StatusOr<JsonValue> ParseArray(int depth) {
    ++pos_;  // '['
    JsonValue array = JsonValue::MakeArray();
    SkipSpace();
    if (Consume("]")) return array;
    while (true) {
      SkipSpace();
      absl::StatusOr<JsonValue> item = ParseValue(depth + 1);
      if (!item.ok()) return item;
      array.Append(*std::move(item));
      SkipSpace();
      if (Consume("]")) return array;
      if (!Consume(",")) return Error("expected ',' or ']'");
    }
  }

  absl::StatusOr<JsonValue> ParseObject(int depth) {
    ++pos_;  // '{'
    JsonValue object = JsonValue::MakeObject();
    SkipSpace();
    if (Consume("}")) return object;
    while (true) {
      SkipSpace();
      if (AtEnd() || text_[pos_] != '"') return Error("expected a string key");
      absl::StatusOr<std::string> key = ParseString();
      if (!key.ok()) return key.status();
      if (object.Find(*key) != nullptr) return Error(absl::StrCat("duplicate key \"", *key, "\""));
      SkipSpace();
      if (!Consume(":")) return Error("expected ':'");
      SkipSpace();
      absl::StatusOr<JsonValue> value = ParseValue(depth + 1);
      if (!value.ok()) return value;
      object.Add(*std::move(key), *std::move(value));
      SkipSpace();
      if (Consume("}")) return object;
      if (!Consume(",")) return Error("expected ',' or '}'");
    }
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

void WriteString(const std::string& s, std::string* out) {
  out->push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"':
        out->append("\\\"");
        break;
      case '\\':
        out->append("\\\\");
        break;
      case '\n':
        out->append("\\n");
        break;
      case '\r':
        out->append("\\r");
        break;
      case '\t':
        out->append("\\t");
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escape[8];
          std::snprintf(escape, sizeof(escape), "\\u%04x", static_cast<unsigned char>(c));
          out->append(escape);
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

bool IsScalar(const JsonValue& v) {
  return v.kind() != JsonValue::Kind::kArray && v.kind() != JsonValue::Kind::kObject;
}

void Write(const JsonValue& v, int indent, int level, std::string* out) {
  const auto newline = [&](int at_level) {
    if (indent <= 0) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(indent) * static_cast<size_t>(at_level), ' ');
  };
  switch (v.kind()) {
    case JsonValue::Kind::kNull:
      out->append("null");
      return;
    case JsonValue::Kind::kBool:
      out->append(*v.GetBool() ? "true" : "false");
      return;
    case JsonValue::Kind::kNumber:
      out->append(v.number_literal());
      return;
    case JsonValue::Kind::kString:
      WriteString(*v.GetString(), out);
      return;
    case JsonValue::Kind::kArray: {
      bool all_scalars = true;
      for (const JsonValue& item : v.array()) all_scalars = all_scalars && IsScalar(item);
      out->push_back('[');
      for (size_t i = 0; i < v.array().size(); ++i) {
        if (i > 0) out->append(all_scalars && indent > 0 ? ", " : ",");
        if (!all_scalars) newline(level + 1);
        Write(v.array()[i], indent, level + 1, out);
      }
      if (!all_scalars && !v.array().empty()) newline(level);
      out->push_back(']');
      return;
    }
    case JsonValue::Kind::kObject: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, member] : v.object()) {
        if (!first) out->push_back(',');
        first = false;
        newline(level + 1);
        WriteString(key, out);
        out->append(indent > 0 ? ": " : ":");
        Write(member, indent, level + 1, out);
      }
      if (!v.object().empty()) newline(level);
      out->push_back('}');
      return;
    }
  }
}

}  // namespace

absl::StatusOr<JsonValue> ParseJson(absl::string_view text) { return JsonParser(text).Parse(); }

std::string WriteJson(const JsonValue& value, int indent) {
  std::string out;
  Write(value, indent, 0, &out);
  return out;
}

}  // namespace baton::topology
