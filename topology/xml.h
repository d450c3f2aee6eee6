#pragma once

// A small, strict reader for the element/attribute XML that topology files use (NCCL topology and
// graph dumps). It builds a tree of elements; it is not a general XML processor.
//
// Accepted: an optional `<?xml ...?>` declaration and other processing instructions, comments,
// a `<!DOCTYPE name ...>` without an internal subset, elements with single- or double-quoted
// attributes, character data, CDATA sections, the five predefined entities and numeric character
// references (`&#10;`, `&#x0a;`, encoded as UTF-8).
// Rejected with InvalidArgument naming the line: anything not well-formed (mismatched or unclosed
// tags, duplicate attributes, `<` or a bare `&` in values, unknown entities, text or a second
// element after the root, an internal DTD subset), and nesting deeper than kMaxXmlDepth.

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace baton::topology {

inline constexpr int kMaxXmlDepth = 256;

struct XmlElement {
  std::string name;
  std::vector<std::pair<std::string, std::string>> attributes;  // in document order, decoded
  std::vector<XmlElement> children;                             // elements only, in order
  std::string text;  // decoded character data directly inside this element, concatenated
  int line = 0;      // 1-based line of the start tag

  // The attribute's decoded value, or nullptr when absent.
  const std::string* Attribute(absl::string_view key) const;
  // Children named `child_name`, in order.
  std::vector<const XmlElement*> Children(absl::string_view child_name) const;
};

// Parses a whole document and returns its root element.
absl::StatusOr<XmlElement> ParseXml(absl::string_view document);

}  // namespace baton::topology
