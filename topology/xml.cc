#include "topology/xml.h"

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace baton::topology {

const std::string* XmlElement::Attribute(absl::string_view key) const {
  for (const auto& [name, value] : attributes) {
    if (name == key) return &value;
  }
  return nullptr;
}

std::vector<const XmlElement*> XmlElement::Children(absl::string_view child_name) const {
  std::vector<const XmlElement*> out;
  for (const XmlElement& child : children) {
    if (child.name == child_name) out.push_back(&child);
  }
  return out;
}

namespace {

bool IsNameStart(char c) {
  return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool IsNameChar(char c) {
  return IsNameStart(c) || absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '-' ||
         c == '.';
}
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

void AppendUtf8(uint32_t code_point, std::string* out) {
  if (code_point < 0x80) {
    out->push_back(static_cast<char>(code_point));
  } else if (code_point < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else if (code_point < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (code_point >> 12)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (code_point >> 18)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((code_point >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
}

// Recursive-descent parser over the whole document; `pos_` only moves forward.
class Parser {
 public:
  explicit Parser(absl::string_view doc) : doc_(doc) {}

  absl::StatusOr<XmlElement> ParseDocument() {
    if (absl::StartsWith(doc_, "\xEF\xBB\xBF")) pos_ = 3;  // UTF-8 byte order mark
    absl::Status status = SkipMisc(/*allow_doctype=*/true);
    if (!status.ok()) return status;
    if (AtEnd() || Peek() != '<') return Error("expected the root element");
    XmlElement root;
    status = ParseElement(&root, 1);
    if (!status.ok()) return status;
    status = SkipMisc(/*allow_doctype=*/false);
    if (!status.ok()) return status;
    if (!AtEnd()) return Error("content after the root element");
    return root;
  }

 private:
  bool AtEnd() const { return pos_ >= doc_.size(); }
  char Peek() const { return doc_[pos_]; }
  bool LookingAt(absl::string_view s) const { return doc_.substr(pos_, s.size()) == s; }

  void Advance(size_t n) {
    for (size_t i = 0; i < n && pos_ < doc_.size(); ++i, ++pos_) {
      if (doc_[pos_] == '\n') ++line_;
    }
  }
  void SkipSpace() {
    while (!AtEnd() && IsSpace(Peek())) Advance(1);
  }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("XML line ", line_, ": ", what));
  }

  // Skips until `terminator` (consumed). Error if the document ends first.
  absl::Status SkipPast(absl::string_view terminator, absl::string_view construct) {
    const size_t end = doc_.find(terminator, pos_);
    if (end == absl::string_view::npos) return Error(absl::StrCat("unterminated ", construct));
    Advance(end + terminator.size() - pos_);
    return absl::OkStatus();
  }

  absl::Status SkipComment() {
    Advance(4);  // "<!--"
    const size_t end = doc_.find("--", pos_);
    if (end == absl::string_view::npos) return Error("unterminated comment");
    if (doc_.substr(end, 3) != "-->") return Error("'--' inside a comment");
    Advance(end + 3 - pos_);
    return absl::OkStatus();
  }

  // Whitespace, comments, processing instructions and (before the root) one DOCTYPE.
  absl::Status SkipMisc(bool allow_doctype) {
    while (true) {
      SkipSpace();
      if (LookingAt("<!--")) {
        absl::Status status = SkipComment();
        if (!status.ok()) return status;
      } else if (LookingAt("<?")) {
        absl::Status status = SkipPast("?>", "processing instruction");
        if (!status.ok()) return status;
      } else if (LookingAt("<!DOCTYPE")) {
        if (!allow_doctype) return Error("DOCTYPE after the root element");
        allow_doctype = false;
        const size_t end = doc_.find('>', pos_);
        if (end == absl::string_view::npos) return Error("unterminated DOCTYPE");
        if (doc_.substr(pos_, end - pos_).find('[') != absl::string_view::npos) {
          return Error("DOCTYPE with an internal subset is not supported");
        }
        Advance(end + 1 - pos_);
      } else {
        return absl::OkStatus();
      }
    }
  }

  absl::StatusOr<std::string> ParseName() {
    if (AtEnd() || !IsNameStart(Peek())) return Error("expected a name");
    const size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) Advance(1);
    // NOLINTNEXTLINE(google-readability-casting): T(x) to a class type
    return std::string(doc_.substr(start, pos_ - start));
  }

  // Decodes an entity or character reference at `pos_` (which is at '&') into `out`.
  absl::Status ParseReference(std::string* out) {
    const size_t end = doc_.find(';', pos_);
    if (end == absl::string_view::npos || end - pos_ > 12) return Error("bare '&'");
    const absl::string_view ref = doc_.substr(pos_ + 1, end - pos_ - 1);
    if (ref == "lt") {
      out->push_back('<');
    } else if (ref == "gt") {
      out->push_back('>');
    } else if (ref == "amp") {
      out->push_back('&');
    } else if (ref == "quot") {
      out->push_back('"');
    } else if (ref == "apos") {
      out->push_back('\'');
    } else if (absl::StartsWith(ref, "#")) {
      uint32_t code = 0;
      const bool hex = absl::StartsWith(ref, "#x");
      const absl::string_view digits = ref.substr(hex ? 2 : 1);
      bool ok = !digits.empty();
      for (char c : digits) {
        const int value = absl::ascii_isdigit(static_cast<unsigned char>(c)) ? c - '0'
                          : hex && absl::ascii_isxdigit(static_cast<unsigned char>(c))
                              ? absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10
                              : -1;
        if (value < 0) ok = false;
        code = code * (hex ? 16 : 10) + static_cast<uint32_t>(value < 0 ? 0 : value);
        if (code > 0x10FFFF) ok = false;
      }
      if (!ok || code == 0 || (code >= 0xD800 && code <= 0xDFFF)) {
        return Error(absl::StrCat("bad character reference '&", ref, ";'"));
      }
      AppendUtf8(code, out);
    } else {
      return Error(absl::StrCat("unknown entity '&", ref, ";'"));
    }
    Advance(end + 1 - pos_);
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> ParseAttributeValue() {
    if (AtEnd() || (Peek() != '"' && Peek() != '\'')) return Error("expected a quoted value");
    const char quote = Peek();
    Advance(1);
    std::string value;
    while (true) {
      if (AtEnd()) return Error("unterminated attribute value");
      const char c = Peek();
      if (c == quote) break;
      if (c == '<') return Error("'<' in an attribute value");
      if (c == '&') {
        absl::Status status = ParseReference(&value);
        if (!status.ok()) return status;
        continue;
      }
      // Attribute-value normalisation: literal whitespace characters become spaces.
      value.push_back(c == '\t' || c == '\n' || c == '\r' ? ' ' : c);
      Advance(1);
    }
    Advance(1);
    return value;
  }

  absl::Status ParseElement(XmlElement* element, int depth) {
    if (depth > kMaxXmlDepth) return Error("elements nested too deeply");
    element->line = line_;
    Advance(1);  // '<'
    absl::StatusOr<std::string> name = ParseName();
    if (!name.ok()) return name.status();
    element->name = *std::move(name);
    while (true) {
      const bool had_space = !AtEnd() && IsSpace(Peek());
      SkipSpace();
      if (AtEnd()) return Error(absl::StrCat("unterminated start tag <", element->name, ">"));
      if (LookingAt("/>")) {
        Advance(2);
        return absl::OkStatus();
      }
      if (Peek() == '>') {
        Advance(1);
        break;
      }
      if (!had_space) return Error("expected whitespace between attributes");
      absl::StatusOr<std::string> key = ParseName();
      if (!key.ok()) return key.status();
      SkipSpace();
      if (AtEnd() || Peek() != '=') return Error(absl::StrCat("expected '=' after ", *key));
      Advance(1);
      SkipSpace();
      absl::StatusOr<std::string> value = ParseAttributeValue();
      if (!value.ok()) return value.status();
      if (element->Attribute(*key) != nullptr) {
        return Error(absl::StrCat("duplicate attribute '", *key, "'"));
      }
      element->attributes.emplace_back(*std::move(key), *std::move(value));
    }
    return ParseContent(element, depth);
  }

  absl::Status ParseContent(XmlElement* element, int depth) {
    while (true) {
      if (AtEnd()) return Error(absl::StrCat("<", element->name, "> is never closed"));
      if (LookingAt("</")) {
        Advance(2);
        absl::StatusOr<std::string> name = ParseName();
        if (!name.ok()) return name.status();
        if (*name != element->name) {
          return Error(absl::StrCat("</", *name, "> closes <", element->name, "> (line ",
                                    element->line, ")"));
        }
        SkipSpace();
        if (AtEnd() || Peek() != '>') return Error("expected '>' in an end tag");
        Advance(1);
        return absl::OkStatus();
      }
      absl::Status status;
      if (LookingAt("<!--")) {
        status = SkipComment();
      } else if (LookingAt("<![CDATA[")) {
        Advance(9);
        const size_t end = doc_.find("]]>", pos_);
        if (end == absl::string_view::npos) return Error("unterminated CDATA section");
        const absl::string_view cdata = doc_.substr(pos_, end - pos_);
        element->text.append(cdata.data(), cdata.size());
        Advance(end + 3 - pos_);
      } else if (LookingAt("<?")) {
        status = SkipPast("?>", "processing instruction");
      } else if (LookingAt("<!")) {
        return Error("unexpected markup declaration");
      } else if (Peek() == '<') {
        element->children.emplace_back();
        status = ParseElement(&element->children.back(), depth + 1);
      } else if (Peek() == '&') {
        status = ParseReference(&element->text);
      } else {
        if (LookingAt("]]>")) return Error("']]>' in character data");
        element->text.push_back(Peek());
        Advance(1);
      }
      if (!status.ok()) return status;
    }
  }

  absl::string_view doc_;
  size_t pos_ = 0;
  int line_ = 1;
};

}  // namespace

absl::StatusOr<XmlElement> ParseXml(absl::string_view document) {
  return Parser(document).ParseDocument();
}

}  // namespace baton::topology
