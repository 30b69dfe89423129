#include "fulcrum/core/json_document.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::string& text) {
  try {
    parse_json_document(text, "f.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// The parser alone keeps the last of two equal keys: the first value (a dataset of a meta index, a setting) would
// be lost without a word.
TEST(JsonDocument, AKeyGivenTwiceInOneObjectIsRefused) {
  EXPECT_EQ(error_of(R"({"a": 1, "a": 2})"), "f.json: key 'a' appears twice in one object");
  EXPECT_EQ(error_of(R"({"x": [{"hidden": 8, "heads": 2, "hidden": 16}]})"),
            "f.json: key 'hidden' appears twice in one object");
  // Objects nested in the one that holds the first: their keys are their own.
  EXPECT_EQ(error_of(R"({"a": {"a": 1}, "b": {"a": 2, "b": [{"a": 3}]}})"), "");
  EXPECT_EQ(parse_json_document(R"({"a": {"a": 1}, "b": {"a": 2}})", "f.json")["b"]["a"], 2);
}

// Copying or writing a value recurses once a level: a file of 200,000 nested arrays overflowed the stack in the
// reader that copied it. Nesting is refused past 256 levels, in either mode, whatever the values are.
TEST(JsonDocument, ValuesNestedPastTheLimitAreRefused) {
  const auto nested = [](int levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  EXPECT_EQ(error_of(nested(256)), "");
  EXPECT_EQ(error_of(nested(257)), "f.json: values nested more than 256 deep");
  EXPECT_EQ(error_of("{\"a\": " + nested(200000) + "}"), "f.json: values nested more than 256 deep");
  EXPECT_THAT([&] { parse_json_document(nested(300), "t.json", RepeatedKeys::kLastWins); },
              ::testing::ThrowsMessage<InputError>(HasSubstr("t.json: values nested more than 256 deep")));
}

TEST(JsonDocument, MalformedTextNamesTheByte) {
  EXPECT_THAT(error_of(R"({"a": )"), HasSubstr("f.json: malformed JSON at byte"));
  // The library's reason, without its exception tag.
  EXPECT_EQ(error_of("[1e400]"), "f.json: malformed JSON (number overflow parsing '1e400')");
}

}  // namespace
}  // namespace fulcrum
