// report.h: a benchmark run's reports, rendered from its results
// (anvil.bench/1, docs/bench.md): a Markdown summary and a self-contained HTML
// page with plots (inline SVG; no scripts, fonts or styles fetched from
// anywhere, so it opens offline).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace anvil {

// The Markdown summary: fingerprint, rules, metrics per level and overall,
// outcome counts, problems (missing, extra, unreadable, not evaluated), and a
// per-task table.
std::string render_markdown(const nlohmann::json& results);

// The HTML page: the same tables plus plots (speedup distribution per level,
// per-task speedups against eager and torch.compile, outcome breakdown).
std::string render_html(const nlohmann::json& results);

}  // namespace anvil
