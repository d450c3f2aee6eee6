#include "topology/xml.h"

#include <string>

#include "gtest/gtest.h"

namespace baton::topology {
namespace {

TEST(XmlTest, ParsesElementsAttributesAndText) {
  absl::StatusOr<XmlElement> root = ParseXml(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
      "<!-- leading comment -->\n"
      "<system version=\"1\">\n"
      "  <cpu numaid='0' affinity=\"ff\">\n"
      "    <pci busid=\"0000:01:00.0\"/> <!-- inner -->\n"
      "    text &amp; more &#65;&#x42;<![CDATA[<raw>]]>\n"
      "  </cpu>\n"
      "  <cpu numaid=\"1\"></cpu>\n"
      "</system>\n"
      "<!-- trailing comment -->\n");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->name, "system");
  ASSERT_NE(root->Attribute("version"), nullptr);
  EXPECT_EQ(*root->Attribute("version"), "1");
  EXPECT_EQ(root->Attribute("missing"), nullptr);
  ASSERT_EQ(root->children.size(), 2u);
  const XmlElement& cpu = root->children[0];
  EXPECT_EQ(cpu.line, 5);
  EXPECT_EQ(*cpu.Attribute("numaid"), "0");
  EXPECT_EQ(*cpu.Attribute("affinity"), "ff");
  ASSERT_EQ(cpu.Children("pci").size(), 1u);
  EXPECT_EQ(*cpu.Children("pci")[0]->Attribute("busid"), "0000:01:00.0");
  EXPECT_NE(cpu.text.find("text & more AB<raw>"), std::string::npos) << cpu.text;
  EXPECT_EQ(root->Children("cpu").size(), 2u);
  EXPECT_EQ(*root->children[1].Attribute("numaid"), "1");
}

TEST(XmlTest, DecodesEntitiesInAttributesAndNormalisesWhitespace) {
  absl::StatusOr<XmlElement> root =
      ParseXml("<a v=\"&lt;x&gt; &quot;q&quot; &apos;s&apos; &#233;\" w=\"a\tb\nc\"/>");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(*root->Attribute("v"), "<x> \"q\" 's' \xC3\xA9");
  EXPECT_EQ(*root->Attribute("w"), "a b c");
  EXPECT_TRUE(root->children.empty());
}

TEST(XmlTest, RejectsMalformedDocumentsNamingTheLine) {
  struct Case {
    const char* doc;
    const char* message;
  };
  const Case cases[] = {
      {"", "expected the root element"},
      {"<a>", "never closed"},
      {"<a></b>", "closes <a>"},
      {"<a>\n<b>\n</a>", "line 3"},
      {"<a x=\"1\" x=\"2\"/>", "duplicate attribute"},
      {"<a x=1/>", "quoted value"},
      {"<a x=\"<\"/>", "'<' in an attribute"},
      {"<a>&nbsp;</a>", "unknown entity"},
      {"<a>AT&T</a>", "bare '&'"},
      {"<a>&#0;</a>", "bad character reference"},
      {"<a/><b/>", "after the root"},
      {"<a/>text", "after the root"},
      {"<a x=\"1\"y=\"2\"/>", "whitespace between attributes"},
      {"<!DOCTYPE a [<!ENTITY e \"x\">]><a/>", "internal subset"},
      {"<a><!-- x -- y --></a>", "'--' inside a comment"},
      {"<a><!-- open", "unterminated comment"},
      {"<a><![CDATA[x</a>", "unterminated CDATA"},
      {"<a>]]></a>", "']]>'"},
      {"<1a/>", "expected a name"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<XmlElement> root = ParseXml(c.doc);
    ASSERT_FALSE(root.ok()) << c.doc;
    EXPECT_EQ(root.status().code(), absl::StatusCode::kInvalidArgument) << c.doc;
    EXPECT_NE(root.status().message().find(c.message), std::string::npos)
        << c.doc << " -> " << root.status();
  }
}

TEST(XmlTest, LimitsNestingDepth) {
  std::string deep;
  for (int i = 0; i <= kMaxXmlDepth; ++i) deep += "<a>";
  for (int i = 0; i <= kMaxXmlDepth; ++i) deep += "</a>";
  absl::StatusOr<XmlElement> root = ParseXml(deep);
  ASSERT_FALSE(root.ok());
  EXPECT_NE(root.status().message().find("nested too deeply"), std::string::npos);

  std::string ok;
  for (int i = 0; i < kMaxXmlDepth; ++i) ok += "<a>";
  for (int i = 0; i < kMaxXmlDepth; ++i) ok += "</a>";
  EXPECT_TRUE(ParseXml(ok).ok());
}

}  // namespace
}  // namespace baton::topology
