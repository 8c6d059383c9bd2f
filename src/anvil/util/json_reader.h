// json_reader.h: a JSON reader for large documents, building the same nlohmann::json that
// nlohmann::json::parse builds, about twice as fast in `anvil rft` (bench/results/rft-2026-12-01.md).
// nlohmann's parser is the slow part of reading a megabyte of episode record: its lexer takes a
// character at a time through an input adapter, then a generic SAX-to-DOM layer builds. Here
// RapidJSON's SAX reader (rapidjson-dev, headers only: the binary needs no more shared libraries)
// reads the text and a handler builds the nlohmann::json from its events, so callers keep nlohmann's
// type; a Pluck leaves most of a record's objects unbuilt.
//
// Strict RFC 8259 (no comments, trailing commas, NaN, leading zeros, bare control characters,
// invalid UTF-8, lone surrogates or trailing text), with nlohmann's number types: a non-negative
// integer is unsigned, a negative one signed, one too large for either and every number with a
// fraction or exponent a double, the one strtod gives. A later duplicate key replaces the earlier
// one, as in nlohmann. Differences from nlohmann, all errors here: a leading byte order mark,
// anything after a '\0' byte (nlohmann stops there), nesting deeper than 512, and a zero with an
// exponent over 308 ("0e400": RapidJSON refuses it before its digits are ours; nlohmann reads 0).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace anvil {

// Of the objects in every array named `array`, at any depth, a reader that needs one member only:
// each such object is read (and must be valid) but built as that member's value alone, null when it
// has none. {"logprobs": [{"token": "x", "logprob": -1.5}]} is read as {"logprobs": [-1.5]}.
struct Pluck {
  std::string_view array;   // "logprobs"
  std::string_view member;  // "logprob"
};

// The document in `text`, or nullopt with *err saying what is wrong and where ("expected ',' or
// '}' in an object at byte 1234").
std::optional<nlohmann::json> read_json(std::string_view text, std::string* err, const Pluck& pluck = {});

// Text from outside anvil (a client's body, a model's reply or tool arguments) read by read_json, so
// its nesting is bounded (kMaxJsonDepth) before anything recurses over it (a copy, a dump, a
// comparison: 150,000 nested arrays once crashed `anvil serve`); a discarded value (is_discarded())
// where it is not JSON, as nlohmann::json::parse(text, nullptr, false) gives.
nlohmann::json untrusted_json(std::string_view text);

// How deeply arrays and objects may nest in what read_json reads.
inline constexpr size_t kMaxJsonDepth = 512;

}  // namespace anvil
