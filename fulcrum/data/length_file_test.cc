#include "fulcrum/data/length_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>

#include "fulcrum/core/error.h"

namespace fulcrum {
namespace {

using ::testing::HasSubstr;

// Parses `text` as `format`; the copy gives simdjson the padding it reads past the end.
Dataset parse(const std::string& text, LengthFormat format) {
  std::string padded = text + std::string(simdjson::SIMDJSON_PADDING, ' ');
  Dataset data;
  parse_length_records(std::string_view(padded.data(), text.size()), format, "f.json", data);
  return data;
}

std::string error_of(const std::string& text, LengthFormat format) {
  try {
    parse(text, format);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(LengthFile, ReadsOmniBalArray) {
  Dataset d = parse(R"([{"vit_num": 5, "token_num": 811, "image_flags": 5},
                        {"vit_num": 1, "token_num": 300, "image_flags": 0, "extra": [1, {"x": 2}]}])",
                    LengthFormat::kJsonArray);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.vision_unit(), VisionUnit::kTiles);
  EXPECT_EQ(d.vision(0), 5u);
  EXPECT_EQ(d.tokens(0), 811u);
  EXPECT_EQ(d.images(0), 5);
  EXPECT_EQ(d.images(1), 0);
}

// Fields a record does not use are read through, not skipped unread: text in them that is not JSON is refused,
// as Python's json module refuses it (at the same character where the two parsers agree on where it lies).
TEST(LengthFile, MalformedTextInAFieldNotUsedIsRefused) {
  const std::string nested = R"([{"vit_num": 1, "token_num": 5, "x": [1, {"b": [null, true, "s", 2.5e3]}]}])";
  EXPECT_EQ(parse(nested, LengthFormat::kJsonArray).size(), 1u);
  EXPECT_EQ(parse(R"({"vit_num": 1, "token_num": 5, "x": {"y": [false]}})", LengthFormat::kJsonLines).size(), 1u);
  EXPECT_THAT(error_of(R"([{"vit_num":1,"token_num":5,"x":[1,,2]}])", LengthFormat::kJsonArray),
              HasSubstr("f.json: record 0: malformed JSON at byte 35"));
  EXPECT_THAT(error_of(R"([{"vit_num":1,"token_num":5,"x":{"a" 1}}])", LengthFormat::kJsonArray),
              HasSubstr("f.json: record 0: malformed JSON at byte 37"));
  for (const char* literal : {"tru", "nul", "fals", "1x"}) {
    EXPECT_THAT(error_of(std::string(R"([{"vit_num":1,"token_num":5,"x":)") + literal + "}]", LengthFormat::kJsonArray),
                HasSubstr("f.json: record 0: malformed JSON"))
        << literal;
    EXPECT_THAT(error_of(std::string(R"({"vit_num":1,"token_num":5,"x":)") + literal + "}", LengthFormat::kJsonLines),
                HasSubstr("f.json: line 1: malformed JSON"))
        << literal;
  }
  // A comma after the last record, or a bad literal as one, is text that is not JSON, not a record of another type.
  EXPECT_THAT(error_of(R"([{"vit_num":1,"token_num":5},])", LengthFormat::kJsonArray),
              HasSubstr("f.json: malformed JSON at byte 29"));
  EXPECT_THAT(error_of(R"([{"vit_num":1,"token_num":5}, tru])", LengthFormat::kJsonArray),
              HasSubstr("f.json: malformed JSON at byte"));
  EXPECT_THAT(error_of(R"([{"vit_num":1,"token_num":5}, 3])", LengthFormat::kJsonArray),
              HasSubstr("f.json: record 1: expected a JSON object"));
  // The first fault is named: a record of another type before a later malformed one.
  EXPECT_THAT(error_of(R"([3, {"vit_num":1,"token_num":5,"x":tru}])", LengthFormat::kJsonArray),
              HasSubstr("f.json: record 0: expected a JSON object"));
}

// Numbers are JSON whatever their size: a long id or 1e400 in a field not used is not refused as malformed.
TEST(LengthFile, NumbersPastADoubleInAFieldNotUsedAreJson) {
  for (const char* number : {"123456789012345678901234567890", "1e400", "-0.5E-7", "0"}) {
    EXPECT_EQ(parse(std::string(R"([{"vit_num": 1, "token_num": 5, "id": )") + number + "}]", LengthFormat::kJsonArray)
                  .size(),
              1u)
        << number;
    EXPECT_EQ(parse(std::string(R"({"vit_num": 1, "token_num": 5, "id": [)") + number + "]}", LengthFormat::kJsonLines)
                  .size(),
              1u)
        << number;
  }
  for (const char* bad : {"01", "1.", "-", "1e", "+1", ".5", "1x"}) {
    EXPECT_THAT(error_of(std::string(R"([{"vit_num": 1, "token_num": 5, "id": )") + bad + "}]", LengthFormat::kJsonArray),
                HasSubstr("malformed JSON"))
        << bad;
  }
}

// A field nested past any length file's need is refused in one line, before the reading could run out of stack.
TEST(LengthFile, DeepNestingInAFieldNotUsedIsRefused) {
  const int depth = 200000;
  const std::string deep = std::string(R"([{"vit_num": 1, "token_num": 5, "x": )") + std::string(depth, '[') +
                           std::string(depth, ']') + "}]";
  EXPECT_THAT(error_of(deep, LengthFormat::kJsonArray),
              HasSubstr("f.json: record 0: field x nests arrays and objects more than 1024 deep"));
  const std::string fine = std::string(R"([{"vit_num": 1, "token_num": 5, "x": )") + std::string(1000, '[') +
                           std::string(1000, ']') + "}]";
  EXPECT_EQ(parse(fine, LengthFormat::kJsonArray).size(), 1u);
}

TEST(LengthFile, ReadsJsonLinesWithTasksAndPatchTokens) {
  Dataset d = parse("{\"vision_tokens\": 1024, \"token_num\": 1300, \"task\": \"caption\"}\n\n"
                    "{\"vision_tokens\": 0, \"token_num\": 90, \"task\": \"chat\"}\n",
                    LengthFormat::kJsonLines);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.vision_unit(), VisionUnit::kPatchTokens);
  EXPECT_EQ(d.images(0), 1);  // defaults to one image when patch tokens are given
  EXPECT_EQ(d.images(1), 0);
  EXPECT_EQ(d.task_names()[d.task(0)], "caption");
  EXPECT_EQ(d.task_names()[d.task(1)], "chat");
}

TEST(LengthFile, ReadsCsvWithHeaderInAnyOrder) {
  Dataset d = parse("token_num,note,vit_num,image_flags\n811,\"a, b\",5,5\n300,,1,\n", LengthFormat::kCsv);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.tokens(0), 811u);
  EXPECT_EQ(d.vision(0), 5u);
  EXPECT_EQ(d.images(1), 1);  // empty cell: image_flags defaults to the tiles
}

// A UTF-8 byte order mark, which spreadsheets write before CSV, is not part of the first field's name; before JSON it
// is blanked, so a malformed record's byte is still the file's.
TEST(LengthFile, ALeadingByteOrderMarkIsSkipped) {
  const std::string mark = "\xEF\xBB\xBF";
  auto read = [](std::string text, const std::string& path) {
    text += std::string(simdjson::SIMDJSON_PADDING, ' ');
    const std::string_view view = without_byte_order_mark(text.data(), text.size() - simdjson::SIMDJSON_PADDING, path);
    Dataset data;
    parse_length_records(view, *detect_length_format(path, view), path, data);
    return data;
  };
  const Dataset csv = read(mark + "vit_num,token_num\n2,300\n", "a.csv");
  ASSERT_EQ(csv.size(), 1u);
  EXPECT_EQ(csv.tokens(0), 300u);
  const Dataset json = read(mark + R"([{"vit_num": 2, "token_num": 301}])", "a.json");
  ASSERT_EQ(json.size(), 1u);
  EXPECT_EQ(json.tokens(0), 301u);
  try {
    read(mark + R"([{"vit_num": 2, "token_num": 301}, {"vit_num" 1}])", "a.json");
    ADD_FAILURE() << "a malformed record was read";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("record 1: malformed JSON at byte 49"));  // the file's byte, mark included
  }
}

TEST(LengthFile, DetectsFormat) {
  EXPECT_EQ(detect_length_format("a.jsonl", "{"), LengthFormat::kJsonLines);
  EXPECT_EQ(detect_length_format("a.csv", "vit_num"), LengthFormat::kCsv);
  EXPECT_EQ(detect_length_format("a.json", " [ "), LengthFormat::kJsonArray);
  EXPECT_EQ(detect_length_format("a.json", "{"), std::nullopt);  // a meta index
  EXPECT_EQ(detect_length_format("a.txt", "{\"vit_num\":1}"), LengthFormat::kJsonLines);
}

struct BadInput {
  const char* name;
  LengthFormat format;
  std::string text;
  const char* message;  // what the one-line error must say
};

class LengthFileBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(LengthFileBadInput, OneClearErrorNamingFileAndRecord) {
  const BadInput& c = GetParam();
  const std::string error = error_of(c.text, c.format);
  EXPECT_THAT(error, HasSubstr("f.json")) << c.name;
  EXPECT_THAT(error, HasSubstr(c.message)) << c.name;
  EXPECT_EQ(error.find('\n'), std::string::npos) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Table, LengthFileBadInput,
    ::testing::Values(
        BadInput{"malformed", LengthFormat::kJsonArray, R"([{"vit_num": 1, "token_num": 3)",
                 "record 0: malformed JSON: the file ends inside the record (byte 30)"},
        // A file cut short fails as a whole before any record is read: the record and byte are still named.
        BadInput{"truncated_file", LengthFormat::kJsonArray, R"([{"vit_num": 1, "token_num": 30}, {"vit_num": )",
                 "record 1: malformed JSON: the file ends inside the record (byte 46)"},
        BadInput{"unclosed_array", LengthFormat::kJsonArray, R"([{"vit_num": 1, "token_num": 30}, )",
                 "f.json: malformed JSON: the file ends inside the array (byte 34)"},
        // A string that is not UTF-8 in record 1.
        BadInput{"not_utf8", LengthFormat::kJsonArray,
                 "[{\"vit_num\": 1, \"token_num\": 30}, {\"task\": \"a\xff\", \"vit_num\": 1}]",
                 "f.json: record 1: malformed JSON at byte 45 (syntax error while parsing value - invalid string: "
                 "ill-formed UTF-8 byte)"},
        // Two faults: simdjson checks the whole file's UTF-8 first and names the later one; the byte (counted from 0,
        // as the end's is) and the reason are both the stray brace's, the first fault in reading order.
        BadInput{"two_faults", LengthFormat::kJsonArray,
                 "[{\"vit_num\": 1, \"token_num\": 30}, {\"vit_num\"}, {\"task\": \"a\xff\"}]",
                 "f.json: record 1: malformed JSON at byte 44 (syntax error while parsing object separator - "
                 "unexpected '}'; expected ':')"},
        BadInput{"empty_json", LengthFormat::kJsonArray, " \n", "f.json: malformed JSON: the file holds no JSON value"},
        BadInput{"unclosed_string", LengthFormat::kJsonArray, "\"abc", "f.json: malformed JSON: the file ends inside the document"},

        BadInput{"bad_value", LengthFormat::kJsonArray, R"([{"vit_num": 1, "token_num": 30}, {"vit_num": tru}])",
                 "record 1"},
        BadInput{"not_array", LengthFormat::kJsonArray, R"("hello")", "expected a JSON array"},
        BadInput{"not_object", LengthFormat::kJsonArray, R"([{"vit_num": 1, "token_num": 30}, 7])",
                 "record 1: expected a JSON object"},
        BadInput{"missing_tokens", LengthFormat::kJsonArray, R"([{"vit_num": 1}])", "record 0: missing field token_num"},
        BadInput{"missing_vision", LengthFormat::kJsonArray, R"([{"token_num": 10}])", "missing field vit_num"},
        BadInput{"float_tokens", LengthFormat::kJsonArray, R"([{"vit_num": 1, "token_num": 10.5}])",
                 "token_num must be an integer"},
        BadInput{"string_tiles", LengthFormat::kJsonArray, R"([{"vit_num": "3", "token_num": 10}])",
                 "vit_num must be an integer"},
        BadInput{"negative_tiles", LengthFormat::kJsonArray,
                 R"([{"vit_num": 1, "token_num": 10}, {"vit_num": -2, "token_num": 10}])",
                 "record 1: vit_num must be >= 0, got -2"},
        BadInput{"zero_tokens", LengthFormat::kJsonArray, R"([{"vit_num": 1, "token_num": 0}])",
                 "token_num must be a positive integer, got 0"},
        BadInput{"negative_tokens", LengthFormat::kJsonArray, R"([{"vit_num": 1, "token_num": -5}])",
                 "token_num must be a positive integer, got -5"},
        BadInput{"failed_sample", LengthFormat::kJsonArray, R"([{"vit_num": 1, "token_num": 5, "image_flags": -1}])",
                 "image_flags must be >= 0"},
        BadInput{"huge_tokens", LengthFormat::kJsonArray, R"([{"vit_num": 1, "token_num": 99999999999}])",
                 "token_num is too large"},
        BadInput{"both_units", LengthFormat::kJsonArray, R"([{"vit_num": 1, "vision_tokens": 4, "token_num": 5}])",
                 "both vit_num and vision_tokens"},
        BadInput{"mixed_units", LengthFormat::kJsonArray,
                 R"([{"vit_num": 1, "token_num": 5}, {"vision_tokens": 4, "token_num": 5}])",
                 "record 1: gives vision_tokens but earlier records give vit_num"},
        BadInput{"duplicate_field", LengthFormat::kJsonArray, R"([{"vit_num": 1, "vit_num": 2, "token_num": 5}])",
                 "appears twice"},
        // The second task would silently win, as would any other key's second value.
        BadInput{"duplicate_task", LengthFormat::kJsonArray,
                 R"([{"vit_num": 1, "token_num": 5, "task": "a", "task": "b"}])", "record 0: field task appears twice"},
        BadInput{"duplicate_other_key", LengthFormat::kJsonLines,
                 "{\"vit_num\":1,\"token_num\":5,\"id\":1,\"id\":2}\n", "line 1: field id appears twice"},
        BadInput{"duplicate_past_eight_keys", LengthFormat::kJsonArray,
                 R"([{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1, "f": 1, "g": 1, "h": 1, "i": 1, "token_num": 5,
                     "vit_num": 1, "i": 2}])",
                 "record 0: field i appears twice"},
        BadInput{"trailing", LengthFormat::kJsonArray, R"([{"vit_num": 1, "token_num": 5}] [])", "after the array"},
        BadInput{"jsonl_bad_line", LengthFormat::kJsonLines, "{\"vit_num\":1,\"token_num\":5}\n{\"vit_num\":1,}\n",
                 "line 2"},
        BadInput{"jsonl_tokens", LengthFormat::kJsonLines, "{\"vit_num\":1,\"token_num\":0}\n",
                 "line 1: token_num must be a positive integer"},
        BadInput{"csv_non_integer", LengthFormat::kCsv, "vit_num,token_num\n1,20\n1,2x\n",
                 "line 3: token_num must be an integer, got '2x'"},
        BadInput{"csv_fields", LengthFormat::kCsv, "vit_num,token_num\n1,20,7\n", "line 2: has 3 fields"},
        // Lines, not rows: libcsv skips blank lines and lets a quoted field run over two.
        BadInput{"csv_after_blank_lines", LengthFormat::kCsv, "vit_num,token_num\n1,20\n\n\n1,2x\n",
                 "line 5: token_num must be an integer, got '2x'"},
        BadInput{"csv_lone_cr_lines", LengthFormat::kCsv, "vit_num,token_num\r1,20\r1,30\r1,2x\r",
                 "line 4: token_num must be an integer"},
        BadInput{"csv_after_a_quoted_newline", LengthFormat::kCsv,
                 "vit_num,token_num,task\n1,20,\"two\nlines\"\n1,2x,t\n", "line 4: token_num must be an integer"},
        BadInput{"csv_negative", LengthFormat::kCsv, "vit_num,token_num\n-1,20\n", "vit_num must be >= 0"},
        BadInput{"csv_quote", LengthFormat::kCsv, "vit_num,token_num\n1,\"20\n", "malformed CSV"},
        BadInput{"csv_empty", LengthFormat::kCsv, "", "empty CSV"},
        // `stats --json` writes task names: a byte that is not UTF-8 stopped the writer (an abort).
        BadInput{"csv_task_not_utf8", LengthFormat::kCsv, "token_num,vit_num,task\n5,1,chat\n5,1,\xff\n",
                 "line 3: task is not UTF-8 text"}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return std::string(info.param.name); });

TEST(LengthFile, BadRecordLeavesDatasetUnchanged) {
  Dataset d;
  std::string ok = R"([{"vit_num": 1, "token_num": 10}])" + std::string(simdjson::SIMDJSON_PADDING, ' ');
  parse_length_records(std::string_view(ok.data(), ok.size() - simdjson::SIMDJSON_PADDING), LengthFormat::kJsonArray,
                       "a.json", d);
  std::string bad = R"([{"vit_num": 1, "token_num": 10}, {"vit_num": 1}])" + std::string(simdjson::SIMDJSON_PADDING, ' ');
  EXPECT_THROW(parse_length_records(std::string_view(bad.data(), bad.size() - simdjson::SIMDJSON_PADDING),
                                    LengthFormat::kJsonArray, "b.json", d),
               InputError);
  EXPECT_EQ(d.size(), 1u);
}

}  // namespace
}  // namespace fulcrum
