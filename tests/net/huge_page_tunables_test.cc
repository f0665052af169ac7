// When turnstiled restarts itself with the huge-page tunables (net/huge_pages.h).
#include <gtest/gtest.h>

#include "net/huge_pages.h"

namespace turnstile::net {
namespace {

constexpr std::string_view kMadvise = "always [madvise] never\n";
constexpr std::string_view kAlways = "[always] madvise never\n";
constexpr std::string_view kNever = "always madvise [never]\n";

TEST(HugePageTunables, SetWhenTheKernelOffersHugePages) {
  EXPECT_EQ(huge_page_tunables(true, kMadvise, std::nullopt),
            "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1");
  EXPECT_EQ(huge_page_tunables(true, kAlways, std::nullopt),
            "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1");
  EXPECT_EQ(huge_page_tunables(true, kMadvise, std::string()),
            "glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1");
}

TEST(HugePageTunables, NotWhenOffOrTheKernelHasNoneOrCannotBeRead) {
  EXPECT_EQ(huge_page_tunables(false, kMadvise, std::nullopt), std::nullopt);
  EXPECT_EQ(huge_page_tunables(true, kNever, std::nullopt), std::nullopt);
  EXPECT_EQ(huge_page_tunables(true, "", std::nullopt), std::nullopt);
  EXPECT_EQ(huge_page_tunables(true, "always madvise never", std::nullopt), std::nullopt);
}

TEST(HugePageTunables, OtherTunablesAreKeptAndOursComeAfter) {
  EXPECT_EQ(huge_page_tunables(true, kMadvise, std::string("glibc.malloc.mxfast=0")),
            "glibc.malloc.mxfast=0:glibc.malloc.hugetlb=1:glibc.malloc.arena_max=1");
}

TEST(HugePageTunables, NeverTwiceAndNeverOverAnOperatorsChoice) {
  // After the restart the variable names hugetlb: no second restart.
  const auto first = huge_page_tunables(true, kMadvise, std::nullopt);
  ASSERT_TRUE(first);
  EXPECT_EQ(huge_page_tunables(true, kMadvise, first), std::nullopt);
  EXPECT_EQ(huge_page_tunables(true, kMadvise, std::string("glibc.malloc.hugetlb=0")),
            std::nullopt);
}

}  // namespace
}  // namespace turnstile::net
