// json_reader.cpp: RapidJSON's SAX reader over the text in place (a MemoryStream: the text need not
// end in '\0'), with a handler that builds the nlohmann::json from its events: a stack of the open
// arrays and objects, and where the next value goes. A plucked object's other members are read
// (RapidJSON checks them) but never built.
#include "anvil/util/json_reader.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <vector>

#include <rapidjson/error/en.h>
#include <rapidjson/memorystream.h>
#include <rapidjson/reader.h>

namespace anvil {

namespace {

using Json = nlohmann::json;
using rapidjson::SizeType;

constexpr size_t kMaxDepth = kMaxJsonDepth;  // arrays and objects nested at most: RapidJSON's reader recurses

// RFC 8259 and nothing more: comments, trailing commas, NaN and Infinity are off unless asked for.
// Strings are checked as UTF-8, as nlohmann does. Numbers come as their text (RawNumber) and are
// converted here by std::from_chars, correctly rounded as strtod (and so nlohmann) is: RapidJSON
// 1.1's own conversion is up to 3 ulps off by default, and with kParseFullPrecisionFlag still off at
// times (2.3465297978165054218886081e-264 by one ulp), wrong by far for some numbers too small for a
// double (1.5125346449346977e-330 reads as -3.4e302, not 0) and for others out of bounds of its
// table of powers: a crash (1.5125346449346977e-338).
constexpr unsigned kFlags = rapidjson::kParseValidateEncodingFlag | rapidjson::kParseNumbersAsStringsFlag;

// A string decoded from a \u escape of a low surrogate (U+DC00-U+DFFF) with no high one before it:
// RapidJSON 1.1 checks only that a high surrogate has a low one after it, and writes a lone low one
// as its three UTF-8 bytes (ED B0-BF xx), which nlohmann refuses. Those bytes can come only from an
// escape: raw ones fail the UTF-8 check.
bool has_lone_surrogate(const char* s, SizeType n) {
  const char* end = s + n;
  for (const char* p = s; (p = static_cast<const char*>(std::memchr(p, '\xED', end - p))) != nullptr; ++p) {
    if (end - p > 1 && static_cast<unsigned char>(p[1]) >= 0xA0) return true;
  }
  return false;
}

// A number's value in `out`, of nlohmann's type for it: a non-negative integer unsigned, a negative
// one signed, one too large for either and every number with a fraction or exponent a double.
// Null, or what is wrong.
const char* number(const char* begin, const char* end, Json& out) {
  bool integer = std::find_if(begin, end, [](char c) { return c == '.' || c == 'e' || c == 'E'; }) == end;
  if (integer && *begin == '-') {
    int64_t v = 0;
    auto r = std::from_chars(begin, end, v);
    if (r.ec == std::errc() && r.ptr == end) {
      out = static_cast<Json::number_integer_t>(v);
      return nullptr;
    }
  } else if (integer) {
    uint64_t v = 0;
    auto r = std::from_chars(begin, end, v);
    if (r.ec == std::errc() && r.ptr == end) {
      out = static_cast<Json::number_unsigned_t>(v);
      return nullptr;
    }
  }
  double d = 0;
  auto r = std::from_chars(begin, end, d);  // correctly rounded, as strtod (and so nlohmann)
  if (r.ec == std::errc::result_out_of_range) {
    // Too small is 0 (as strtod says); too large is an error in nlohmann too.
    d = std::strtod(std::string(begin, end).c_str(), nullptr);
    if (std::isinf(d)) return "a number out of range";
  } else if (r.ec != std::errc() || r.ptr != end) {
    return "invalid number";  // not what RapidJSON lets through
  }
  out = static_cast<Json::number_float_t>(d);
  return nullptr;
}

// The SAX handler: RapidJSON calls it for every value, key, and start and end of an array or object,
// in document order; a false return stops the reader (kParseErrorTermination), error() saying why.
class Builder {
 public:
  explicit Builder(const Pluck& pluck) : pluck_(pluck) { stack_.reserve(64); }

  Json& document() { return root_; }
  const std::string& error() const { return error_; }
  size_t error_back() const { return error_back_; }

  bool Null() { return put(nullptr); }
  bool Bool(bool b) { return put(b); }
  // A number's text, as RapidJSON has checked it: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  bool RawNumber(const char* s, SizeType n, bool) {
    Json v;
    if (const char* why = number(s, s + n, v)) return fail(why, 0);
    return put(std::move(v));
  }
  // Never called: numbers come as RawNumber (kParseNumbersAsStringsFlag).
  bool Int(int) { return false; }
  bool Int64(int64_t) { return false; }
  bool Uint(unsigned) { return false; }
  bool Uint64(uint64_t) { return false; }
  bool Double(double) { return false; }

  bool String(const char* s, SizeType n, bool) {
    if (has_lone_surrogate(s, n)) return fail(kLoneSurrogate, 0);
    if (Json* v = place()) *v = Json::string_t(s, n);
    return true;
  }

  bool Key(const char* s, SizeType n, bool) {
    if (has_lone_surrogate(s, n)) return fail(kLoneSurrogate, 0);
    Frame& f = stack_.back();
    std::string_view key(s, n);
    f.member_plucks = !pluck_.array.empty() && key == pluck_.array;
    if (f.members != nullptr) {
      f.member = &(*f.members)[Json::string_t(key)];  // a later duplicate replaces the earlier one
    } else {
      f.member = f.plucked_into != nullptr && key == pluck_.member ? f.plucked_into : nullptr;
    }
    return true;
  }

  bool StartObject() {
    if (stack_.size() >= kMaxDepth) return fail("nested too deeply", 1);  // at the '{', not after it
    bool plucked = !stack_.empty() && stack_.back().items_plucked;
    Frame f;
    if (Json* v = place()) {
      if (plucked) {
        f.plucked_into = v;  // null until the member is read
      } else {
        *v = Json::object();
        f.members = &v->get_ref<Json::object_t&>();
      }
    }
    stack_.push_back(f);
    return true;
  }
  bool EndObject(SizeType) {
    stack_.pop_back();
    return true;
  }

  bool StartArray() {
    if (stack_.size() >= kMaxDepth) return fail("nested too deeply", 1);  // at the '[', not after it
    // An array is plucked as the value of a member named pluck_.array, of an object built or not.
    bool plucks = !stack_.empty() && stack_.back().is_object() && stack_.back().member_plucks;
    Frame f;
    if (Json* v = place()) {
      *v = Json::array();
      f.items = &v->get_ref<Json::array_t&>();
    }
    f.items_plucked = plucks;
    f.array = true;
    stack_.push_back(f);
    return true;
  }
  bool EndArray(SizeType) {
    stack_.pop_back();
    return true;
  }

 private:
  static constexpr const char* kLoneSurrogate =
      "a \\u escape of a low surrogate without a high one before it, in the string that ends";

  // An open array or object. Of one being read but not built (a plucked object's other members, at
  // any depth) every pointer is null.
  struct Frame {
    bool array = false;
    Json::array_t* items = nullptr;     // an array's elements
    bool items_plucked = false;         // an array: its objects are plucked
    Json::object_t* members = nullptr;  // an object's members (null when plucked)
    Json* plucked_into = nullptr;       // a plucked object: where the one member's value goes
    Json* member = nullptr;             // an object: where the current member's value goes (null: dropped)
    bool member_plucks = false;         // an object: the current member is named pluck_.array

    bool is_object() const { return !array; }
  };

  // Where the next value goes: the document, a new element, or the current member; null when it is
  // read and dropped. Pointers stay valid while used: an array grows only after its last element,
  // which is all a deeper frame points into, is complete; std::map's nodes never move.
  Json* place() {
    if (stack_.empty()) return &root_;
    Frame& f = stack_.back();
    if (f.array) return f.items != nullptr ? &f.items->emplace_back() : nullptr;
    return f.member;
  }

  template <class T>
  bool put(T&& v) {
    if (Json* slot = place()) *slot = std::forward<T>(v);
    return true;
  }

  bool fail(const char* why, size_t back) {
    error_ = why;
    error_back_ = back;
    return false;
  }

  const Pluck& pluck_;
  Json root_;
  std::vector<Frame> stack_;
  std::string error_;
  size_t error_back_ = 0;  // how far before RapidJSON's offset of a stop the handler's error is
};

bool at_digit(std::string_view text, size_t at) { return at < text.size() && text[at] >= '0' && text[at] <= '9'; }

// What RapidJSON's error `code` at byte `at` of `text` is, in the words of the rest of anvil.
std::string what(rapidjson::ParseErrorCode code, std::string_view text, size_t at, const Builder& b) {
  using namespace rapidjson;
  bool end = at >= text.size();
  // RapidJSON reads "01" as 0 followed by something else: say what it is.
  bool leading_zero = at > 0 && at_digit(text, at) && text[at - 1] == '0';
  switch (code) {
    case kParseErrorTermination: return b.error();
    case kParseErrorDocumentEmpty: return end ? "unexpected end of input" : "invalid value";  // a '\0'
    case kParseErrorDocumentRootNotSingular:
      return leading_zero ? "a number with a leading zero" : "unexpected text after the document";
    case kParseErrorValueInvalid:
      if (at == 0 && text.substr(0, 3) == "\xEF\xBB\xBF") return "a byte order mark (not allowed)";
      return end ? "unexpected end of input" : "invalid value";
    case kParseErrorObjectMissName: return end ? "unexpected end of input" : "expected a string (an object's key)";
    case kParseErrorObjectMissColon: return end ? "unexpected end of input" : "expected ':' after an object's key";
    case kParseErrorObjectMissCommaOrCurlyBracket:
      return end            ? "unexpected end of input"
             : leading_zero ? "a number with a leading zero"
                            : "expected ',' or '}' in an object";
    case kParseErrorArrayMissCommaOrSquareBracket:
      return end            ? "unexpected end of input"
             : leading_zero ? "a number with a leading zero"
                            : "expected ',' or ']' in an array";
    case kParseErrorStringUnicodeEscapeInvalidHex: return "a \\u escape without four hex digits";
    // RapidJSON 1.1 says so only of a high surrogate without a low one after it; later versions of a
    // lone low one too (caught by the handler here).
    case kParseErrorStringUnicodeSurrogateInvalid: return "a \\u escape of a surrogate without its pair";
    // RapidJSON's code for both: at the escape's '\' or at the character.
    case kParseErrorStringEscapeInvalid:
      return !end && text[at] == '\\' ? "an invalid escape in a string"
                                     : "a control character in a string (it must be escaped)";
    case kParseErrorStringMissQuotationMark:  // the end, or a '\0' byte
      return end ? "unexpected end of input in a string" : "a control character in a string (it must be escaped)";
    case kParseErrorStringInvalidEncoding: return "invalid UTF-8 in a string";
    case kParseErrorNumberTooBig: return "a number out of range";
    case kParseErrorNumberMissFraction: return "a number without digits after its '.'";
    case kParseErrorNumberMissExponent: return "a number without digits in its exponent";
    default: return GetParseError_En(code);
  }
}

}  // namespace

std::optional<Json> read_json(std::string_view text, std::string* err, const Pluck& pluck) {
  rapidjson::MemoryStream in(text.data(), text.size());
  Builder builder(pluck);
  rapidjson::Reader reader;
  rapidjson::ParseResult r = reader.Parse<kFlags>(in, builder);
  if (r.IsError()) {
    size_t at = r.Offset();
    *err = what(r.Code(), text, at, builder) + " at byte " +
           std::to_string(r.Code() == rapidjson::kParseErrorTermination ? at - builder.error_back() : at);
    return std::nullopt;
  }
  // RapidJSON takes a '\0' byte for the end of the text: what follows one is not the document's.
  if (in.Tell() != text.size()) {
    *err = "unexpected text after the document at byte " + std::to_string(in.Tell());
    return std::nullopt;
  }
  return std::move(builder.document());
}

nlohmann::json untrusted_json(std::string_view text) {
  std::string err;
  std::optional<nlohmann::json> v = read_json(text, &err);
  return v ? std::move(*v) : nlohmann::json(nlohmann::json::value_t::discarded);
}

}  // namespace anvil
