#pragma once

// A horizontal bar chart as a standalone SVG file: one bar per measured case, its achieved
// bandwidth against a reference line (the device's copy bandwidth). No dependency.

#include <string>
#include <vector>

namespace cudaops::harness {

struct ChartBar {
  std::string group;  ///< bars of one group share a colour (the op)
  std::string label;  ///< shown left of the bar
  double value = 0.0;
};

/// The SVG text. Each bar is labelled with its value and its percentage of `reference`; the
/// reference is drawn as a dashed line named `reference_label`. Values and labels are escaped.
std::string bar_chart_svg(const std::string& title, const std::string& unit,
                          const std::vector<ChartBar>& bars, double reference,
                          const std::string& reference_label);

}  // namespace cudaops::harness
