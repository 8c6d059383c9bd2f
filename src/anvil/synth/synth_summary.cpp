// synth_summary.cpp: `anvil synth`'s summary (anvil.synth-summary/1), its table and its HTML page.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "anvil/synth/synth.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"

namespace anvil {

using Json = nlohmann::json;

namespace {

// The CPU stage's filters in the order a task meets them (anvil.synth.filters; `duplicate` is asked
// of this process after compose, and marked again by select_tasks for one in flight at the time),
// then the GPU stage's (with --gpu), then what this process decides: tasks whose worker was killed
// or died.
const std::vector<std::string> kStages = {"compose", "duplicate", "runtime_estimate", "decontaminate", "imports",
                                          "eager", "deterministic", "compile", "vet", "gpu_eager",
                                          "gpu_deterministic", "gpu_compile", "gpu_runtime", "gpu_memory", "gpu_timeout",
                                          "gpu_error", "gpu_unchecked", "timeout",
                                          "worker_died"};
const std::vector<double> kMsEdges = {1, 2, 5, 10, 20, 50, 100};

std::string bin_label(const std::vector<double>& edges, size_t i) {
  char buf[64];
  if (i == 0) std::snprintf(buf, sizeof buf, "< %g", edges[0]);
  else if (i == edges.size()) std::snprintf(buf, sizeof buf, ">= %g", edges.back());
  else std::snprintf(buf, sizeof buf, "%g-%g", edges[i - 1], edges[i]);
  return buf;
}

Json histogram(const std::vector<double>& values, const std::vector<double>& edges) {
  std::vector<long> counts(edges.size() + 1, 0);
  for (double v : values) counts[std::upper_bound(edges.begin(), edges.end(), v) - edges.begin()]++;
  Json o = Json::array();
  for (size_t i = 0; i < counts.size(); ++i) o.push_back({{"bin", bin_label(edges, i)}, {"count", counts[i]}});
  return o;
}

Json sorted_counts(const std::map<std::string, long>& m, size_t limit = 0) {
  std::vector<std::pair<std::string, long>> v(m.begin(), m.end());
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (limit && v.size() > limit) v.resize(limit);
  Json o = Json::array();
  for (const auto& [k, n] : v) o.push_back({{"name", k}, {"count", n}});
  return o;
}

std::string detail_kind(const std::string& d) {
  // The reason's detail without the numbers that make each one different.
  std::string o;
  for (char c : d.substr(0, 120)) o += (c >= '0' && c <= '9') ? '#' : c;
  return o;
}

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

}  // namespace

Json synth_summary(const Selection& s, const Json& run) {
  std::map<std::string, long> rejected, ops, families, lengths, sources;
  std::map<std::string, std::map<std::string, long>> details;
  std::vector<double> ms, sims;
  double seconds = 0;
  long reached = 0;  // tasks whose record shows the decontamination stage run
  for (const auto& r : s.considered) {
    seconds += r.value("seconds", 0.0);
    if (r.contains("checks") && r["checks"].is_object() && r["checks"].contains("decontaminate")) ++reached;
    if (r.value("status", "") == "accepted") continue;
    std::string reason = r.value("reason", "unknown");
    rejected[reason]++;
    details[reason][detail_kind(r.value("detail", ""))]++;
  }
  Json nearest = Json::array();
  for (const auto& r : s.accepted) {
    for (const auto& o : r.value("ops", Json::array())) ops[o.get<std::string>()]++;
    for (const auto& f : r.value("families", Json::array())) families[f.get<std::string>()]++;
    lengths[std::to_string(r.value("ops", Json::array()).size())]++;
    sources[r.value("data_source", "")]++;
    if (r.contains("estimate") && r["estimate"].contains("ms")) ms.push_back(r["estimate"]["ms"].get<double>());
    if (r.contains("nearest") && r["nearest"].is_object()) {
      sims.push_back(r["nearest"].value("similarity", 0.0));
      nearest.push_back({{"index", r.value("index", -1L)}, {"problem", r["nearest"].value("problem", "")},
                         {"level", r["nearest"].value("level", "")}, {"similarity", sims.back()}});
    }
  }
  std::stable_sort(nearest.begin(), nearest.end(),
                   [](const Json& a, const Json& b) { return a["similarity"].get<double>() > b["similarity"].get<double>(); });
  if (nearest.size() > 10) nearest.erase(nearest.begin() + 10, nearest.end());
  Json funnel = Json::array();
  long left = static_cast<long>(s.considered.size());
  for (const auto& st : kStages) {
    long n = rejected.count(st) ? rejected[st] : 0;
    bool gpu_stage = st.rfind("gpu_", 0) == 0;
    bool rare = st == "timeout" || st == "worker_died" || st == "gpu_unchecked";
    if (n == 0 && (rare || (gpu_stage && !run.value("gpu", false)))) continue;
    left -= n;
    Json common = Json::array();
    if (details.count(st))
      for (const auto& d : sorted_counts(details[st], 4)) common.push_back({{"detail", d["name"]}, {"count", d["count"]}});
    funnel.push_back({{"stage", st}, {"rejected", n}, {"left", left}, {"common", common}});
  }
  for (const auto& [reason, n] : rejected)  // a reason no stage names (a newer worker's): shown, not lost
    if (std::find(kStages.begin(), kStages.end(), reason) == kStages.end())
      funnel.push_back({{"stage", reason}, {"rejected", n}, {"left", left -= n}, {"common", Json::array()}});
  long decon = rejected.count("decontaminate") ? rejected["decontaminate"] : 0;
  double max_sim = sims.empty() ? 0 : *std::max_element(sims.begin(), sims.end());
  std::vector<double> sim_edges;
  for (int i = 1; i <= 19; ++i) sim_edges.push_back(i * 0.05);
  return {{"schema", kSynthSummary},
          {"run", run},
          {"tasks", s.accepted.size()},
          {"tried", s.considered.size()},
          {"cpu_seconds", seconds},
          {"funnel", funnel},
          {"decontamination", {{"threshold", run.value("max_similarity", 0.9)}, {"reached", reached},
                               {"rejected", decon}, {"rate", reached ? static_cast<double>(decon) / reached : 0.0},
                               {"max_similarity_accepted", max_sim}, {"nearest", nearest},
                               {"similarity_histogram", histogram(sims, sim_edges)}}},
          {"operators", sorted_counts(ops)},
          {"families", sorted_counts(families)},
          {"chain_lengths", lengths},
          {"data_sources", sorted_counts(sources)},
          {"estimate_ms_histogram", histogram(ms, kMsEdges)}};
}

std::string synth_table(const Json& sm) {
  std::string o;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%ld tasks accepted of %ld tried (seed %s)\n", sm.value("tasks", 0L),
                sm.value("tried", 0L), json_text(sm["run"].value("seed", Json(0))).c_str());
  o += buf;
  for (const auto& f : sm["funnel"]) {
    std::snprintf(buf, sizeof buf, "  %-17s %7ld rejected  %7ld left", f["stage"].get<std::string>().c_str(),
                  f["rejected"].get<long>(), f["left"].get<long>());
    o += buf;
    if (!f["common"].empty()) o += "   e.g. " + f["common"][0]["detail"].get<std::string>().substr(0, 70);
    o += "\n";
  }
  const auto& d = sm["decontamination"];
  std::snprintf(buf, sizeof buf, "decontamination: %ld of %ld rejected (%.1f%%), threshold %s; highest similarity kept %s\n",
                d["rejected"].get<long>(), d["reached"].get<long>(), 100 * d["rate"].get<double>(),
                num(d["threshold"].get<double>()).c_str(), num(d["max_similarity_accepted"].get<double>()).c_str());
  o += buf;
  return o;
}

namespace {

std::string bars(const Json& items, const char* key, const char* label_key, size_t limit = 0) {
  long top = 1;
  for (const auto& i : items) top = std::max(top, i[key].get<long>());
  std::string o = "<table class=\"bars\">\n";
  size_t n = 0;
  for (const auto& i : items) {
    if (limit && n++ >= limit) break;
    long v = i[key].get<long>();
    o += "<tr><td>" + html_escape(i[label_key].is_string() ? i[label_key].get<std::string>() : json_text(i[label_key])) +
         "</td><td class=\"n\">" + std::to_string(v) + "</td><td><div class=\"bar\" style=\"width:" +
         num(100.0 * v / top) + "%\"></div></td></tr>\n";
  }
  return o + "</table>\n";
}

const char* kPageStyle = R"(
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;color:#222;padding:0 1em}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{padding:2px 8px;text-align:left;vertical-align:top}
th{border-bottom:1px solid #ccc}.n{text-align:right;font-variant-numeric:tabular-nums}
.bars td:first-child{white-space:nowrap;max-width:28em;overflow:hidden;text-overflow:ellipsis}
.bars td:last-child{width:50%}.bar{background:#4a7fb5;height:.9em;min-width:1px}
.sub{color:#666}code{font-size:.95em}
)";

}  // namespace

std::string synth_html(const Json& sm) {
  const Json& run = sm["run"];
  std::string o = "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>anvil synth: " +
                  std::to_string(sm.value("tasks", 0L)) + " tasks</title>\n<style>" + kPageStyle +
                  "</style>\n</head>\n<body>\n";
  o += "<h1>anvil synth: " + std::to_string(sm.value("tasks", 0L)) + " tasks</h1>\n<p class=\"sub\">seed " +
       html_escape(json_text(run.value("seed", Json(0)))) + ", " + std::to_string(sm.value("tried", 0L)) +
       " tried, " + html_escape(run.value("out", "")) + ", finished " + html_escape(run.value("finished_at", "")) +
       "</p>\n";
  o += "<h2>Filter funnel</h2>\n<table>\n<tr><th>stage</th><th class=\"n\">rejected</th><th class=\"n\">left</th>"
       "<th>commonest reasons</th></tr>\n";
  for (const auto& f : sm["funnel"]) {
    std::string common;
    for (const auto& c : f["common"])
      common += html_escape(c["detail"].get<std::string>()) + " (" + std::to_string(c["count"].get<long>()) + ")<br>";
    o += "<tr><td><code>" + html_escape(f["stage"].get<std::string>()) + "</code></td><td class=\"n\">" +
         std::to_string(f["rejected"].get<long>()) + "</td><td class=\"n\">" + std::to_string(f["left"].get<long>()) +
         "</td><td>" + common + "</td></tr>\n";
  }
  o += "</table>\n";
  const Json& d = sm["decontamination"];
  o += "<h2>Decontamination against KernelBench</h2>\n<p>" + std::to_string(d["rejected"].get<long>()) + " of " +
       std::to_string(d["reached"].get<long>()) + " tasks that reached it rejected (" +
       num(100 * d["rate"].get<double>()) + "%): the operator sequence of a KernelBench problem, or a normalized-code "
       "similarity above " + num(d["threshold"].get<double>()) + ". Highest similarity kept: " +
       num(d["max_similarity_accepted"].get<double>()) + ".</p>\n";
  o += bars(d["similarity_histogram"], "count", "bin");
  o += "<table>\n<tr><th class=\"n\">task</th><th>nearest problem</th><th class=\"n\">similarity</th></tr>\n";
  for (const auto& n : d["nearest"])
    o += "<tr><td class=\"n\">" + std::to_string(n["index"].get<long>()) + "</td><td>" +
         html_escape(n["level"].get<std::string>() + "/" + n["problem"].get<std::string>()) + "</td><td class=\"n\">" +
         num(n["similarity"].get<double>()) + "</td></tr>\n";
  o += "</table>\n";
  o += "<h2>Eager runtime estimate (ms, H100)</h2>\n" + bars(sm["estimate_ms_histogram"], "count", "bin");
  Json lengths = Json::array();
  for (const auto& [k, v] : sm["chain_lengths"].items()) lengths.push_back({{"name", "torch x" + k}, {"count", v}});
  o += "<h2>Operators per task</h2>\n" + bars(lengths, "count", "name") + bars(sm["data_sources"], "count", "name");
  o += "<h2>Kernel families</h2>\n" + bars(sm["families"], "count", "name");
  o += "<h2>Operators (the 60 commonest of " + std::to_string(sm["operators"].size()) + ")</h2>\n" +
       bars(sm["operators"], "count", "name", 60);
  o += "<p class=\"sub\">" + html_escape(std::string(kSynthSummary)) +
       "; this page is self-contained and works offline.</p>\n</body>\n</html>\n";
  return o;
}

}  // namespace anvil
