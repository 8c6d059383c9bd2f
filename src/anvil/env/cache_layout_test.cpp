// Tests of the cache's layout: every area named once, `anvil cache clear` removes exactly the areas
// it says and keeps the others, `anvil cache stats` lists every area, and no code outside
// cache_layout.cpp builds a path under the cache by hand (C++) or names an area it does not know
// (Python).
#include "anvil/env/cache_layout.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <ctime>
#include <regex>
#include <set>

#include "anvil/util/fs.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

const std::string kSource = ANVIL_SOURCE_DIR;

TEST(CacheLayout, EveryAreaOnceWithItsDirectory) {
  std::set<std::string> dirs;
  std::set<int> areas;
  for (const auto& a : cache_areas()) {
    EXPECT_TRUE(dirs.insert(a.dir).second) << a.dir;
    EXPECT_TRUE(areas.insert(static_cast<int>(a.area)).second) << a.dir;
    EXPECT_EQ(cache_dir(fs::path("/c"), a.area), fs::path("/c") / a.dir);
  }
  EXPECT_EQ(cache_dir(fs::path("/c"), CacheArea::kServe), fs::path("/c/serve"));
  EXPECT_FALSE(cache_area(CacheArea::kServe).cleared);  // accepted requests are never a cache entry
  EXPECT_TRUE(cache_area(CacheArea::kVet).cleared);
}

TEST(CacheLayout, ClearRemovesWhatItSaysAndStatsListsEveryArea) {
  fs::path cache = make_temp_dir(fs::temp_directory_path(), "anvil-cache-layout");
  std::string err;
  for (const auto& a : cache_areas()) {
    ASSERT_TRUE(write_file_atomic(cache_dir(cache, a.area) / "sub" / "entry.json", "{}", &err)) << err;
  }
  SubprocessOptions so;
  so.env["ANVIL_CACHE"] = cache.string();
  SubprocessResult stats = run_subprocess({ANVIL_BINARY, "cache", "stats"}, so);
  ASSERT_EQ(stats.exit_code, 0) << stats.output;
  for (const auto& a : cache_areas()) {
    EXPECT_TRUE(std::regex_search(stats.output, std::regex("(^|\n)" + std::string(a.dir) + " +1 files ")))
        << a.dir << "\n" << stats.output;
  }
  SubprocessResult clear = run_subprocess({ANVIL_BINARY, "cache", "clear"}, so);
  ASSERT_EQ(clear.exit_code, 0) << clear.output;
  std::error_code ec;
  for (const auto& a : cache_areas()) {
    EXPECT_EQ(fs::exists(cache_dir(cache, a.area) / "sub" / "entry.json", ec), !a.cleared) << a.dir;
    if (!a.cleared) {
      EXPECT_NE(clear.output.find(std::string(a.dir) + "/ ("), std::string::npos) << clear.output;
    }
  }
  remove_tree(cache);
}

// What a killed anvil left in tmp/ (an evaluation's private copy, a build's stage) goes once it is a
// day old; what is younger may be a live process's and stays.
TEST(CacheLayout, StaleTemporaryEntriesAreSwept) {
  fs::path cache = make_temp_dir(fs::temp_directory_path(), "anvil-cache-sweep");
  fs::path tmp = cache_dir(cache, CacheArea::kTmp);
  std::string err;
  ASSERT_TRUE(write_file_atomic(tmp / "eval-old" / "candidate" / "model_new.py", "x", &err)) << err;
  ASSERT_TRUE(write_file_atomic(tmp / "stage-old" / "kernels" / "a.cpp", "x", &err)) << err;
  ASSERT_TRUE(write_file_atomic(tmp / "eval-new" / "candidate" / "model_new.py", "x", &err)) << err;
  fs::create_symlink("/", tmp / "link-old");
  timespec old[2] = {{0, UTIME_OMIT}, {time(nullptr) - 25 * 3600, 0}};
  for (const char* name : {"eval-old", "stage-old", "link-old"}) {
    ASSERT_EQ(::utimensat(AT_FDCWD, (tmp / name).c_str(), old, AT_SYMLINK_NOFOLLOW), 0) << name;
  }
  EXPECT_EQ(sweep_stale_tmp(cache), 3u);
  std::error_code ec;
  EXPECT_FALSE(fs::exists(tmp / "eval-old", ec));
  EXPECT_FALSE(fs::exists(tmp / "stage-old", ec));
  EXPECT_FALSE(fs::exists(fs::symlink_status(tmp / "link-old", ec)));
  EXPECT_TRUE(fs::exists(tmp / "eval-new" / "candidate" / "model_new.py", ec));
  EXPECT_TRUE(fs::exists("/bin", ec));  // the link was removed, not followed
  EXPECT_EQ(sweep_stale_tmp(cache / "none"), 0u);  // no cache yet: nothing to do
  remove_tree(cache);
}

// One home: a path under the cache is cache_dir()'s to make.
TEST(CacheLayout, NoCachePathBuiltElsewhere) {
  std::regex by_hand(R"(\bcache_?\s*/\s*")");  // env.cache / "x", env_.cache / "x"
  for (const auto& rel : list_files(kSource + "/src")) {
    std::string name = rel.string();
    if (name.find("_test.cpp") != std::string::npos || name.find("cache_layout.cpp") != std::string::npos) continue;
    if (rel.extension() != ".cpp" && rel.extension() != ".h") continue;
    auto text = read_file(kSource + "/src/" + name);
    ASSERT_TRUE(text) << name;
    EXPECT_FALSE(std::regex_search(*text, by_hand)) << name << " builds a cache path by hand: use cache_dir()";
  }
  std::set<std::string> known;
  for (const auto& a : cache_areas()) known.insert(a.dir);
  // Python joins ANVIL_CACHE (or a variable holding it) with an area's name.
  std::regex python(R"re(os\.path\.join\((?:os\.environ\["ANVIL_CACHE"\]|cache),\s*"([^"]+)")re");
  int seen = 0;
  for (const auto& rel : list_files(kSource + "/python/anvil")) {
    if (rel.extension() != ".py") continue;
    auto text = read_file(kSource + "/python/anvil/" + rel.string());
    ASSERT_TRUE(text);
    for (std::sregex_iterator it(text->begin(), text->end(), python), end; it != end; ++it) {
      ++seen;
      EXPECT_TRUE(known.count((*it)[1].str())) << rel << " uses the cache area " << (*it)[1] << ", not in cache_areas()";
    }
  }
  EXPECT_GE(seen, 2);  // the judge's runtime/, evidence.py's kernel-names/
}

}  // namespace
}  // namespace anvil
