// read_json against nlohmann::json::parse: the same values of the same types for valid documents,
// an error (with its place) for every invalid one nlohmann refuses too; and where it is stricter.
#include "anvil/util/json_reader.h"

#include <gtest/gtest.h>

namespace anvil {
namespace {

using Json = nlohmann::json;

// The same value, and at every place the same type (nlohmann's == calls 1u and 1 equal).
bool same(const Json& a, const Json& b) {
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!same(a[i], b[i])) return false;
    }
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!b.contains(it.key()) || !same(it.value(), b[it.key()])) return false;
    }
    return true;
  }
  return a == b;
}

TEST(JsonReader, ReadsWhatNlohmannReads) {
  const char* docs[] = {
      "{}", "[]", " \n\t{ \"a\" : [ ] , \"b\" : { } }\r\n", "true", "false", "null", "\"\"",
      R"("quote \" backslash \\ slash \/ \b\f\n\r\t")", R"("\u00e9 \u20AC \ud83d\ude00 \u0000 end")",
      "\"raw UTF-8: \xc3\xa9 \xf0\x9f\x98\x80\"", "0", "-0", "7", "-7", "18446744073709551615", "18446744073709551616",
      "-9223372036854775808", "-9223372036854775809", "1.5", "-2.5e-3", "1E+2", "1e2", "0.1", "123456.789e-300", "1e-400", "-1e-400",
      // RapidJSON 1.1 converts these wrongly itself (a ulp off; -3.4e302; a crash): read_json must not.
      "2.3465297978165054218886081e-264", "1.5125346449346977e-330", "1.5125346449346977e-338",
      "5e-324", "1.7976931348623157e308", "1e-99999999999", "0.0000000000000000000000000001e330",
      R"("\ud7ff \ue000 \udbff\udfff \ud55c")", "\"\xed\x9f\xbf \xf4\x8f\xbf\xbf\"", R"({"\u00e9": "\ud83d\ude00"})",
      R"({"a": 1, "a": 2})", R"({"turns": [{"token_ids": [1, 2, 3], "logprobs": [{"token": "x", "logprob": -0.25}]}]})",
      "[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]",
  };
  for (const char* d : docs) {
    std::string err;
    auto got = read_json(d, &err);
    ASSERT_TRUE(got) << d << ": " << err;
    EXPECT_TRUE(same(*got, Json::parse(d))) << d << ": " << got->dump() << " vs " << Json::parse(d).dump();
  }
}

TEST(JsonReader, RefusesWhatNlohmannRefuses) {
  const char* bad[] = {"", " ", "[1,]", "{\"a\":1,}", "01", "-", "1.", ".5", "1e", "1e+", "[1 2]", "{\"a\" 1}",
                       "{1:2}", "[1] x", "\"abc", "\"a\x01\"", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\ud800\\u0041\"",
                       "\"\\udc00\"", "\"ab\\udfffcd\"", "{\"\\udc00\": 1}", "\"\\udc00\\ud800\"", "tru", "nul",
                       "[", "{", "{\"a\":", "+1", "1e400", "-1e400", "10e308", "NaN", "[-]", "[1e5 ]x",
                       // Invalid UTF-8: a bare continuation byte, a cut sequence, an overlong '/', an
                       // encoded surrogate, one past U+10FFFF, a byte UTF-8 never has; in a key too.
                       "\"\x80\"", "\"\xc3\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xff\"",
                       "{\"\xc3\": 1}"};
  for (const char* d : bad) {
    std::string err;
    EXPECT_FALSE(read_json(d, &err)) << d;
    EXPECT_FALSE(err.empty()) << d;
    EXPECT_TRUE(Json::parse(d, nullptr, false).is_discarded()) << "nlohmann reads " << d;
  }
}

TEST(JsonReader, PluckedObjectsAreTheirOneMember) {
  std::string err;
  Pluck pluck{"logprobs", "logprob"};
  auto got = read_json(R"({"logprob": 1, "logprobs": [{"token": "x", "logprob": -1, "token_id": 5}, 2, {"token": "y"},
                           [{"logprob": 3}], {"logprob": {"logprob": 4}}],
                           "t": [{"logprobs": [{"token": {"logprobs": []}, "logprob": -2}]}]})",
                       &err, pluck);
  ASSERT_TRUE(got) << err;
  // Only the array's own objects are plucked (one without the member is null); elsewhere all stays.
  EXPECT_EQ(*got, Json::parse(R"({"logprob": 1, "logprobs": [-1, 2, null, [{"logprob": 3}], {"logprob": 4}],
                                  "t": [{"logprobs": [-2]}]})"));
  EXPECT_FALSE(read_json(R"({"logprobs": [{"token": [1,]}]})", &err, pluck));  // the rest is still checked
  EXPECT_EQ(err, "invalid value at byte 27");
}

TEST(JsonReader, AnErrorSaysWhatAndWhere) {
  std::string err;
  EXPECT_FALSE(read_json("{\"a\": [1, 2,, 3]}", &err));
  EXPECT_EQ(err, "invalid value at byte 12");
  EXPECT_FALSE(read_json("{\"schema\": ", &err));
  EXPECT_EQ(err, "unexpected end of input at byte 11");
  EXPECT_FALSE(read_json("{\"a\": 1} {}", &err));
  EXPECT_EQ(err, "unexpected text after the document at byte 9");
  EXPECT_FALSE(read_json(std::string(600, '[') + std::string(600, ']'), &err));
  EXPECT_EQ(err, "nested too deeply at byte 512");
  EXPECT_FALSE(read_json("[0, 01]", &err));
  EXPECT_EQ(err, "a number with a leading zero at byte 5");
  EXPECT_FALSE(read_json(R"(["a\u00e9", "b\udc00"])", &err));
  EXPECT_EQ(err, "a \\u escape of a low surrogate without a high one before it, in the string that ends at byte 21");
  EXPECT_FALSE(read_json("[\"caf\xc3\"]", &err));
  EXPECT_EQ(err, "invalid UTF-8 in a string at byte 5");
  EXPECT_FALSE(read_json("[\"a\x01\"]", &err));
  EXPECT_EQ(err, "a control character in a string (it must be escaped) at byte 3");
  EXPECT_FALSE(read_json("[1e999]", &err));
  EXPECT_EQ(err, "a number out of range at byte 1");
}

// Where read_json is stricter than nlohmann (json_reader.h): each refused here, read there.
TEST(JsonReader, RefusesWhatNlohmannLetsThrough) {
  std::string err;
  const std::string bom = "\xEF\xBB\xBF{}", nul("[1]\0[2]", 7), deep = std::string(513, '[') + std::string(513, ']');
  EXPECT_FALSE(read_json(bom, &err));
  EXPECT_EQ(err, "a byte order mark (not allowed) at byte 0");
  EXPECT_FALSE(read_json(nul, &err));  // nlohmann stops at the '\0'
  EXPECT_EQ(err, "unexpected text after the document at byte 3");
  EXPECT_FALSE(read_json(deep, &err));
  EXPECT_EQ(err, "nested too deeply at byte 512");
  EXPECT_TRUE(read_json(std::string(512, '[') + std::string(512, ']'), &err)) << err;
  EXPECT_FALSE(read_json("[0e400]", &err));  // RapidJSON's check of the exponent, before the digits are ours
  EXPECT_EQ(err, "a number out of range at byte 1");
  for (const std::string& d : {bom, nul, deep, std::string("[0e400]")}) {
    EXPECT_FALSE(Json::parse(d, nullptr, false).is_discarded()) << d;
  }
}

// The text is read within its bounds: one cut from a longer buffer (no '\0' after it) reads alone.
TEST(JsonReader, ReadsTextWithoutATerminatingNul) {
  std::string buffer = R"({"a": [1, 2]}, {"b": 3})";
  std::string err;
  auto got = read_json(std::string_view(buffer).substr(0, 13), &err);
  ASSERT_TRUE(got) << err;
  EXPECT_EQ(*got, Json::parse(R"({"a": [1, 2]})"));
  EXPECT_FALSE(read_json(std::string_view(buffer).substr(0, 12), &err));
  EXPECT_EQ(err, "unexpected end of input at byte 12");
  std::string digits = "123456";
  got = read_json(std::string_view(digits).substr(0, 3), &err);  // a number ends at the text's end
  ASSERT_TRUE(got) << err;
  EXPECT_TRUE(same(*got, Json(123u)));
}

}  // namespace
}  // namespace anvil
