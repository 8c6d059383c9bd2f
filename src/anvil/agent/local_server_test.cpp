// `anvil agent --endpoint local`: a real small model (Gemma 3 270M under
// llama.cpp's server) drives one real episode on the CPU. It will not solve
// the task, but every message, tool call and malformed call in it is the
// model's own, and the episode must end cleanly with a trajectory and a
// reward. scripts/test.sh installs the model first (scripts/local_model.sh);
// where it is absent the test fails, unless ANVIL_SKIP_LOCAL_MODEL is set.
#include "anvil/agent/local_server.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "anvil/agent/trajectory.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

using Json = nlohmann::json;

TEST(LocalServer, AMissingInstallationSaysHowToInstallIt) {
  LocalServer s;
  LocalServerOptions o;
  o.python = "/nonexistent/python3";
  std::string err;
  EXPECT_FALSE(s.start(o, &err));
  EXPECT_NE(err.find("llama_cpp"), std::string::npos) << err;
  EXPECT_NE(err.find("scripts/local_model.sh"), std::string::npos) << err;
}

TEST(LocalServer, ARealModelRunsARealEpisode) {
  std::string venv_python = std::string(ANVIL_SOURCE_DIR) + "/.venv-llm/bin/python";
  const char* override_python = std::getenv("ANVIL_LLM_PYTHON");
  if (!fs::exists(override_python ? override_python : venv_python)) {
    if (std::getenv("ANVIL_SKIP_LOCAL_MODEL")) GTEST_SKIP() << "ANVIL_SKIP_LOCAL_MODEL is set";
    FAIL() << "the local model is not installed: run scripts/local_model.sh";
  }
  std::string text = *read_file(std::string(ANVIL_SOURCE_DIR) + "/examples/tasks/01_elementwise_chain.py");
  text = replace_all(replace_all(text, "ROWS = 4096", "ROWS = 256"), "COLS = 4096", "COLS = 512");
  fs::path dir = fs::path(ANVIL_TEST_CACHE_DIR) / "local_model";
  remove_tree(dir);
  std::string e;
  write_file_atomic(dir / "01_small.py", text, &e);
  SubprocessOptions so;
  so.timeout = std::chrono::seconds(900);
  SubprocessResult r = run_subprocess({ANVIL_BINARY, "agent", "--task", (dir / "01_small.py").string(), "--endpoint",
                                       "local", "--out", (dir / "run").string(), "--max-turns", "3", "--max-tokens",
                                       "256", "--compile-mode", "none", "--temperature", "0.7", "--seed", "1"},
                                      so);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("serving gemma-3-270m"), std::string::npos) << r.output;
  std::string err;
  auto rec = load_trajectory(dir / "run" / "01_small" / "sample-0" / "trajectory.json", &err);
  ASSERT_TRUE(rec) << err;
  EXPECT_EQ((*rec)["status"], "finished");
  EXPECT_EQ((*rec)["model"]["model"], "gemma-3-270m");
  EXPECT_GE((*rec)["turns"].size(), 1u);
  EXPECT_LE((*rec)["turns"].size(), 3u);
  // Real output: the server counted real tokens for every turn.
  for (const auto& t : (*rec)["turns"]) EXPECT_GT(t["usage"]["completion_tokens"].get<int>(), 0) << t.dump();
  ASSERT_TRUE((*rec)["evaluation"].is_object());
  EXPECT_EQ((*rec)["reward"], -1) << (*rec)["evaluation"].dump();  // a 270M model does not write kernels
}

}  // namespace
}  // namespace anvil
