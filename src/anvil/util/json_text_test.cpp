// json_text: bytes that are not UTF-8 never throw (they once aborted `anvil eval` on a candidate's
// print), and it is the one way src/ writes JSON.
#include "anvil/util/json_text.h"

#include <gtest/gtest.h>

#include <regex>

#include "anvil/util/fs.h"

namespace anvil {
namespace {

TEST(JsonText, BytesThatAreNotUtf8BecomeTheReplacementCharacter) {
  nlohmann::json j = {{"output_tail", "\xff\xfe\xfd not utf-8 \xc3\x28\n"}, {"file", "kernels/\xff\xfe.h"}};
  EXPECT_THROW((void)j.dump(), nlohmann::json::type_error);  // what anvil once wrote with
  std::string text;
  ASSERT_NO_THROW(text = json_text(j));
  EXPECT_EQ(text, "{\"file\":\"kernels/\xEF\xBF\xBD\xEF\xBF\xBD.h\",\"output_tail\":\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD"
                  " not utf-8 \xEF\xBF\xBD(\\n\"}");
  EXPECT_TRUE(is_utf8(text));
  EXPECT_EQ(nlohmann::json::parse(text)["file"], "kernels/\xEF\xBF\xBD\xEF\xBF\xBD.h");
  EXPECT_EQ(json_text({{"a", 1}}, 1), "{\n \"a\": 1\n}");
  EXPECT_EQ(json_text(nlohmann::json("caf\xC3\xA9")), "\"caf\xC3\xA9\"");  // valid UTF-8 as it is
}

TEST(JsonText, IsUtf8) {
  EXPECT_TRUE(is_utf8(""));
  EXPECT_TRUE(is_utf8("plain"));
  EXPECT_TRUE(is_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_utf8("\xff"));
  EXPECT_FALSE(is_utf8("\xC3"));              // cut short
  EXPECT_FALSE(is_utf8("\xC0\xAF"));          // overlong
  EXPECT_FALSE(is_utf8("\xE0\x80\xAF"));      // overlong
  EXPECT_FALSE(is_utf8("\xED\xA0\x80"));      // a surrogate
  EXPECT_FALSE(is_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  for (const char* s : {"\xff", "\xC3", "\xC0\xAF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80", "ok \xE2\x82\xAC"}) {
    bool throws = false;
    try {
      (void)nlohmann::json(s).dump();
    } catch (const nlohmann::json::type_error&) {
      throws = true;
    }
    EXPECT_EQ(is_utf8(s), !throws) << "is_utf8 and nlohmann disagree on " << nlohmann::json(s).dump(-1, ' ', true, nlohmann::json::error_handler_t::replace);
  }
}

// One home: src/ writes JSON through json_text, never nlohmann's throwing dump.
TEST(JsonText, NoDumpElsewhereInSrc) {
  const std::string src = std::string(ANVIL_SOURCE_DIR) + "/src";
  std::regex dump(R"(\.dump\()");
  for (const auto& rel : list_files(src)) {
    std::string name = rel.string();
    if (name.find("_test.cpp") != std::string::npos || name == "anvil/util/json_text.cpp") continue;
    if (rel.extension() != ".cpp" && rel.extension() != ".h") continue;
    auto text = read_file(src + "/" + name);
    ASSERT_TRUE(text) << name;
    EXPECT_FALSE(std::regex_search(*text, dump)) << name << " calls .dump(: write JSON with json_text (util/json_text.h), "
                                                            "which does not throw on bytes that are not UTF-8";
  }
}

}  // namespace
}  // namespace anvil
