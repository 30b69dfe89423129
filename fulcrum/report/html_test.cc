#include "fulcrum/report/html.h"

#include <gtest/gtest.h>

namespace fulcrum {
namespace {

TEST(Html, EscapesWhatMarkupWouldRead) {
  EXPECT_EQ(html_escape(R"(<a href="x">&'</a>)"), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(html_escape("plain"), "plain");
}

TEST(Html, NumbersAndUnitsAsPeopleReadThem) {
  EXPECT_EQ(svg_number(12.5), "12.5");
  EXPECT_EQ(svg_number(3.0), "3");
  EXPECT_EQ(svg_number(-0.001), "0");
  EXPECT_EQ(svg_number(1.23456, 3), "1.235");
  EXPECT_EQ(human_seconds(0), "0 s");
  EXPECT_EQ(human_seconds(3e-12), "0 s");
  EXPECT_EQ(human_seconds(-3e-12), "0 s");
  EXPECT_EQ(human_seconds(0.6e-6), "1 µs");
  EXPECT_EQ(human_seconds(812e-6), "812 µs");
  EXPECT_EQ(human_seconds(0.0431), "43.1 ms");
  EXPECT_EQ(human_seconds(0.00431), "4.31 ms");
  EXPECT_EQ(human_seconds(0.5), "500.0 ms");
  EXPECT_EQ(human_seconds(3.05), "3.050 s");
  EXPECT_EQ(human_seconds(134), "2 min 14 s");
  // Each unit by the value as printed: a tie rounds to even, nothing rounds up out of its unit.
  EXPECT_EQ(human_seconds(0.5e-6), "0 s");
  EXPECT_EQ(human_seconds(-0.5e-6), "0 s");
  EXPECT_EQ(human_seconds(-812e-6), "-812 µs");
  EXPECT_EQ(human_seconds(999.7e-6), "1.00 ms");
  EXPECT_EQ(human_seconds(0.009996), "10.0 ms");
  EXPECT_EQ(human_seconds(0.99996), "1.000 s");
  EXPECT_EQ(human_seconds(9.9996), "10.0 s");
  EXPECT_EQ(human_seconds(119.96), "2 min 0 s");
  EXPECT_EQ(human_seconds(179.6), "3 min 0 s");
  EXPECT_EQ(human_seconds(-134), "-2 min 14 s");
  EXPECT_EQ(human_bytes(512), "512 B");
  EXPECT_EQ(human_bytes(3.5 * 1024 * 1024), "3.5 MiB");
}

}  // namespace
}  // namespace fulcrum
