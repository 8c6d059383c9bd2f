// strings.h: small string helpers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace anvil {

std::vector<std::string> split(std::string_view s, char sep);
std::vector<std::string> split_lines(std::string_view s);
std::string trim(std::string_view s);
// Text for HTML: & < > " ' as entities.
std::string html_escape(std::string_view s);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);
// Replaces every occurrence of `from` (non-empty) with `to`.
std::string replace_all(std::string s, std::string_view from, std::string_view to);
// The last `max_lines` lines of `s`.
std::string tail_lines(std::string_view s, size_t max_lines);
// "1.23 s" / "45 ms"
std::string format_seconds(double s);
// "42s" / "3m07s" / "1h05m": a progress line's elapsed time or ETA.
std::string short_duration(double s);
// The current UTC time through strftime's `fmt` (default ISO 8601, "2026-11-22T18:41:17Z").
std::string utc_now(const char* fmt = "%Y-%m-%dT%H:%M:%SZ");
// Seconds since the Unix epoch (the system clock: comparable across processes and restarts).
double unix_seconds();
// The word of `candidates` closest to `word` by edit distance, when it is a plausible typo (at most
// max(2, |word| / 3) edits, or `word` a prefix of it); else "".
std::string closest_word(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace anvil
