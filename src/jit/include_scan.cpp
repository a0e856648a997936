#include "jit/include_scan.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cctype>
#include <fstream>
#include <iterator>
#include <map>

namespace cudaops::jit::detail {

namespace {

// The text with comments replaced by a space, line continuations joined and string and character
// literals kept (so that "//" or "/*" inside them starts nothing). Newlines are kept.
std::string strip_comments(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  enum { kCode, kLine, kBlock, kString, kChar } state = kCode;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    if (c == '\\' &&
        (next == '\n' || (next == '\r' && i + 2 < text.size() && text[i + 2] == '\n'))) {
      i += next == '\n' ? 1 : 2;  // a continued line: joined, in every state
      continue;
    }
    switch (state) {
      case kCode:
        if (c == '/' && next == '/') {
          state = kLine;
          ++i;
        } else if (c == '/' && next == '*') {
          state = kBlock;
          out += ' ';
          ++i;
        } else {
          if (c == '"') state = kString;
          if (c == '\'') state = kChar;
          out += c;
        }
        break;
      case kLine:
        if (c == '\n') {
          state = kCode;
          out += c;
        }
        break;
      case kBlock:
        if (c == '*' && next == '/') {
          state = kCode;
          ++i;
        } else if (c == '\n') {
          out += c;
        }
        break;
      case kString:
      case kChar:
        out += c;
        if (c == '\\' && next != '\0') {
          out += next;
          ++i;
        } else if ((state == kString && c == '"') || (state == kChar && c == '\'') || c == '\n') {
          state = kCode;
        }
        break;
    }
  }
  return out;
}

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v';
}

constexpr off_t kMaxHeaderBytes = off_t{64} << 20;

// Reads a regular file and names it by its real path (links and ".." resolved by the OS).
// `too_large`: it is there but over kMaxHeaderBytes, and was not read.
bool read_file(const std::string& path, std::string* contents, std::string* real, bool* too_large) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) return false;
  struct stat info {};
  if (stat(resolved, &info) != 0 || !S_ISREG(info.st_mode)) return false;
  if (info.st_size > kMaxHeaderBytes) {
    *too_large = true;
    return false;
  }
  std::ifstream file(resolved, std::ios::binary);
  if (!file) return false;
  contents->assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  *real = resolved;
  return !file.bad();
}

std::string join(const std::string& dir, const std::string& name) {
  if (!name.empty() && name[0] == '/') return name;
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

class Scanner {
 public:
  explicit Scanner(const std::vector<std::string>& include_dirs) : include_dirs_(include_dirs) {}

  void scan(std::string_view text, const std::string& dir, int depth) {
    for (const IncludeDirective& include : find_includes(text)) {
      if (include.name.empty()) {
        result_.complete = false;
        result_.incomplete_reason = "a computed #include (a macro) cannot be followed";
        hash_.field("computed");
        continue;
      }
      resolve(include.name, include.quoted, dir, depth);
    }
  }

  void resolve(const std::string& name, bool quoted, const std::string& dir, int depth) {
    hash_.field(quoted ? "quoted" : "angled");
    hash_.field(name);
    if (quoted) hash_.field(dir);
    std::vector<std::string> candidates;
    if (quoted || name[0] == '/') candidates.push_back(join(dir, name));
    if (name[0] != '/') {
      for (const std::string& include_dir : include_dirs_)
        candidates.push_back(join(include_dir, name));
    }
    for (const std::string& candidate : candidates) {
      // Opened as given, so that ".." resolves through links as the compiler's open() does; the
      // same file reached by two spellings is read once, by its real path.
      std::string contents;
      std::string real;
      bool too_large = false;
      if (!read_file(candidate, &contents, &real, &too_large)) {
        if (!too_large) continue;
        result_.complete = false;
        result_.incomplete_reason = "a header larger than 64 MiB is not hashed: " + candidate;
        hash_.field("too large");
        return;
      }
      auto known = digests_.find(real);
      if (known == digests_.end()) {
        known = digests_.emplace(real, Sha256::of(contents.data(), contents.size())).first;
        result_.headers.push_back(real);
        hash_.field(real);
        hash_.update(known->second.data(), known->second.size());
        if (depth > 200) {
          result_.complete = false;
          result_.incomplete_reason = "#include nesting deeper than 200";
          return;
        }
        // Its own quoted includes are looked up beside the name it was reached by.
        scan(contents, dirname(candidate), depth + 1);
        return;
      }
      hash_.field(real);
      hash_.update(known->second.data(), known->second.size());
      return;
    }
    hash_.field("absent");
  }

  Dependencies finish() {
    result_.digest = hash_.finish();
    return std::move(result_);
  }

 private:
  const std::vector<std::string>& include_dirs_;
  std::map<std::string, Sha256::Digest> digests_;
  Sha256 hash_;
  Dependencies result_;
};

}  // namespace

std::vector<IncludeDirective> find_includes(std::string_view text) {
  const std::string code = strip_comments(text);
  std::vector<IncludeDirective> includes;
  size_t pos = 0;
  while (pos < code.size()) {
    size_t end = code.find('\n', pos);
    if (end == std::string::npos) end = code.size();
    size_t i = pos;
    while (i < end && is_space(code[i]))
      ++i;
    if (i < end && code[i] == '#') {
      ++i;
      while (i < end && is_space(code[i]))
        ++i;
      size_t word = i;
      while (i < end && (std::isalpha(static_cast<unsigned char>(code[i])) || code[i] == '_'))
        ++i;
      const std::string_view directive(code.data() + word, i - word);
      if (directive == "include" || directive == "include_next" || directive == "import") {
        while (i < end && is_space(code[i]))
          ++i;
        IncludeDirective include;
        if (i < end && (code[i] == '"' || code[i] == '<')) {
          const char close = code[i] == '"' ? '"' : '>';
          const size_t close_at = code.find(close, i + 1);
          if (close_at != std::string::npos && close_at < end && close_at > i + 1) {
            include.name = code.substr(i + 1, close_at - i - 1);
            include.quoted = close == '"';
          }
        }
        includes.push_back(include);
      }
    }
    // __has_include(<name>) or ("name") anywhere: the compiler looks the name up.
    for (size_t at = code.find("__has_include", pos); at != std::string::npos && at < end;
         at = code.find("__has_include", at + 1)) {
      size_t j = at + 13;
      if (j < end && code.compare(j, 5, "_next") == 0) j += 5;
      while (j < end && is_space(code[j]))
        ++j;
      if (j >= end || code[j] != '(') continue;
      ++j;
      while (j < end && is_space(code[j]))
        ++j;
      if (j < end && (code[j] == '"' || code[j] == '<')) {
        const char close = code[j] == '"' ? '"' : '>';
        const size_t close_at = code.find(close, j + 1);
        if (close_at != std::string::npos && close_at < end && close_at > j + 1) {
          includes.push_back({code.substr(j + 1, close_at - j - 1), close == '"'});
        }
      }
    }
    pos = end + 1;
  }
  return includes;
}

Dependencies scan_dependencies(std::string_view source, const std::string& source_dir,
                               const std::vector<std::string>& include_dirs,
                               const std::vector<std::string>& pre_includes) {
  Scanner scanner(include_dirs);
  for (const std::string& header : pre_includes)
    scanner.resolve(header, true, source_dir, 0);
  scanner.scan(source, source_dir, 0);
  return scanner.finish();
}

}  // namespace cudaops::jit::detail
