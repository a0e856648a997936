// The bench chart: well-formed, one bar per case, scaled to the largest value, names escaped.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/svg_chart.h"

namespace cudaops::harness {
namespace {

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

TEST(BarChartSvg, OneBarPerCaseAndTheReferenceLine) {
  const std::vector<ChartBar> bars = {{"softmax", "bfloat16 rows=32768 cols=4096", 2900.0},
                                      {"softmax", "float32 rows=4096 cols=32768", 1450.0},
                                      {"add", "float16 n=268435456", 3100.0}};
  const std::string svg = bar_chart_svg("title", "GB/s", bars, 3000.0, "copy");
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  // The background plus one rectangle per bar.
  EXPECT_EQ(Count(svg, "<rect "), 1 + static_cast<int>(bars.size()));
  EXPECT_EQ(Count(svg, "stroke-dasharray"), 1);
  EXPECT_NE(svg.find("copy 3000 GB/s"), std::string::npos);
  EXPECT_NE(svg.find("2900 (96.7%)"), std::string::npos);
  EXPECT_NE(svg.find("1450 (48.3%)"), std::string::npos);
  EXPECT_NE(svg.find("3100 (103.3%)"), std::string::npos);
  // Same op, same colour; another op, another.
  const size_t first = svg.find("fill=\"#", svg.find("<rect x"));
  EXPECT_EQ(svg.substr(first, 15), svg.substr(svg.find("fill=\"#", first + 1), 15));
  EXPECT_NE(Count(svg, "fill=\"#0072B2\""), 3);
}

TEST(BarChartSvg, EscapesLabelsAndSurvivesNoBars) {
  const std::string svg =
      bar_chart_svg("a < b & \"c\"", "GB/s", {{"op<1>", "x & y", 10.0}}, 0.0, "copy");
  EXPECT_NE(svg.find("a &lt; b &amp; &quot;c&quot;"), std::string::npos);
  EXPECT_NE(svg.find("op&lt;1&gt;  x &amp; y"), std::string::npos);
  EXPECT_EQ(svg.find("op<1>"), std::string::npos);
  EXPECT_EQ(Count(svg, "stroke-dasharray"), 0);  // no reference, no line
  const std::string empty = bar_chart_svg("t", "GB/s", {}, 100.0, "copy");
  EXPECT_EQ(Count(empty, "<rect "), 1);
}

}  // namespace
}  // namespace cudaops::harness
