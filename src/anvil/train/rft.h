// rft.h: `anvil rft`, recorded episodes turned into a rejection fine-tuning set (docs/rft.md): every
// episode kept or dropped for one reason (episode_filter.h, then duplicates), the kept ones written as
// SFT examples (sft_example.h), one JSON line each, and a summary beside them.
//
// The files are parsed on --jobs threads in batches; the lines are written in the files' sorted
// order, so the output does not depend on the threads. The output appears whole or not at all
// (util/fs.h's AtomicFile): a bad input stops the run before anything is put in place.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/train/episode_filter.h"

namespace anvil {

inline constexpr const char* kRftSummarySchema = "anvil.rft-summary/1";

struct RftOptions {
  std::vector<std::string> inputs;  // run directories of `anvil agent --out`, or trajectory files
  std::filesystem::path out;        // the JSONL file; its summary is <out>.summary.json
  FilterOptions filter;
  unsigned jobs = 0;                // files parsed at once (0: every core)
  bool skip_bad = false;            // an unreadable file is counted (unreadable), not an error
};

struct RftResult {
  int status = 0;            // 0 written; 1 an input is at fault (error names it); 2 could not run
  std::string error;
  nlohmann::json summary;    // anvil.rft-summary/1, when written
};

// Every trajectory file the inputs name, sorted by path and without repeats: a file as given, and
// under a directory every trajectory.json (an episode's directory is not searched further: its
// workdir is the model's). Empty with *err and *status (2: a path that does not exist; 1: a
// directory without any) when an input names none.
std::vector<std::filesystem::path> trajectory_files(const std::vector<std::string>& inputs, std::string* err,
                                                    int* status);

RftResult run_rft(const RftOptions& opts);

// The summary as a one-screen table.
std::string rft_table(const nlohmann::json& summary);

}  // namespace anvil
