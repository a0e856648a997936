// The fat binary reader and the loader's choice of code, without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "cudaops/kernels.h"
#include "harness/fatbin.h"

namespace cudaops::harness {
namespace {

FatbinEntry Sass(int arch) {
  FatbinEntry e;
  e.arch = arch;
  return e;
}

FatbinEntry Ptx(int arch) {
  FatbinEntry e;
  e.ptx = true;
  e.arch = arch;
  return e;
}

void ExpectChoice(const std::vector<FatbinEntry>& entries, int device, CodeKind kind, int arch) {
  const CodeChoice c = choose_code(entries, device);
  EXPECT_EQ(c.kind, kind) << "device " << device;
  EXPECT_EQ(c.arch, arch) << "device " << device;
}

TEST(ChooseCode, ExactSassFirst) {
  ExpectChoice({Sass(80), Sass(90), Ptx(90)}, 90, CodeKind::kSass, 90);
}

TEST(ChooseCode, OlderMinorOfTheSameMajorRuns) {
  ExpectChoice({Sass(80), Ptx(80)}, 86, CodeKind::kSass, 80);
  ExpectChoice({Sass(80), Sass(86), Ptx(80)}, 89, CodeKind::kSass, 86);
  ExpectChoice({Sass(120)}, 121, CodeKind::kSass, 120);
}

TEST(ChooseCode, NewerMinorOrOtherMajorNeverRuns) {
  ExpectChoice({Sass(86)}, 80, CodeKind::kNone, 0);
  ExpectChoice({Sass(80), Sass(90)}, 100, CodeKind::kNone, 0);
}

TEST(ChooseCode, PtxWhenNoSassMatches) {
  ExpectChoice({Sass(80), Sass(90), Ptx(90)}, 100, CodeKind::kPtx, 90);
  ExpectChoice({Ptx(75), Ptx(90)}, 89, CodeKind::kPtx, 75);
  ExpectChoice({Ptx(121)}, 90, CodeKind::kNone, 0);
}

TEST(ArchName, Spelling) {
  EXPECT_EQ(arch_name(90, false), "sm_90");
  EXPECT_EQ(arch_name(121, true), "compute_121");
}

TEST(ReadFatbins, RefusesWhatIsNotAnElfFile) {
  FatbinContents c;
  const Status s = read_fatbins("/proc/self/cmdline", &c);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not a 64-bit little-endian ELF"), std::string::npos) << s.message();
  EXPECT_EQ(read_fatbins("/nonexistent/file", &c).code(), StatusCode::kInvalidArgument);
}

// The binary that holds libcudaops (its shared library, or this test when linked statically)
// carries at least one fat binary per kernel family, each with SASS.
TEST(ReadFatbins, TheLibraryCarriesCodeForEveryFamily) {
  const std::string path = binary_of(reinterpret_cast<const void*>(&kernel_family_count));
  ASSERT_FALSE(path.empty());
  FatbinContents c;
  const Status s = read_fatbins(path, &c);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_GE(c.fatbins, kernel_family_count()) << path;
  int sass = 0;
  for (const FatbinEntry& e : c.entries) {
    EXPECT_GE(e.arch, 50);
    EXPECT_LT(e.fatbin, c.fatbins);
    EXPECT_GT(e.payload_size, 0);
    sass += e.ptx ? 0 : 1;
  }
  EXPECT_GE(sass, kernel_family_count());
  // Kernel names are in the cubins' symbol tables (when not compressed): each family's kernel
  // template lies in the fat binary of each translation unit that instantiates it (one per dtype
  // for the norms and top-k).
  const std::pair<const char*, size_t> families[] = {{"elementwise_vec_kernel", 1},
                                                     {"softmax_streamed", 1},
                                                     {"norm_streamed", 3},
                                                     {"reduce_partials_kernel", 1},
                                                     {"topk_values_kernel", 3}};
  for (const auto& [name, units] : families) {
    EXPECT_EQ(fatbins_holding(c, name).size(), units) << name;
  }
  EXPECT_TRUE(fatbins_holding(c, "no_such_kernel_in_libcudaops").empty());
}

TEST(KernelFamilies, CountAndBadArguments) {
  // Every family that registered itself next to its code, k-means and the index too, by name
  // (asking for a family's name needs no device: the error comes after the name is filled).
  EXPECT_EQ(kernel_family_count(), 9);
  KernelFamilyInfo info;
  std::vector<std::string> names;
  for (int i = 0; i < kernel_family_count(); ++i) {
    (void)kernel_family_info(i, &info);
    names.emplace_back(info.name != nullptr ? info.name : "");
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"attention_merge", "elementwise", "ivf_build", "ivf_search",
                                      "kmeans", "norm", "rowwise_reduce", "softmax", "topk"}));
  EXPECT_EQ(kernel_family_info(-1, &info).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(kernel_family_info(kernel_family_count(), &info).code(), StatusCode::kInvalidArgument);
  const Status s = kernel_family_info(0, nullptr);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("info"), std::string::npos);
}

}  // namespace
}  // namespace cudaops::harness
