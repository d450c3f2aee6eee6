#include "topology/json.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace baton::topology {
namespace {

TEST(JsonTest, ParsesEveryKind) {
  absl::StatusOr<JsonValue> v = ParseJson(
      " {\"n\": null, \"t\": true, \"f\": false, \"i\": -42, \"d\": 2.5e3,"
      " \"s\": \"a\\\"b\\\\c\\/\\n\\u00e9\\ud83d\\ude00\", \"a\": [1, [], {}], \"o\": {\"k\": "
      "1}} ");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_TRUE(v->Find("n")->is_null());
  EXPECT_TRUE(*v->Find("t")->GetBool());
  EXPECT_FALSE(*v->Find("f")->GetBool());
  EXPECT_EQ(*v->Find("i")->GetInt(), -42);
  EXPECT_EQ(*v->Find("d")->GetDouble(), 2500.0);
  EXPECT_FALSE(v->Find("d")->GetInt().ok());  // not an integral literal
  EXPECT_EQ(*v->Find("s")->GetString(), "a\"b\\c/\n\xC3\xA9\xF0\x9F\x98\x80");
  ASSERT_EQ(v->Find("a")->array().size(), 3u);
  EXPECT_EQ(v->Find("a")->array()[1].kind(), JsonValue::Kind::kArray);
  EXPECT_EQ(*v->Find("o")->Find("k")->GetInt(), 1);
  EXPECT_EQ(v->Find("absent"), nullptr);
  EXPECT_FALSE(v->Find("s")->GetInt().ok());
}

TEST(JsonTest, NumbersRoundTripExactly) {
  const double values[] = {0.0,    12.0,  370.8,     31.507692, 0.1875,
                           1e-300, 1e300, 20.6 * 18, 1.0 / 3.0, -2.5};
  for (double d : values) {
    const std::string text = WriteJson(JsonValue::Double(d));
    absl::StatusOr<JsonValue> back = ParseJson(text);
    ASSERT_TRUE(back.ok()) << text;
    EXPECT_EQ(*back->GetDouble(), d) << text;
  }
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(*ParseJson(WriteJson(JsonValue::Int(big)))->GetInt(), big);
  const uint64_t guid = 0xe406e40003e1a258ULL;
  EXPECT_EQ(*ParseJson(WriteJson(JsonValue::Uint(guid)))->GetUint(), guid);
  EXPECT_FALSE(ParseJson("18446744073709551616")->GetUint().ok());  // 2^64
  EXPECT_FALSE(ParseJson("-1")->GetUint().ok());
  EXPECT_TRUE(JsonValue::Double(std::numeric_limits<double>::infinity()).is_null());
}

TEST(JsonTest, WriterOutputParsesBackToTheSameValue) {
  JsonValue object = JsonValue::MakeObject();
  object.Add("name", JsonValue::String("tab\there \"quoted\" \x01"));
  JsonValue list = JsonValue::MakeArray();
  list.Append(JsonValue::Int(1));
  list.Append(JsonValue::Bool(false));
  object.Add("list", list);
  JsonValue nested = JsonValue::MakeArray();
  nested.Append(JsonValue::MakeObject());
  object.Add("nested", nested);
  for (int indent : {0, 2}) {
    const std::string text = WriteJson(object, indent);
    absl::StatusOr<JsonValue> back = ParseJson(text);
    ASSERT_TRUE(back.ok()) << text;
    EXPECT_EQ(*back, object) << text;
  }
  EXPECT_EQ(WriteJson(object, 0),
            "{\"name\":\"tab\\there \\\"quoted\\\" \\u0001\",\"list\":[1,false],"
            "\"nested\":[{}]}");
}

TEST(JsonTest, RejectsWhatRfc8259Rejects) {
  const char* bad[] = {
      "",
      "{",
      "[1,]",
      "{\"a\":1,}",
      "{'a':1}",
      "01",
      "1.",
      ".5",
      "1e",
      "-",
      "NaN",
      "Infinity",
      "tru",
      "\"\\x\"",
      "\"\t\"",
      "\"\\ud800\"",
      "\"\\udc00\"",
      "[1] 2",
      "{\"a\" 1}",
      "{1:2}",
      "// c\n1",
      "{\"a\":1,\"a\":2}",
  };
  for (const char* text : bad) {
    absl::StatusOr<JsonValue> v = ParseJson(text);
    EXPECT_FALSE(v.ok()) << "accepted: " << text;
    if (!v.ok()) {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    }
  }
  absl::StatusOr<JsonValue> dup = ParseJson("{\"a\":1,\n \"a\":2}");
  EXPECT_NE(dup.status().message().find("line 2"), std::string::npos) << dup.status();
}

TEST(JsonTest, LimitsNestingDepth) {
  std::string deep(kMaxJsonDepth + 2, '[');
  deep += std::string(kMaxJsonDepth + 2, ']');
  EXPECT_FALSE(ParseJson(deep).ok());
  std::string ok(kMaxJsonDepth, '[');
  ok += std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseJson(ok).ok());
}

}  // namespace
}  // namespace baton::topology
