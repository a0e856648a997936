// The JIT without a GPU: hashing, option parsing, the dependency scan, the disk cache on real
// files, and (where NVRTC is installed) compilation for an explicit architecture, the cache's
// behaviour across changes, corruption and processes racing on one directory.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "cudaops/jit.h"
#include "jit/disk_cache.h"
#include "jit/include_scan.h"
#include "jit/options.h"
#include "jit/sha256.h"
#include "support/jit_race.h"

namespace {

namespace fs = std::filesystem;
using cudaops::StatusCode;
using namespace cudaops::jit;
using namespace cudaops::jit::detail;

std::string sha_hex(const std::string& text) {
  return Sha256::hex(Sha256::of(text.data(), text.size()));
}

// A fresh directory under the system's temporary directory, removed afterwards.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "cudaops-jit-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code error;
    fs::remove_all(path_, error);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string read(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

// ---- SHA-256 -------------------------------------------------------------------------------

TEST(JitSha256, MatchesTheStandardVectors) {
  EXPECT_EQ(sha_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(JitSha256, PiecewiseEqualsWhole) {
  std::string text;
  for (int i = 0; i < 1000; ++i)
    text += static_cast<char>(i * 7 + 3);
  for (size_t step : {1u, 3u, 63u, 64u, 65u, 200u}) {
    Sha256 hash;
    for (size_t at = 0; at < text.size(); at += step)
      hash.update(text.substr(at, step));
    EXPECT_EQ(Sha256::hex(hash.finish()), sha_hex(text)) << "step " << step;
  }
}

TEST(JitSha256, FieldsAreLengthPrefixed) {
  Sha256 a, b;
  a.field("ab");
  a.field("c");
  b.field("a");
  b.field("bc");
  EXPECT_NE(a.finish(), b.finish());
}

// ---- options -------------------------------------------------------------------------------

TEST(JitOptions, CanonicalSpellings) {
  ParsedOptions parsed;
  ASSERT_TRUE(
      parse_options({"-DA=1", "-D", "B", "--define-macro=C", "-UD", "-lineinfo", "-use_fast_math",
                     "-G", "-arch=sm_90", "-maxrregcount=64", "-include", "pre.h", "--ftz=true"},
                    &parsed)
          .ok());
  const std::vector<std::string> expected = {"-DA=1",
                                             "-DB",
                                             "-DC",
                                             "-UD",
                                             "--generate-line-info",
                                             "--use_fast_math",
                                             "--device-debug",
                                             "--maxrregcount=64",
                                             "--pre-include=pre.h",
                                             "--ftz=true",
                                             "--std=c++17"};
  EXPECT_EQ(parsed.nvrtc, expected);
  EXPECT_EQ(parsed.arch, "sm_90");
  EXPECT_EQ(parsed.pre_includes, std::vector<std::string>{"pre.h"});
}

TEST(JitOptions, IncludeDirectoriesBecomeAbsolute) {
  ParsedOptions parsed;
  ASSERT_TRUE(
      parse_options({"-Iinclude/", "-I", "/abs/dir", "--include-path=./x/../y"}, &parsed).ok());
  const std::string cwd = fs::current_path().string();
  ASSERT_EQ(parsed.include_dirs.size(), 3u);
  EXPECT_EQ(parsed.include_dirs[0], cwd + "/include");
  EXPECT_EQ(parsed.include_dirs[1], "/abs/dir");
  EXPECT_EQ(parsed.include_dirs[2], cwd + "/y");
  EXPECT_EQ(parsed.nvrtc[0], "--include-path=" + cwd + "/include");
}

TEST(JitOptions, StandardAndArchitecture) {
  ParsedOptions parsed;
  ASSERT_TRUE(parse_options({"-std=c++20", "--gpu-architecture", "compute_90"}, &parsed).ok());
  EXPECT_EQ(parsed.nvrtc, std::vector<std::string>{"--std=c++20"});
  EXPECT_EQ(parsed.arch, "compute_90");
  for (const char* arch : {"sm_75", "sm_90a", "sm_100f", "compute_120", "sm_121"}) {
    EXPECT_TRUE(valid_arch(arch)) << arch;
  }
  for (const char* arch : {"sm90", "sm_9", "sm_90x", "compute_", "gfx90a", "sm_1000"}) {
    EXPECT_FALSE(valid_arch(arch)) << arch;
  }
}

TEST(JitOptions, RefusesWhatItCannotUse) {
  struct Case {
    std::vector<std::string> options;
    const char* message;
  };
  const Case cases[] = {
      {{""}, "options[0] (''): an empty option"},
      {{"-DA", "lineinfo"}, "options[1] ('lineinfo'): not an option"},
      {{"-D"}, "needs a value"},
      {{"-D1X=2"}, "'1X' is not a macro name"},
      {{"-DA-B"}, "'A-B' is not a macro name"},
      {{"-std=c++23"}, "c++03, c++11, c++14, c++17 or c++20"},
      {{"-arch=sm90"}, "sm_XY or compute_XY"},
      {{"-arch=sm_80", "-arch=sm_90"}, "a second -arch option"},
      {{"-time=t.csv"}, "not supported by the JIT"},
      {{"-dlto"}, "not supported by the JIT"},
      {{"--create-pch=x.pch"}, "not supported by the JIT"},
      {{"-maxrregcount=many"}, "needs a register count"},
  };
  for (const Case& c : cases) {
    ParsedOptions parsed;
    const cudaops::Status status = parse_options(c.options, &parsed);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << c.message;
    EXPECT_NE(status.message().find(c.message), std::string::npos) << status.message();
  }
}

// ---- the dependency scan -------------------------------------------------------------------

TEST(JitIncludeScan, FindsDirectivesAndIgnoresComments) {
  const std::string text =
      "#include \"a.h\"\n"
      "  #  include <b/c.h>\n"
      "// #include \"commented.h\"\n"
      "/* #include \"block.h\"\n"
      "   #include \"still_block.h\" */\n"
      "const char* s = \"/* not a comment\"; \n"
      "#include \"after_string.h\"\n"
      "#include \\\n"
      "  \"continued.h\"\n"
      "#include HEADER_MACRO\n"
      "#if __has_include(<optional.h>)\n"
      "#endif\n"
      "#define X 1 // #include \"no.h\"\n";
  const std::vector<IncludeDirective> found = find_includes(text);
  ASSERT_EQ(found.size(), 6u);
  EXPECT_EQ(found[0].name, "a.h");
  EXPECT_TRUE(found[0].quoted);
  EXPECT_EQ(found[1].name, "b/c.h");
  EXPECT_FALSE(found[1].quoted);
  EXPECT_EQ(found[2].name, "after_string.h");
  EXPECT_EQ(found[3].name, "continued.h");
  EXPECT_EQ(found[4].name, "");  // computed
  EXPECT_EQ(found[5].name, "optional.h");
}

TEST(JitIncludeScan, DigestFollowsHeaderContentsTransitively) {
  TempDir dir;
  write(dir / "inc/top.h", "#include \"detail/mid.h\"\n");
  write(dir / "inc/detail/mid.h", "#include \"leaf.h\"\n#include <other.h>\n");
  write(dir / "inc/detail/leaf.h", "#define LEAF 1\n");
  write(dir / "inc2/other.h", "#define OTHER 1\n");
  write(dir / "inc2/unrelated.h", "#define UNRELATED 1\n");
  const std::string source = "#include <top.h>\n__global__ void k() {}\n";
  const std::vector<std::string> dirs = {dir / "inc", dir / "inc2"};
  auto scan = [&]() { return scan_dependencies(source, dir.path(), dirs, {}); };

  const Dependencies first = scan();
  EXPECT_TRUE(first.complete);
  EXPECT_EQ(first.headers.size(), 4u);
  EXPECT_EQ(scan().digest, first.digest);

  write(dir / "inc2/unrelated.h", "#define UNRELATED 2\n");
  EXPECT_EQ(scan().digest, first.digest) << "a header nothing includes is not in the key";

  write(dir / "inc/detail/leaf.h", "#define LEAF 2\n");
  const Dependencies changed = scan();
  EXPECT_NE(changed.digest, first.digest) << "the contents of a nested header are in the key";

  write(dir / "inc/other.h", "#define OTHER 3\n");  // now found before inc2/other.h
  EXPECT_NE(scan().digest, changed.digest) << "a header that shadows another changes the key";
}

TEST(JitIncludeScan, AbsentHeadersAndComputedIncludes) {
  TempDir dir;
  const std::vector<std::string> dirs = {dir / "inc"};
  const std::string source = "#if 0\n#include \"maybe.h\"\n#endif\n";
  const Dependencies before = scan_dependencies(source, dir.path(), dirs, {});
  EXPECT_TRUE(before.complete);
  EXPECT_TRUE(before.headers.empty());
  write(dir / "inc/maybe.h", "// appeared\n");
  EXPECT_NE(scan_dependencies(source, dir.path(), dirs, {}).digest, before.digest)
      << "a header that appears where the compiler would look changes the key";

  const Dependencies computed =
      scan_dependencies("#define H <x.h>\n#include H\n", dir.path(), dirs, {});
  EXPECT_FALSE(computed.complete);
  EXPECT_NE(computed.incomplete_reason.find("computed #include"), std::string::npos);

  write(dir / "inc/loop_a.h", "#include \"loop_b.h\"\n");
  write(dir / "inc/loop_b.h", "#include \"loop_a.h\"\n");
  const Dependencies loop = scan_dependencies("#include <loop_a.h>\n", dir.path(), dirs, {});
  EXPECT_TRUE(loop.complete);
  EXPECT_EQ(loop.headers.size(), 2u);
}

TEST(JitIncludeScan, PreIncludesAreFollowed) {
  TempDir dir;
  write(dir / "inc/pre.h", "#define PRE 1\n");
  const std::vector<std::string> dirs = {dir / "inc"};
  const Dependencies a = scan_dependencies("int x;\n", dir.path(), dirs, {"pre.h"});
  EXPECT_EQ(a.headers.size(), 1u);
  write(dir / "inc/pre.h", "#define PRE 2\n");
  EXPECT_NE(scan_dependencies("int x;\n", dir.path(), dirs, {"pre.h"}).digest, a.digest);
}

TEST(JitIncludeScan, DotDotResolvesThroughLinksAsTheCompilerDoes) {
  // -I inc/link with link -> real/sub: "../common.h" from there is inc/real/common.h, not
  // inc/common.h as a textual collapse would have it.
  TempDir dir;
  write(dir / "inc/real/sub/keep", "");
  write(dir / "inc/real/common.h", "#define COMMON 1\n");
  write(dir / "inc/common.h", "#define DECOY 1\n");
  fs::create_directory_symlink(dir / "inc/real/sub", dir / "inc/link");
  const std::vector<std::string> dirs = {dir / "inc/link"};
  const std::string source = "#include \"../common.h\"\n";
  const Dependencies before = scan_dependencies(source, dir / "src", dirs, {});
  ASSERT_EQ(before.headers.size(), 1u);
  EXPECT_EQ(fs::path(before.headers[0]), fs::canonical(dir / "inc/real/common.h"));
  write(dir / "inc/real/common.h", "#define COMMON 2\n");
  const Dependencies edited = scan_dependencies(source, dir / "src", dirs, {});
  EXPECT_NE(edited.digest, before.digest)
      << "editing the header the compiler reads changes the key";
  write(dir / "inc/common.h", "#define DECOY 2\n");
  EXPECT_EQ(scan_dependencies(source, dir / "src", dirs, {}).digest, edited.digest)
      << "a header the compiler does not read does not";

  // One file under two spellings is hashed once.
  const Dependencies twice = scan_dependencies(
      "#include \"../common.h\"\n#include \"../sub/../common.h\"\n", dir / "inc/link", {}, {});
  EXPECT_EQ(twice.headers.size(), 1u);
}

// ---- the disk cache ------------------------------------------------------------------------

Sha256::Digest key_for(const std::string& text) {
  return Sha256::of(text.data(), text.size());
}

bool has_temporary_files(const std::string& dir) {
  for (const auto& item : fs::directory_iterator(dir)) {
    if (item.path().filename().string().rfind(".tmp-", 0) == 0) return true;
  }
  return false;
}

TEST(JitDiskCache, StoresAndVerifies) {
  TempDir dir;
  const DiskCache cache(dir / "jit", 1 << 20);
  const Sha256::Digest key = key_for("one");
  std::string payload, why;
  EXPECT_EQ(cache.load(key, &payload, &why), DiskCache::Lookup::kMiss);
  ASSERT_TRUE(cache.store(key, "the payload").ok());
  EXPECT_EQ(cache.load(key, &payload, &why), DiskCache::Lookup::kHit);
  EXPECT_EQ(payload, "the payload");
  EXPECT_FALSE(has_temporary_files(dir / "jit"));
  EXPECT_EQ(fs::status(dir / "jit").permissions() & fs::perms::all, fs::perms::owner_all);
}

TEST(JitDiskCache, DetectsAndRemovesCorruptEntries) {
  TempDir dir;
  const DiskCache cache(dir / "jit", 1 << 20);
  const Sha256::Digest key = key_for("k");
  const std::string path = cache.entry_path(key);
  const std::string payload(1000, 'p');
  struct Damage {
    const char* name;
    void (*apply)(const std::string& path);
    const char* why;
  };
  const Damage damages[] = {
      {"truncated", [](const std::string& p) { fs::resize_file(p, fs::file_size(p) - 10); },
       "truncated"},
      {"header only", [](const std::string& p) { fs::resize_file(p, 20); }, "shorter than"},
      {"empty", [](const std::string& p) { fs::resize_file(p, 0); }, "shorter than"},
      {"flipped payload byte",
       [](const std::string& p) {
         std::string text = read(p);
         text[text.size() - 100] ^= 0x40;
         write(p, text);
       },
       "checksum (MAC)"},
      {"flipped size byte",
       [](const std::string& p) {
         std::string text = read(p);
         text[8 + 4 + 32 + 7] = static_cast<char>(text[8 + 4 + 32 + 7] ^ 0x40);
         write(p, text);
       },
       "truncated or too long"},
      {"flipped key byte",
       [](const std::string& p) {
         std::string text = read(p);
         text[20] ^= 1;
         write(p, text);
       },
       "another key"},
      {"not an entry", [](const std::string& p) { write(p, std::string(200, 'x')); },
       "no cache header"},
      {"appended", [](const std::string& p) { std::ofstream(p, std::ios::app) << "extra"; },
       "truncated or too long"},
  };
  for (const Damage& damage : damages) {
    ASSERT_TRUE(cache.store(key, payload).ok());
    damage.apply(path);
    std::string out, why;
    EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kCorrupt) << damage.name;
    EXPECT_NE(why.find(damage.why), std::string::npos) << damage.name << ": " << why;
    EXPECT_FALSE(fs::exists(path)) << damage.name << ": a corrupt entry is removed";
    EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kMiss);
  }
}

TEST(JitDiskCache, EvictsTheLeastRecentlyUsedBeyondItsBound) {
  TempDir dir;
  const std::string payload(1000, 'x');
  const DiskCache cache(dir / "jit", 3500);  // three entries (header included) fit
  std::vector<Sha256::Digest> keys;
  for (int i = 0; i < 3; ++i) {
    keys.push_back(key_for("entry" + std::to_string(i)));
    ASSERT_TRUE(cache.store(keys.back(), payload).ok());
    // Distinct, increasing times, whatever the file system's resolution.
    const timespec times[2] = {{1000 + i, 0}, {1000 + i, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, cache.entry_path(keys.back()).c_str(), times, 0), 0);
  }
  std::string out, why;
  ASSERT_EQ(cache.load(keys[0], &out, &why), DiskCache::Lookup::kHit);  // now the newest
  keys.push_back(key_for("entry3"));
  ASSERT_TRUE(cache.store(keys.back(), payload).ok());
  EXPECT_TRUE(fs::exists(cache.entry_path(keys[0])));
  EXPECT_FALSE(fs::exists(cache.entry_path(keys[1]))) << "the least recently used goes first";
  EXPECT_TRUE(fs::exists(cache.entry_path(keys[2])));
  EXPECT_TRUE(fs::exists(cache.entry_path(keys[3])));
  EXPECT_LE(cache.size_bytes(), 3500u);

  ASSERT_TRUE(cache.clear().ok());
  EXPECT_EQ(cache.size_bytes(), 0u);
}

TEST(JitDiskCache, ConcurrentWritersNeverLeaveABrokenEntry) {
  TempDir dir;
  const DiskCache cache(dir / "jit", 1 << 26);
  const Sha256::Digest key = key_for("shared");
  const std::string payload(1 << 18, 'z');
  std::vector<pid_t> children;
  for (int c = 0; c < 6; ++c) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int failures = 0;
      for (int i = 0; i < 20; ++i) {
        if (!cache.store(key, payload).ok()) ++failures;
        std::string out, why;
        const DiskCache::Lookup lookup = cache.load(key, &out, &why);
        // A reader sees the whole entry, or (between an eviction and a rename) none.
        if (lookup == DiskCache::Lookup::kCorrupt ||
            (lookup == DiskCache::Lookup::kHit && out != payload)) {
          ++failures;
        }
      }
      _exit(failures == 0 ? 0 : 1);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  std::string out, why;
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kHit);
  EXPECT_EQ(out, payload);
  EXPECT_FALSE(has_temporary_files(dir / "jit"));
}

TEST(JitDiskCache, UnwritableDirectoryIsAStatus) {
  const DiskCache cache("/proc/cudaops-cannot-exist/jit", 1 << 20);
  const cudaops::Status status = cache.store(key_for("x"), "payload");
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("/proc/cudaops-cannot-exist/jit"), std::string::npos);
}

// An entry as someone without this user's key would make it: the format and the key digest
// right, the checksum a plain SHA-256 of the payload (what the cache held before it had a MAC).
void plant_entry(const std::string& path, const Sha256::Digest& key, const std::string& payload) {
  std::string file = "CDOPJIT2";
  file += std::string("\x02\0\0\0", 4);
  file.append(reinterpret_cast<const char*>(key.data()), key.size());
  for (int i = 0; i < 8; ++i)
    file.push_back(static_cast<char>(uint64_t{payload.size()} >> (8 * i)));
  const Sha256::Digest digest = Sha256::of(payload.data(), payload.size());
  file.append(reinterpret_cast<const char*>(digest.data()), digest.size());
  file += payload;
  std::remove(path.c_str());
  write(path, file);
  ::chmod(path.c_str(), 0600);
}

TEST(JitDiskCacheTrust, APlantedEntryWithoutTheKeyIsRefused) {
  TempDir dir;
  const DiskCache cache(dir / "jit", 1 << 20);
  const Sha256::Digest key = key_for("victim");
  ASSERT_TRUE(cache.store(key, "genuine").ok());
  EXPECT_EQ(fs::status(dir / "jit/mac.key").permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  plant_entry(cache.entry_path(key), key, "planted");
  std::string out, why;
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kCorrupt);
  EXPECT_NE(why.find("MAC"), std::string::npos) << why;
  EXPECT_NE(out, "planted");
  EXPECT_FALSE(fs::exists(cache.entry_path(key)));

  // Another directory's key (a copied cache) does not verify either.
  const DiskCache other(dir / "other", 1 << 20);
  ASSERT_TRUE(other.store(key, "copied").ok());
  fs::copy_file(other.entry_path(key), cache.entry_path(key));
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kCorrupt);
  EXPECT_NE(why.find("MAC"), std::string::npos) << why;
}

TEST(JitDiskCacheTrust, DirectoriesOthersCanWriteAreNotUsed) {
  TempDir dir;
  const Sha256::Digest key = key_for("k");
  for (const char* which : {"parent", "cache"}) {
    const std::string parent = dir / which;
    const DiskCache cache(parent + "/jit", 1 << 20);
    ASSERT_TRUE(cache.store(key, "payload").ok());
    const std::string target = std::string(which) == "parent" ? parent : parent + "/jit";
    ASSERT_EQ(::chmod(target.c_str(), 0777), 0);
    std::string out, why;
    EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kUntrusted) << which;
    EXPECT_NE(why.find("writable by group or others (mode 0777)"), std::string::npos) << why;
    EXPECT_NE(why.find(target), std::string::npos) << why;
    const cudaops::Status stored = cache.store(key, "payload");
    EXPECT_FALSE(stored.ok()) << which;
    EXPECT_NE(stored.message().find("neither loaded nor stored"), std::string::npos)
        << stored.message();
    EXPECT_FALSE(cache.clear().ok()) << which;
    EXPECT_TRUE(fs::exists(cache.entry_path(key))) << "nothing is touched in such a directory";
    ASSERT_EQ(::chmod(target.c_str(), 0700), 0);
    EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kHit) << which;
  }
}

TEST(JitDiskCacheTrust, AncestorsOthersCanRenameAreNotTrusted) {
  // The cache's grandparent writable by others (no sticky bit): whoever can write it can rename
  // the parent and put another directory of this user's in its place. Refused; a sticky
  // grandparent (as /tmp) is trusted.
  TempDir dir;
  const Sha256::Digest key = key_for("k");
  const std::string top = dir / "top";
  const DiskCache cache(top + "/parent/jit", 1 << 20);
  ASSERT_TRUE(cache.store(key, "payload").ok());
  ASSERT_EQ(::chmod(top.c_str(), 0777), 0);
  std::string out, why;
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kUntrusted);
  EXPECT_NE(why.find("ancestor"), std::string::npos) << why;
  EXPECT_NE(why.find("without the sticky bit"), std::string::npos) << why;
  EXPECT_FALSE(cache.store(key, "payload").ok());
  ASSERT_EQ(::chmod(top.c_str(), 01777), 0);
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kHit) << why;
  ASSERT_EQ(::chmod(top.c_str(), 0700), 0);
  if (::geteuid() == 0) {  // giving a directory to another user needs root
    ASSERT_EQ(::chown(top.c_str(), 65534, 65534), 0);
    EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kUntrusted);
    EXPECT_NE(why.find("parent/..) owned by another user (uid 65534)"), std::string::npos) << why;
    ASSERT_EQ(::chown(top.c_str(), 0, 0), 0);
  }
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kHit) << why;
}

TEST(JitDiskCacheTrust, OtherOwnersAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "giving a file to another user needs root";
  TempDir dir;
  const DiskCache cache(dir / "jit", 1 << 20);
  const Sha256::Digest key = key_for("k");
  ASSERT_TRUE(cache.store(key, "payload").ok());
  std::string out, why;
  ASSERT_EQ(::chown(cache.entry_path(key).c_str(), 65534, 65534), 0);
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kCorrupt);
  EXPECT_NE(why.find("owned by another user (uid 65534"), std::string::npos) << why;

  ASSERT_TRUE(cache.store(key, "payload").ok());
  ASSERT_EQ(::chown((dir / "jit").c_str(), 65534, 65534), 0);
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kUntrusted);
  EXPECT_NE(why.find("owned by another user"), std::string::npos) << why;
  EXPECT_FALSE(cache.store(key, "payload").ok());
  ASSERT_EQ(::chown((dir / "jit").c_str(), 0, 0), 0);

  ASSERT_EQ(::chown((dir / "jit/mac.key").c_str(), 65534, 65534), 0);
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kCorrupt);
  EXPECT_NE(why.find("key file is owned by another user"), std::string::npos) << why;
}

TEST(JitDiskCacheTrust, EntriesThatAreNotPlainFilesOfThisUser) {
  TempDir dir;
  const DiskCache cache(dir / "jit", 1 << 20);
  const Sha256::Digest key = key_for("k");
  ASSERT_TRUE(cache.store(key, "payload").ok());
  const std::string path = cache.entry_path(key);
  std::string out, why;

  // A FIFO is refused at once, not waited on.
  fs::remove(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kCorrupt);
  EXPECT_NE(why.find("not a regular file"), std::string::npos) << why;
  EXPECT_FALSE(fs::exists(fs::symlink_status(path)));

  // A link is not followed, and what it points at is left alone.
  write(dir / "precious", "do not touch");
  fs::create_symlink(dir / "precious", path);
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kCorrupt);
  EXPECT_NE(why.find("symbolic link"), std::string::npos) << why;
  fs::create_symlink(dir / "precious", path);
  ASSERT_TRUE(cache.store(key, "payload").ok());
  EXPECT_EQ(read(dir / "precious"), "do not touch");
  EXPECT_FALSE(fs::is_symlink(path));

  // Group-writable.
  ASSERT_EQ(::chmod(path.c_str(), 0660), 0);
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kCorrupt);
  EXPECT_NE(why.find("writable by group or others"), std::string::npos) << why;

  // Huge: refused from its size, before anything is read.
  ASSERT_TRUE(cache.store(key, "payload").ok());
  fs::resize_file(path, DiskCache::kMaxEntryBytes + 1);
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kCorrupt);
  EXPECT_NE(why.find("larger than"), std::string::npos) << why;

  // The cache directory itself a link (to a directory this user owns): not used.
  ASSERT_TRUE(cache.store(key, "payload").ok());
  fs::rename(dir / "jit", dir / "real");
  fs::create_directory_symlink(dir / "real", dir / "jit");
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kUntrusted);
  EXPECT_NE(why.find("symbolic link"), std::string::npos) << why;
}

// Thousands of damaged entries, made from a good one by random cuts, flipped bytes, random
// header fields and random files: each is refused as corrupt (and removed), none crashes or is
// taken, and the good entry stored again is a hit.
TEST(JitDiskCacheFuzz, DamagedEntriesAreRefused) {
  TempDir dir;
  const DiskCache cache(dir / "jit", 1 << 26);
  const Sha256::Digest key = key_for("fuzzed");
  std::mt19937_64 rng(20261125);
  std::string payload(3000, '\0');
  for (char& c : payload)
    c = static_cast<char>(rng());
  ASSERT_TRUE(cache.store(key, payload).ok());
  const std::string path = cache.entry_path(key);
  const std::string good = read(path);
  constexpr size_t kHeader = 8 + 4 + 32 + 8 + 32;
  int refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string bad = good;
    switch (rng() % 6) {
      case 0:  // cut anywhere
        bad.resize(rng() % good.size());
        break;
      case 1:  // a few bytes flipped anywhere
        for (int n = 1 + static_cast<int>(rng() % 4); n > 0; --n)
          bad[rng() % bad.size()] ^= static_cast<char>(1 + rng() % 255);
        break;
      case 2:  // a random header field (format, size, MAC) of random bytes
        for (size_t b = 8 + rng() % (kHeader - 8), n = 1 + rng() % 12; n > 0 && b < kHeader;
             ++b, --n)
          bad[b] = static_cast<char>(rng());
        break;
      case 3:  // random bytes appended
        bad.append(1 + rng() % 64, static_cast<char>(rng()));
        break;
      case 4:  // a random file of any length under two entries
        bad.assign(rng() % (2 * good.size()), '\0');
        for (char& c : bad)
          c = static_cast<char>(rng());
        break;
      default:  // a claimed size far beyond the file
        for (int b = 0; b < 8; ++b)
          bad[8 + 4 + 32 + b] = static_cast<char>(0xff);
        break;
    }
    if (bad == good) continue;
    write(path, bad);
    std::string out, why;
    const DiskCache::Lookup lookup = cache.load(key, &out, &why);
    ASSERT_EQ(lookup, DiskCache::Lookup::kCorrupt) << "case " << i << ": " << why;
    ASSERT_FALSE(fs::exists(path)) << "case " << i;
    ++refused;
  }
  EXPECT_GT(refused, 2900);
  ASSERT_TRUE(cache.store(key, payload).ok());
  std::string out, why;
  EXPECT_EQ(cache.load(key, &out, &why), DiskCache::Lookup::kHit);
  EXPECT_EQ(out, payload);
}

TEST(JitDiskCacheTrust, ClearRemovesNotesAndPlantedFiles) {
  TempDir dir;
  const DiskCache cache(dir / "jit", 1 << 20);
  const DiskCache notes(dir / "jit", 1 << 20, ".note");
  ASSERT_TRUE(cache.store(key_for("a"), "kernel").ok());
  ASSERT_TRUE(notes.store(key_for("b"), "note").ok());
  std::string out, why;
  EXPECT_EQ(notes.load(key_for("b"), &out, &why), DiskCache::Lookup::kHit);
  EXPECT_EQ(cache.load(key_for("b"), &out, &why), DiskCache::Lookup::kMiss);
  fs::create_symlink(dir / "elsewhere", dir / "jit/x.entry");
  EXPECT_EQ(cache.size_bytes(), notes.size_bytes());
  ASSERT_TRUE(cache.clear().ok());
  std::vector<std::string> left;
  for (const auto& item : fs::directory_iterator(dir / "jit"))
    left.push_back(item.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"mac.key"});
}

// ---- compilation for an explicit architecture (NVRTC, no GPU) -------------------------------

const char* const kSource = R"(#include "jit_test_header.h"
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i] + OFFSET;
}
template <typename T> __global__ void scale(T* x, T a, int n) {
  __shared__ T tile[128];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x % 128] = i < n ? x[i] : T(0);
  __syncthreads();
  if (i < n) x[i] = tile[threadIdx.x % 128] * a;
}
__device__ float helper(float v) { return v * 2.0f; }
)";

class JitCompile : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string description;
    if (!nvrtc_description(&description).ok()) GTEST_SKIP() << "NVRTC is not installed";
    saved_ = cache_config();
    CacheConfig config;
    config.directory = dir_.path() + "/cache";
    ASSERT_TRUE(set_cache_config(config).ok());
    ASSERT_TRUE(clear_cache().ok());
    write(dir_ / "src/jit_test_header.h", "#define OFFSET 0.0f\n");
  }
  void TearDown() override {
    (void)clear_cache(true, false);
    (void)set_cache_config(saved_);
  }
  CompileRequest request(const std::string& kernel) const {
    CompileRequest r;
    r.source = kSource;
    r.kernel = kernel;
    r.file_name = dir_ / "src/test_kernels.cu";
    r.options = {"-arch=sm_90"};
    return r;
  }
  std::string entry_path(const std::string& key) const {
    return dir_.path() + "/cache/jit-v2/" + key + ".entry";
  }
  TempDir dir_;
  CacheConfig saved_;
};

TEST_F(JitCompile, CompilesThenHitsMemoryThenDisk) {
  Kernel kernel;
  ASSERT_TRUE(compile(request("saxpy"), &kernel).ok());
  EXPECT_EQ(kernel.info().source, CacheSource::kCompiled);
  EXPECT_EQ(kernel.info().lowered_name, "saxpy");
  EXPECT_EQ(kernel.info().arch, "sm_90");
  EXPECT_EQ(kernel.info().headers_hashed, 1);
  EXPECT_TRUE(kernel.info().not_stored_reason.empty()) << kernel.info().not_stored_reason;
  EXPECT_GT(kernel.resources().registers, 0);
  EXPECT_EQ(kernel.resources().spill_store_bytes, 0);
  EXPECT_FALSE(kernel.cubin().empty());
  EXPECT_NE(kernel.ptx().find(".entry saxpy("), std::string::npos);
  EXPECT_TRUE(fs::exists(entry_path(kernel.info().key)));

  std::string key;
  ASSERT_TRUE(cache_key(request("saxpy"), &key).ok());
  EXPECT_EQ(key, kernel.info().key);

  Kernel again;
  ASSERT_TRUE(compile(request("saxpy"), &again).ok());
  EXPECT_EQ(again.info().source, CacheSource::kMemoryCache);
  EXPECT_EQ(kernel.info().source, CacheSource::kCompiled) << "each call keeps its own facts";

  ASSERT_TRUE(clear_cache(true, false).ok());
  Kernel from_disk;
  ASSERT_TRUE(compile(request("saxpy"), &from_disk).ok());
  EXPECT_EQ(from_disk.info().source, CacheSource::kDiskCache);
  EXPECT_EQ(from_disk.cubin(), kernel.cubin());
  EXPECT_EQ(from_disk.ptx(), kernel.ptx());
  EXPECT_EQ(from_disk.resources().registers, kernel.resources().registers);
  EXPECT_EQ(from_disk.info().lowered_name, "saxpy");
}

TEST_F(JitCompile, TemplateKernelThroughANameExpression) {
  Kernel kernel;
  const cudaops::Status status = compile(request("scale<float>"), &kernel);
  ASSERT_TRUE(status.ok()) << status.to_string();
  EXPECT_EQ(kernel.info().lowered_name, "_Z5scaleIfEvPT_S0_i");
  EXPECT_EQ(kernel.resources().static_shared_bytes, 512);
  EXPECT_EQ(kernel.resources().barriers, 1);
  Kernel other;
  ASSERT_TRUE(compile(request("scale<double>"), &other).ok());
  EXPECT_NE(other.info().key, kernel.info().key);
  EXPECT_EQ(other.resources().static_shared_bytes, 1024);
}

TEST_F(JitCompile, HeaderContentChangesTheKey) {
  Kernel before;
  ASSERT_TRUE(compile(request("saxpy"), &before).ok());
  write(dir_ / "src/jit_test_header.h", "#define OFFSET 1.0f\n");
  Kernel after;
  ASSERT_TRUE(compile(request("saxpy"), &after).ok());
  EXPECT_NE(after.info().key, before.info().key);
  EXPECT_EQ(after.info().source, CacheSource::kCompiled);
  EXPECT_NE(after.ptx(), before.ptx());
  write(dir_ / "src/jit_test_header.h", "#define OFFSET 0.0f\n");
  Kernel back;
  ASSERT_TRUE(compile(request("saxpy"), &back).ok());
  EXPECT_EQ(back.info().key, before.info().key);
  EXPECT_EQ(back.info().source, CacheSource::kMemoryCache);
}

TEST_F(JitCompile, OptionsAndArchitectureChangeTheKey) {
  std::string base, defined, other_arch, lineinfo;
  ASSERT_TRUE(cache_key(request("saxpy"), &base).ok());
  CompileRequest r = request("saxpy");
  r.options.push_back("-DEXTRA=1");
  ASSERT_TRUE(cache_key(r, &defined).ok());
  r = request("saxpy");
  r.options = {"-arch=sm_80"};
  ASSERT_TRUE(cache_key(r, &other_arch).ok());
  r = request("saxpy");
  r.options.push_back("-lineinfo");
  ASSERT_TRUE(cache_key(r, &lineinfo).ok());
  EXPECT_NE(base, defined);
  EXPECT_NE(base, other_arch);
  EXPECT_NE(base, lineinfo);
  EXPECT_EQ(base.size(), 64u);
}

TEST_F(JitCompile, CorruptEntryIsRecompiled) {
  Kernel first;
  ASSERT_TRUE(compile(request("saxpy"), &first).ok());
  const std::string path = entry_path(first.info().key);
  std::string text = read(path);
  text[text.size() / 2] ^= 0x10;
  write(path, text);
  ASSERT_TRUE(clear_cache(true, false).ok());
  Kernel second;
  ASSERT_TRUE(compile(request("saxpy"), &second).ok());
  EXPECT_EQ(second.info().source, CacheSource::kCompiled);
  EXPECT_TRUE(second.info().replaced_corrupt_entry);
  EXPECT_EQ(second.cubin(), first.cubin());
  ASSERT_TRUE(clear_cache(true, false).ok());
  Kernel third;
  ASSERT_TRUE(compile(request("saxpy"), &third).ok());
  EXPECT_EQ(third.info().source, CacheSource::kDiskCache) << "the rewritten entry verifies";
}

TEST_F(JitCompile, AWorldWritableCacheIsNeitherReadNorWritten) {
  Kernel first;
  ASSERT_TRUE(compile(request("saxpy"), &first).ok());
  const std::string dir = dir_.path() + "/cache/" + kCacheSubdirectory;
  // Only the cache's own files: kernels' entries, NVRTC notes, the key; nothing written
  // through a predictable name (a planted link there would be followed).
  for (const auto& item : fs::directory_iterator(dir)) {
    const std::string name = item.path().filename().string();
    EXPECT_TRUE(name == "mac.key" || name.size() == 64 + 6 || name.size() == 64 + 5) << name;
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(item.path()))) << name;
  }
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  ASSERT_TRUE(clear_cache(true, false).ok());
  Kernel second;
  ASSERT_TRUE(compile(request("saxpy"), &second).ok());
  EXPECT_EQ(second.info().source, CacheSource::kCompiled);
  EXPECT_NE(second.info().not_loaded_reason.find("writable by group or others"), std::string::npos)
      << second.info().not_loaded_reason;
  EXPECT_NE(second.info().not_stored_reason.find("writable by group or others"), std::string::npos)
      << second.info().not_stored_reason;
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);
}

TEST_F(JitCompile, ClearRemovesEverythingButTheKey) {
  Kernel kernel;
  ASSERT_TRUE(compile(request("saxpy"), &kernel).ok());
  ASSERT_TRUE(clear_cache().ok());
  std::vector<std::string> left;
  for (const auto& item : fs::directory_iterator(dir_.path() + "/cache/" + kCacheSubdirectory)) {
    left.push_back(item.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"mac.key"});
}

TEST_F(JitCompile, CompileErrorCarriesTheLogWithFileAndLine) {
  CompileRequest r = request("broken");
  r.source = "extern \"C\" __global__ void broken(float* x) {\n  x[0] = undefined_name;\n}\n";
  r.file_name = "broken.cu";
  Kernel kernel;
  const cudaops::Status status = compile(r, &kernel);
  EXPECT_EQ(status.code(), StatusCode::kCompileError);
  EXPECT_NE(status.message().find("broken.cu(2): error"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("undefined_name"), std::string::npos);
  EXPECT_FALSE(kernel.valid());
}

TEST_F(JitCompile, NamesThatAreNotKernels) {
  Kernel kernel;
  cudaops::Status status = compile(request("helper"), &kernel);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("not a __global__ function"), std::string::npos)
      << status.message();
  status = compile(request("no_such_kernel"), &kernel);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("no_such_kernel"), std::string::npos) << status.message();
}

TEST_F(JitCompile, BadRequests) {
  Kernel kernel;
  CompileRequest r = request("saxpy");
  r.source.clear();
  EXPECT_EQ(compile(r, &kernel).code(), StatusCode::kInvalidArgument);
  r = request("");
  EXPECT_EQ(compile(r, &kernel).code(), StatusCode::kInvalidArgument);
  r = request("saxpy");
  r.options.push_back("--no-such-nvrtc-option");
  const cudaops::Status status = compile(r, &kernel);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("--no-such-nvrtc-option"), std::string::npos) << status.message();
  EXPECT_EQ(compile(request("saxpy"), nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Kernel().launch(1, 1, nullptr, 0, 0, nullptr).code(), StatusCode::kInvalidArgument);
}

TEST_F(JitCompile, DisabledCacheWritesNothing) {
  CacheConfig config = cache_config();
  config.disk_enabled = false;
  ASSERT_TRUE(set_cache_config(config).ok());
  Kernel kernel;
  ASSERT_TRUE(compile(request("saxpy"), &kernel).ok());
  EXPECT_NE(kernel.info().not_stored_reason.find("disabled"), std::string::npos);
  EXPECT_FALSE(fs::exists(entry_path(kernel.info().key)));
}

TEST_F(JitCompile, ComputeTargetGivesPtxOnly) {
  CompileRequest r = request("saxpy");
  r.options = {"-arch=compute_90"};
  Kernel kernel;
  ASSERT_TRUE(compile(r, &kernel).ok());
  EXPECT_TRUE(kernel.cubin().empty());
  EXPECT_EQ(kernel.resources().registers, -1);
  EXPECT_NE(kernel.ptx().find(".entry saxpy("), std::string::npos);
}

TEST_F(JitCompile, ProcessesRacingOnOneDirectory) {
  CompileRequest r = request("scale<int>");
  ASSERT_TRUE(cudaops::test::CompileInRacingProcesses(r, 4));
  Kernel kernel;
  ASSERT_TRUE(compile(r, &kernel).ok());
  EXPECT_EQ(kernel.info().source, CacheSource::kDiskCache);
  EXPECT_FALSE(has_temporary_files(dir_.path() + "/cache/jit-v2"));
}

}  // namespace
