#include "fulcrum/data/meta_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "fulcrum/core/error.h"
#include "fulcrum/data/test_data.h"

namespace fulcrum {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class MetaIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt_name();
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "idx");
    fs::create_directories(dir_ / "root" / "lengths");
    write("root/lengths/a.json", R"([{"vit_num":1,"token_num":10},{"vit_num":3,"token_num":30},
                                    {"vit_num":5,"token_num":50},{"vit_num":4,"token_num":40}])");
    write("idx/b.jsonl", "{\"vit_num\":0,\"token_num\":7,\"image_flags\":0}\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string fmt_name() {
    return "fulcrum_meta_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void write(const std::string& relative, const std::string& text) { std::ofstream(dir_ / relative) << text; }
  LoadOptions options(bool strict = false) {
    LoadOptions o;
    o.root = (dir_ / "root").string();
    o.strict = strict;
    o.warnings = &warnings_;
    return o;
  }

  fs::path dir_;
  std::ostringstream warnings_;
};

TEST_F(MetaIndexTest, ResolvesAgainstIndexFolderThenRoot) {
  write("idx/meta.json", R"({"a": {"token_lengths": "lengths/a.json"}, "b": {"token_lengths": "b.jsonl"}})");
  LoadedData loaded = load_dataset((dir_ / "idx/meta.json").string(), options());
  ASSERT_EQ(loaded.dataset.size(), 5u);
  // Ids follow index order: a's four records, then b's one.
  EXPECT_EQ(loaded.dataset.tokens(0), 10u);
  EXPECT_EQ(loaded.dataset.tokens(4), 7u);
  ASSERT_EQ(loaded.dataset.sources().size(), 2u);
  EXPECT_EQ(loaded.dataset.sources()[1].first_id, 4u);
  EXPECT_TRUE(loaded.missing.empty());
}

// The entries in the order the file gives them, not their names' (the JSON library's objects sort their keys): the
// training code's dataset concatenates them in file order, and every id would otherwise get another sample's lengths.
TEST_F(MetaIndexTest, IdsFollowTheFilesOrderNotTheNames) {
  write("idx/meta.json", R"({"zeta": {"token_lengths": "b.jsonl"}, "alpha": {"token_lengths": "lengths/a.json"}})");
  LoadedData loaded = load_dataset((dir_ / "idx/meta.json").string(), options());
  ASSERT_EQ(loaded.dataset.size(), 5u);
  EXPECT_EQ(loaded.dataset.tokens(0), 7u);  // zeta's one record first
  EXPECT_EQ(loaded.dataset.tokens(1), 10u);
  ASSERT_EQ(loaded.dataset.sources().size(), 2u);
  EXPECT_EQ(loaded.dataset.sources()[0].name, "zeta");
  EXPECT_EQ(loaded.dataset.sources()[1].first_id, 1u);
  const std::vector<MetaEntry> entries = parse_meta_index(R"({"z": {"token_lengths": "z"}, "a": {"token_lengths":
                                                              "a"}, "m": {"token_lengths": "m"}})", "i.json");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].name + entries[1].name + entries[2].name, "zam");
}

// A JSON Lines length file named .json reads as an index (a JSON object): the error says what it looks like.
TEST_F(MetaIndexTest, AJsonLinesFileNamedJsonIsNamedSo) {
  write("idx/lines.json", "{\"vit_num\": 1, \"token_num\": 300}\n{\"vit_num\": 0, \"token_num\": 9}\n");
  try {
    load_dataset((dir_ / "idx/lines.json").string(), options());
    ADD_FAILURE() << "read as an index";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("lines.json: malformed JSON at byte "));
    EXPECT_THAT(e.what(), HasSubstr("(its first line is a length record: a JSON Lines file is named .jsonl)"));
  }
}

TEST_F(MetaIndexTest, MissingEntryIsReportedAndSkipped) {
  write("idx/meta.json", R"({"gone": {"token_lengths": "nowhere.json"}, "b": {"token_lengths": "b.jsonl"}})");
  LoadedData loaded = load_dataset((dir_ / "idx/meta.json").string(), options());
  EXPECT_EQ(loaded.dataset.size(), 1u);
  ASSERT_EQ(loaded.missing.size(), 1u);
  EXPECT_EQ(loaded.missing[0].name, "gone");
  EXPECT_THAT(warnings_.str(), HasSubstr("entry 'gone': nowhere.json not found; skipped"));
}

TEST_F(MetaIndexTest, StrictMakesMissingEntryAnError) {
  write("idx/meta.json", R"({"gone": {"token_lengths": "nowhere.json"}, "b": {"token_lengths": "b.jsonl"}})");
  EXPECT_THROW(load_dataset((dir_ / "idx/meta.json").string(), options(true)), InputError);
}

TEST_F(MetaIndexTest, NothingLoadedIsAnError) {
  write("idx/meta.json", R"({"gone": {"token_lengths": "nowhere.json"}})");
  try {
    load_dataset((dir_ / "idx/meta.json").string(), options());
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("none of its 1 entries could be loaded"));
  }
}

TEST_F(MetaIndexTest, RepeatTimeSubsamplesAndRepeats) {
  write("idx/meta.json", R"({"half": {"token_lengths": "lengths/a.json", "repeat_time": 0.5},
                             "twice_and_a_half": {"token_lengths": "lengths/a.json", "repeat_time": 2.5}})");
  LoadedData loaded = load_dataset((dir_ / "idx/meta.json").string(), options());
  const Dataset& d = loaded.dataset;
  // ⌊4·0.5⌋ = 2 records, then 2 copies of 4 and the first ⌊4·0.5⌋ = 2: 2 + 10 = 12 samples.
  ASSERT_EQ(d.size(), 12u);
  const uint32_t expected[] = {10, 30, 10, 30, 50, 40, 10, 30, 50, 40, 10, 30};
  for (uint32_t id = 0; id < 12; ++id) EXPECT_EQ(d.tokens(id), expected[id]) << id;
  EXPECT_EQ(d.sources()[1].samples, 10u);
  EXPECT_EQ(d.sources()[1].records, 4u);
}

TEST_F(MetaIndexTest, MalformedIndexEntries) {
  const std::pair<const char*, const char*> cases[] = {
      {R"([1, 2])", "record 0: expected a JSON object"},  // an array is read as a length file
      {R"({"a": 3})", "entry 'a': must be an object"},
      {R"({"a": {"annotation": "x.jsonl"}})", "entry 'a': has no token_lengths"},
      {R"({"a": {"token_lengths": "lengths/a.json", "repeat_time": -1}})",
       "repeat_time must be a number above 0 and at most 1000000"},
      {R"({"a": {"token_lengths": "lengths/a.json", "repeat_time": 1e308}})", "at most 1000000"},
      {R"({"a": {"token_lengths": 5}})", "token_lengths must be a string"},
      {R"({"a": )", "malformed JSON"},
  };
  for (const auto& [text, message] : cases) {
    write("idx/meta.json", text);
    try {
      load_dataset((dir_ / "idx/meta.json").string(), options());
      ADD_FAILURE() << "no error for " << text;
    } catch (const InputError& e) {
      EXPECT_THAT(e.what(), HasSubstr(message)) << text;
      EXPECT_THAT(e.what(), HasSubstr("meta.json")) << text;
    }
  }
}

TEST_F(MetaIndexTest, RepeatsPastTheIdRangeAreRefusedBeforeTheyAreMade) {
  std::string records = "[";
  for (int i = 0; i < 5000; ++i) records += std::string(i ? "," : "") + R"({"vit_num": 1, "token_num": 300})";
  write("root/lengths/big.json", records + "]");
  // 5,000 records × 1e6 is 5e9 samples: past the 32-bit ids, refused without making a single repeat.
  write("idx/meta.json", R"({"big": {"token_lengths": "lengths/big.json", "repeat_time": 1e6}})");
  try {
    load_dataset((dir_ / "idx/meta.json").string(), options());
    ADD_FAILURE() << "5e9 samples accepted";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("meta.json: entry 'big': 5000 records × repeat_time 1000000 take the index past "
                                    "4294967295 samples"));
  }
}

TEST(ParseMetaIndex, NumberOverflowIsAnInputError) {
  // A fuzzing finding (fuzz/regressions/meta_index_fuzz/): the JSON library reports numbers too large for a
  // double with an exception that is not a parse error.
  EXPECT_THROW(parse_meta_index("2e55555555555555555555", "m.json"), InputError);
  EXPECT_THROW(parse_meta_index(R"({"a": {"token_lengths": "x", "repeat_time": 2e999}})", "m.json"), InputError);
}

TEST(BundledData, IndexLoadsTheThreeShippedFiles) {
  LoadOptions options;
  options.root = FULCRUM_SOURCE_DIR;
  std::ostringstream warnings;
  options.warnings = &warnings;
  LoadedData loaded = load_dataset(testing::source_path("data/internvl_sft_1.2M.json"), options);
  // Record counts from the data's provenance: 12,413 + 18,317 + 29,765.
  EXPECT_EQ(loaded.dataset.size(), 60495u);
  EXPECT_EQ(loaded.missing.size(), 6u);
  ASSERT_EQ(loaded.dataset.sources().size(), 3u);
  EXPECT_EQ(loaded.dataset.sources()[0].name, "ai2d_train_12k_wh");
  EXPECT_EQ(loaded.dataset.sources()[0].samples, 12413u);
  EXPECT_EQ(loaded.dataset.sources()[1].name, "chartqa_train_18k_wh");
  EXPECT_EQ(loaded.dataset.sources()[2].samples, 29765u);
}

}  // namespace
}  // namespace fulcrum
