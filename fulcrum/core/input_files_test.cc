#include "fulcrum/core/input_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fulcrum/core/text_file.h"

namespace fulcrum {
namespace {

// A file read through any of its names is that file: through a link to it or a path with "..", not a file of the
// same name elsewhere.
TEST(InputFiles, AFileReadIsKnownByEveryNameOfIt) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("fulcrum_input_files_" + std::to_string(::getpid()));
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "data.json") << "[]";
  std::ofstream(dir / "sub" / "data.json") << "[]";
  fs::create_symlink(dir / "data.json", dir / "link.json");
  EXPECT_FALSE(is_input_file((dir / "data.json").string()));
  EXPECT_EQ(read_text_file((dir / "data.json").string()), "[]");
  EXPECT_TRUE(is_input_file((dir / "data.json").string()));
  EXPECT_TRUE(is_input_file((dir / "link.json").string()));
  EXPECT_TRUE(is_input_file((dir / "sub" / ".." / "data.json").string()));
  EXPECT_FALSE(is_input_file((dir / "sub" / "data.json").string()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fulcrum
