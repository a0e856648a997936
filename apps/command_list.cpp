#include <algorithm>
#include <cstdio>
#include <memory>

#include "commands.h"
#include "common.h"
#include "harness/json.h"

namespace cudaops::cli {

void print_op(const harness::OpDescriptor& op, int width) {
  std::printf("%-*s  %s\n", width, op.name.c_str(), op.summary.c_str());
  std::printf("%-*s    dtypes: %s\n", width, "", dtype_list(op).c_str());
  for (const auto& dim : op.dims) {
    std::string fallback = std::to_string(dim.default_value);
    std::string words;
    for (const auto& [word, value] : dim.words) {
      if (value == dim.default_value) fallback = word;
      words += (words.empty() ? "" : ", ") + word;
    }
    if (dim.flag) {
      std::printf("%-*s    --%s: %s (a switch)\n", width, "", dim.name.c_str(), dim.help.c_str());
    } else if (!words.empty()) {
      std::printf("%-*s    --%s: %s (one of %s; default %s)\n", width, "", dim.name.c_str(),
                  dim.help.c_str(), words.c_str(), fallback.c_str());
    } else {
      std::printf("%-*s    --%s: %s (default %s)\n", width, "", dim.name.c_str(), dim.help.c_str(),
                  fallback.c_str());
    }
  }
}

Command add_list_command(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* parser = app.add_subcommand("list", "list the ops, their dtypes and shape options");
  parser->add_flag("--json", *json, "machine-readable output");
  return {parser, [json]() {
            const auto& ops = harness::registered_ops();
            if (*json) {
              harness::JsonWriter w;
              w.begin_array();
              for (const auto& op : ops) {
                w.begin_object().key("name").value(op.name).key("summary").value(op.summary);
                w.key("dtypes").begin_array();
                for (DType dtype : op.dtypes)
                  w.value(dtype_name(dtype));
                w.end_array().key("dims").begin_array();
                for (const auto& dim : op.dims) {
                  w.begin_object().key("name").value(dim.name).key("help").value(dim.help);
                  w.key("default").value(dim.default_value);
                  if (dim.flag) w.key("flag").value(true);
                  if (!dim.words.empty()) {
                    w.key("words").begin_object();
                    for (const auto& [word, value] : dim.words)
                      w.key(word).value(value);
                    w.end_object();
                  }
                  w.end_object();
                }
                w.end_array().end_object();
              }
              w.end_array();
              std::printf("%s\n", w.str().c_str());
              return kExitOk;
            }
            int width = 0;  // the longest name, so that the summaries line up
            for (const auto& op : ops)
              width = std::max(width, static_cast<int>(op.name.size()));
            for (const auto& op : ops)
              print_op(op, width);
            return kExitOk;
          }};
}

}  // namespace cudaops::cli
