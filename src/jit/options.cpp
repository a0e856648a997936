#include "jit/options.h"

#include <cctype>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace cudaops::jit::detail {

namespace {

bool starts_with(const std::string& text, const char* prefix) {
  return text.compare(0, std::strlen(prefix), prefix) == 0;
}

Status invalid(size_t index, const std::string& option, const std::string& why) {
  return Status(StatusCode::kInvalidArgument,
                "jit: options[" + std::to_string(index) + "] ('" + option + "'): " + why);
}

// The value of an option spelt "<short><value>", "<short>=<value>" or "<long>=<value>", or
// (when the option is the short or long spelling alone) the next element.
struct Spelling {
  const char* short_form;  // "-D"; may be glued to its value
  const char* long_form;   // "--define-macro"
};

}  // namespace

bool valid_arch(const std::string& arch) {
  size_t pos = 0;
  if (starts_with(arch, "sm_")) {
    pos = 3;
  } else if (starts_with(arch, "compute_")) {
    pos = 8;
  } else {
    return false;
  }
  const size_t digits = pos;
  while (pos < arch.size() && std::isdigit(static_cast<unsigned char>(arch[pos])))
    ++pos;
  if (pos - digits < 2 || pos - digits > 3) return false;
  if (pos == arch.size()) return true;
  return pos + 1 == arch.size() && (arch[pos] == 'a' || arch[pos] == 'f');
}

Status parse_options(const std::vector<std::string>& options, ParsedOptions* out) {
  ParsedOptions parsed;
  // Options taking a value: the canonical spelling NVRTC gets, and how callers may spell them.
  struct Valued {
    Spelling spelling;
    const char* canonical;
    enum Kind { kDefine, kUndefine, kInclude, kPreInclude, kStd, kArch, kRegisters } kind;
  };
  static const Valued kValued[] = {
      {{"-D", "--define-macro"}, "-D", Valued::kDefine},
      {{"-U", "--undefine-macro"}, "-U", Valued::kUndefine},
      {{"-I", "--include-path"}, "--include-path=", Valued::kInclude},
      {{"-include", "--pre-include"}, "--pre-include=", Valued::kPreInclude},
      {{"-std", "--std"}, "--std=", Valued::kStd},
      {{"-arch", "--gpu-architecture"}, "--gpu-architecture=", Valued::kArch},
      {{"-maxrregcount", "--maxrregcount"}, "--maxrregcount=", Valued::kRegisters},
  };
  // Options that write files of their own, or produce no cubin to load.
  static const char* const kRefused[] = {"-time",
                                         "--time",
                                         "-create-pch",
                                         "--create-pch",
                                         "-use-pch",
                                         "--use-pch",
                                         "-pch",
                                         "--pch",
                                         "-pch-dir",
                                         "--pch-dir",
                                         "-dlto",
                                         "--dlink-time-opt",
                                         "-gen-opt-lto",
                                         "--gen-opt-lto",
                                         "-optix-ir",
                                         "--optix-ir",
                                         "-fdevice-syntax-only",
                                         "--fdevice-syntax-only",
                                         "-E",
                                         "--preprocess"};
  static const char* const kAliases[][2] = {
      {"-lineinfo", "--generate-line-info"},
      {"--generate-line-info", "--generate-line-info"},
      {"-G", "--device-debug"},
      {"--device-debug", "--device-debug"},
      {"-use_fast_math", "--use_fast_math"},
      {"--use_fast_math", "--use_fast_math"},
  };

  for (size_t i = 0; i < options.size(); ++i) {
    const std::string& option = options[i];
    if (option.empty()) return invalid(i, option, "an empty option");
    if (option[0] != '-') {
      return invalid(i, option,
                     "not an option (options start with '-'; a value goes in the "
                     "same element, as -DNAME=1 or -I/path)");
    }
    for (const char* refused : kRefused) {
      if (option == refused || starts_with(option, (std::string(refused) + "=").c_str())) {
        return invalid(i, option,
                       "not supported by the JIT (it writes files of its own or "
                       "produces no cubin)");
      }
    }
    bool done = false;
    for (const auto& alias : kAliases) {
      if (option == alias[0]) {
        parsed.nvrtc.emplace_back(alias[1]);
        done = true;
        break;
      }
    }
    if (done) continue;

    for (const Valued& valued : kValued) {
      const std::string short_form = valued.spelling.short_form;
      const std::string long_form = valued.spelling.long_form;
      std::string value;
      bool matched = false;
      if (option == short_form || option == long_form) {
        if (i + 1 >= options.size()) return invalid(i, option, "needs a value after it");
        value = options[++i];
        matched = true;
      } else if (starts_with(option, (long_form + "=").c_str())) {
        value = option.substr(long_form.size() + 1);
        matched = true;
      } else if (starts_with(option, (short_form + "=").c_str())) {
        value = option.substr(short_form.size() + 1);
        matched = true;
      } else if ((valued.kind == Valued::kDefine || valued.kind == Valued::kUndefine ||
                  valued.kind == Valued::kInclude) &&
                 starts_with(option, short_form.c_str())) {
        value = option.substr(short_form.size());
        matched = true;
      }
      if (!matched) continue;
      if (value.empty()) return invalid(i, option, "needs a non-empty value");
      switch (valued.kind) {
        case Valued::kDefine:
        case Valued::kUndefine: {
          const size_t end = valued.kind == Valued::kDefine ? value.find('=') : std::string::npos;
          const std::string name = value.substr(0, end);
          bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
          for (char c : name)
            ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
          if (!ok) return invalid(i, option, "'" + name + "' is not a macro name");
          parsed.nvrtc.push_back(valued.canonical + value);
          break;
        }
        case Valued::kInclude: {
          std::error_code error;
          std::filesystem::path dir = std::filesystem::absolute(value, error);
          if (error) return invalid(i, option, "cannot make the directory absolute");
          std::string text = dir.lexically_normal().string();
          while (text.size() > 1 && text.back() == '/')
            text.pop_back();
          parsed.include_dirs.push_back(text);
          parsed.nvrtc.push_back(valued.canonical + text);
          break;
        }
        case Valued::kPreInclude:
          parsed.pre_includes.push_back(value);
          parsed.nvrtc.push_back(valued.canonical + value);
          break;
        case Valued::kStd: {
          static const char* const kStandards[] = {"c++03", "c++11", "c++14", "c++17", "c++20"};
          bool known = false;
          for (const char* standard : kStandards)
            known = known || value == standard;
          if (!known)
            return invalid(i, option,
                           "the standard must be one of c++03, c++11, c++14, "
                           "c++17 or c++20");
          parsed.has_std = true;
          parsed.nvrtc.push_back(valued.canonical + value);
          break;
        }
        case Valued::kArch:
          if (!valid_arch(value)) {
            return invalid(i, option, "the architecture must be sm_XY or compute_XY (e.g. sm_90)");
          }
          if (!parsed.arch.empty()) return invalid(i, option, "a second -arch option");
          parsed.arch = value;  // appended last by the compiler, after any default
          break;
        case Valued::kRegisters: {
          bool digits = true;
          for (char c : value)
            digits = digits && std::isdigit(static_cast<unsigned char>(c));
          if (!digits || value.size() > 4) return invalid(i, option, "needs a register count");
          parsed.nvrtc.push_back(valued.canonical + value);
          break;
        }
      }
      done = true;
      break;
    }
    if (done) continue;
    // Anything else goes to NVRTC as given; it rejects what it does not know.
    parsed.nvrtc.push_back(option);
  }
  if (!parsed.has_std) parsed.nvrtc.emplace_back("--std=c++17");
  *out = std::move(parsed);
  return Status();
}

}  // namespace cudaops::jit::detail
