#include "harness/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

namespace cudaops::harness {
namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string number(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

// Colour-blind-safe qualitative palette (Okabe-Ito).
constexpr const char* kPalette[] = {"#0072B2", "#E69F00", "#009E73", "#CC79A7",
                                    "#56B4E9", "#D55E00", "#F0E442", "#000000"};

}  // namespace

std::string bar_chart_svg(const std::string& title, const std::string& unit,
                          const std::vector<ChartBar>& bars, double reference,
                          const std::string& reference_label) {
  constexpr double kLabelWidth = 360, kPlotWidth = 560, kRight = 130;
  constexpr double kBarHeight = 16, kGap = 6, kTop = 56, kBottom = 40;
  const double width = kLabelWidth + kPlotWidth + kRight;
  const double plot_height = static_cast<double>(bars.size()) * (kBarHeight + kGap);
  const double height = kTop + plot_height + kBottom;
  double largest = reference;
  for (const ChartBar& bar : bars)
    largest = std::max(largest, bar.value);
  // Round ticks: a step of 1, 2, 2.5 or 5 times a power of ten giving at most eight of them.
  double step = 1.0;
  if (largest > 0) {
    const double raw = largest * 1.05 / 8;
    const double power = std::pow(10.0, std::floor(std::log10(raw)));
    step = power * 10;
    for (double m : {1.0, 2.0, 2.5, 5.0}) {
      if (m * power >= raw) {
        step = m * power;
        break;
      }
    }
  }
  const int ticks = largest > 0 ? static_cast<int>(std::ceil(largest * 1.05 / step)) : 1;
  const double top = step * ticks;
  const auto x_of = [&](double v) { return kLabelWidth + kPlotWidth * std::max(v, 0.0) / top; };

  std::map<std::string, const char*> colours;
  for (const ChartBar& bar : bars) {
    if (colours.count(bar.group) == 0) {
      colours[bar.group] = kPalette[colours.size() % (sizeof kPalette / sizeof kPalette[0])];
    }
  }

  std::string svg;
  svg += "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(width, 0) + "\" height=\"" +
         number(height, 0) + "\" viewBox=\"0 0 " + number(width, 0) + " " + number(height, 0) +
         "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\">\n";
  svg += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  svg += "<text x=\"12\" y=\"24\" font-size=\"16\" font-weight=\"bold\">" + escape(title) +
         "</text>\n";
  for (int i = 0; i <= ticks; ++i) {
    const double v = step * i;
    const double x = x_of(v);
    svg += "<line x1=\"" + number(x, 1) + "\" y1=\"" + number(kTop - 6, 1) + "\" x2=\"" +
           number(x, 1) + "\" y2=\"" + number(kTop + plot_height, 1) + "\" stroke=\"#e0e0e0\"/>\n";
    svg += "<text x=\"" + number(x, 1) + "\" y=\"" + number(kTop + plot_height + 16, 1) +
           "\" text-anchor=\"middle\" fill=\"#555\">" + number(v, 0) + "</text>\n";
  }
  svg += "<text x=\"" + number(kLabelWidth + kPlotWidth / 2, 1) + "\" y=\"" +
         number(height - 8, 1) + "\" text-anchor=\"middle\" fill=\"#555\">" + escape(unit) +
         "</text>\n";
  if (reference > 0) {
    const double x = x_of(reference);
    svg += "<line x1=\"" + number(x, 1) + "\" y1=\"" + number(kTop - 12, 1) + "\" x2=\"" +
           number(x, 1) + "\" y2=\"" + number(kTop + plot_height, 1) +
           "\" stroke=\"#d00\" stroke-width=\"1.5\" stroke-dasharray=\"5,3\"/>\n";
    svg += "<text x=\"" + number(x, 1) + "\" y=\"" + number(kTop - 16, 1) +
           "\" text-anchor=\"middle\" fill=\"#d00\">" + escape(reference_label) + " " +
           number(reference, 0) + " " + escape(unit) + "</text>\n";
  }
  for (size_t i = 0; i < bars.size(); ++i) {
    const ChartBar& bar = bars[i];
    const double y = kTop + static_cast<double>(i) * (kBarHeight + kGap);
    const double pct = reference > 0 ? 100.0 * bar.value / reference : 0.0;
    svg += "<g><title>" + escape(bar.group + " " + bar.label) + ": " + number(bar.value, 1) + " " +
           escape(unit) + " (" + number(pct, 1) + "% of " + escape(reference_label) + ")</title>\n";
    svg += "<text x=\"" + number(kLabelWidth - 8, 1) + "\" y=\"" + number(y + kBarHeight - 4, 1) +
           "\" text-anchor=\"end\">" + escape(bar.group + "  " + bar.label) + "</text>\n";
    svg += "<rect x=\"" + number(kLabelWidth, 1) + "\" y=\"" + number(y, 1) + "\" width=\"" +
           number(x_of(bar.value) - kLabelWidth, 1) + "\" height=\"" + number(kBarHeight, 1) +
           "\" fill=\"" + colours[bar.group] + "\"/>\n";
    svg += "<text x=\"" + number(x_of(bar.value) + 6, 1) + "\" y=\"" +
           number(y + kBarHeight - 4, 1) + "\">" + number(bar.value, 0) + " (" + number(pct, 1) +
           "%)</text></g>\n";
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace cudaops::harness
