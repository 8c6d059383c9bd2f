// commands.h: the subcommands of the `anvil` program. main.cpp parses the
// command line into these option structs and calls one function; each returns
// the process exit status (0 done, 1 the candidate or task is at fault, 2
// anvil could not do its work).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "anvil/env/build.h"
#include "anvil/env/eval.h"
#include "anvil/env/vet.h"

namespace anvil {

struct InitArgs {
  std::string task;
  std::string dir;
  bool force = false;
  bool check = true;  // import the task first
};
int cmd_init(const InitArgs& a);

struct BuildArgs {
  std::string dir;
  BuildOptions opts;
  bool json = false;
};
int cmd_build(const BuildArgs& a);

struct BuildSourcesArgs {
  SourcesSpec spec;
  BuildOptions opts;
};
int cmd_build_sources(const BuildSourcesArgs& a);  // always prints JSON

struct TaskShowArgs {
  std::string task;
  bool json = false;
  bool forward = true;
};
int cmd_task_show(const TaskShowArgs& a);

struct EvalArgs {
  EvalOptions opts;
  bool json = false;
  std::string out;  // also write the JSON result here
};
// 0: evaluated, whatever the outcome; 2: could not evaluate.
int cmd_eval(const EvalArgs& a);

struct VetArgs {
  std::string target;  // a task (FILE or DATASET#ROW), a directory of task files, or a dataset
  std::string device;  // cpu | cuda; empty: cuda when a GPU is present, else cpu
  std::string preset = "strict";
  uint32_t seed = 0;
  int timeout_s = 600;  // per task
  bool use_cache = true;
  bool json = false;
};
// One line per task (ok, its flags, or the error) and a summary, or one JSON
// document. 0: no task flagged; 1: some task flagged; 2: could not vet
// (usage, environment, or a task that could not be loaded or run).
int cmd_vet(const VetArgs& a);

int cmd_env(bool json, bool refresh);
int cmd_cache(const std::string& action);

}  // namespace anvil
