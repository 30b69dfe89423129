// Writes a length file of N records drawn with replacement from a length file or meta index, in the OmniBal
// format (a JSON array of {"vit_num", "token_num", "image_flags"}, indent 4), for benchmarks at scale.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "fulcrum/core/error.h"
#include "fulcrum/core/rng.h"
#include "fulcrum/data/meta_index.h"

int main(int argc, char** argv) {
  CLI::App app{"Resample a length file to N records"};
  std::string data, out, root = ".";
  size_t count = 1200000;
  uint64_t seed = 0;
  app.add_option("--data", data, "Length file or meta index to draw from")->required();
  app.add_option("--root", root, "Second folder for the index's paths")->capture_default_str();
  app.add_option("--count", count, "Records to write")->capture_default_str();
  app.add_option("--seed", seed, "Seed of the draw")->capture_default_str();
  app.add_option("--out", out, "Output file")->required();
  CLI11_PARSE(app, argc, argv);
  try {
    const fulcrum::Dataset source = fulcrum::load_dataset(data, {root, false, nullptr}).dataset;
    fulcrum::Rng rng({seed, 0x726573616d706c65ULL});
    std::string text = "[\n";
    text.reserve(count * 90);
    auto it = std::back_inserter(text);
    for (size_t i = 0; i < count; ++i) {
      const auto id = static_cast<uint32_t>(rng.below(source.size()));
      fmt::format_to(it, "    {{\n        \"vit_num\": {},\n        \"token_num\": {},\n        \"image_flags\": {}\n    }}{}\n",
                     source.vision(id), source.tokens(id), source.images(id), i + 1 < count ? "," : "");
    }
    text += "]\n";
    std::FILE* f = std::fopen(out.c_str(), "wb");
    if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() || std::fclose(f) != 0) {
      std::cerr << "make_lengths: cannot write " << out << "\n";
      return 2;
    }
  } catch (const fulcrum::InputError& e) {
    std::cerr << "make_lengths: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
