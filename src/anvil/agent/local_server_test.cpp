// The local model server (`anvil agent --endpoint local`).
//
// Without the model: a missing interpreter, a missing Gemma package and a
// server that dies during start-up each fail start() with a message that says
// what to do; a stand-in "python" (a script that imports nothing and serves
// GET /v1/models like uvicorn) checks start-up, the answer and that stop()
// kills the whole process group. With the model (scripts/local_model.sh has
// made .venv-llm, or ANVIL_LLM_PYTHON names an interpreter): Gemma 3 270M
// answers GET /v1/models and a chat completion with tools, on the CPU (~15 s
// on two cores); where it is not installed that test is skipped, saying so.
// The last test drives one real episode through `anvil agent`; scripts/test.sh
// installs the model first, and where it is absent that test fails, unless
// ANVIL_SKIP_LOCAL_MODEL is set.
#include "anvil/agent/local_server.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "anvil/agent/http.h"
#include "anvil/agent/model_client.h"
#include "anvil/agent/token_turns.h"
#include "anvil/agent/trajectory.h"
#include "anvil/util/fs.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {
namespace {

using Json = nlohmann::json;

// A stand-in interpreter: `-c CODE` succeeds for the llama_cpp import, exits 3
// for the Gemma script when `gemma` is false (what that script does when the
// package is missing); anything else is the server script: it runs `server_body` with
// `port` and `alias` taken from the arguments.
fs::path fake_python(const fs::path& dir, bool gemma, const std::string& server_body) {
  std::string text = "#!/usr/bin/env python3\n"
                     "import sys, os, subprocess\n"
                     "a = sys.argv[1:]\n"
                     "if a[0] == '-c':\n"
                     "    if 'gemma3' in a[1]:\n"
                     "        sys.exit(0 if " + std::string(gemma ? "True" : "False") + " else 3)\n"
                     "    sys.exit(0)\n"
                     "port = int(a[a.index('--port') + 1])\n"
                     "alias = a[a.index('--alias') + 1]\n" +
                     server_body;
  fs::path p = dir / "python";
  std::string e;
  EXPECT_TRUE(write_file_atomic(p, text, &e, 0755)) << e;
  return p;
}

// Serves GET /v1/models as llama-cpp-python does, after printing uvicorn's
// line; leaves a grandchild (sleep) in the group, its pid in grandchild.pid.
const char* kServe =
    "import http.server, json\n"
    "g = subprocess.Popen(['sleep', '300'])\n"
    "open(os.path.join(os.path.dirname(sys.argv[0]), 'grandchild.pid'), 'w').write(str(g.pid))\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        body = json.dumps({'object': 'list', 'data': [{'id': alias, 'object': 'model'}]}).encode()\n"
    "        self.send_response(200)\n"
    "        self.send_header('Content-Type', 'application/json')\n"
    "        self.send_header('Content-Length', str(len(body)))\n"
    "        self.end_headers()\n"
    "        self.wfile.write(body)\n"
    "    def log_message(self, *args):\n"
    "        pass\n"
    "s = http.server.HTTPServer(('127.0.0.1', port), H)\n"
    "print(f'INFO:     Uvicorn running on http://127.0.0.1:{port} (Press CTRL+C to quit)', flush=True)\n"
    "s.serve_forever()\n";

const char* kCrash =
    "print('llama_model_load: error loading model: bad magic', flush=True)\n"
    "sys.exit(1)\n";

bool gone(int pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  // Killed but not yet reaped by its new parent: a zombie counts as gone.
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat").value_or("");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z';
}

struct TempDir {
  fs::path path = make_temp_dir(fs::temp_directory_path(), "anvil-local-server-test");
  ~TempDir() { remove_tree(path); }
};

TEST(LocalServer, AMissingInstallationSaysHowToInstallIt) {
  LocalServer s;
  LocalServerOptions o;
  o.python = "/nonexistent/python3";
  std::string err;
  EXPECT_FALSE(s.start(o, &err));
  EXPECT_NE(err.find("llama_cpp is not installed for /nonexistent/python3"), std::string::npos) << err;
  EXPECT_NE(err.find("scripts/local_model.sh"), std::string::npos) << err;
  EXPECT_EQ(s.pid(), -1);
}

TEST(LocalServer, AMissingGemmaPackageSaysHowToInstallIt) {
  TempDir d;
  LocalServer s;
  LocalServerOptions o;
  o.python = fake_python(d.path, /*gemma=*/false, kServe).string();
  std::string err;
  EXPECT_FALSE(s.start(o, &err));
  EXPECT_NE(err.find("the Gemma 3 270M GGUF is not installed for " + o.python), std::string::npos) << err;
  EXPECT_NE(err.find("scripts/local_model.sh"), std::string::npos) << err;
}

TEST(LocalServer, AServerThatExitsDuringStartUpIsReportedWithItsLog) {
  TempDir d;
  LocalServer s;
  LocalServerOptions o;
  o.python = fake_python(d.path, true, kCrash).string();
  o.model_path = o.python;  // any existing file
  std::string err;
  EXPECT_FALSE(s.start(o, &err));
  EXPECT_NE(err.find("the local server exited during start-up (exit code 1"), std::string::npos) << err;
  EXPECT_NE(err.find("error loading model: bad magic"), std::string::npos) << err;
  EXPECT_EQ(s.pid(), -1);
}

TEST(LocalServer, StartsAnswersAndStopsItsWholeProcessGroup) {
  TempDir d;
  LocalServer s;
  LocalServerOptions o;
  o.python = fake_python(d.path, true, kServe).string();
  o.model_path = o.python;
  o.alias = "fake-model";
  std::string err;
  ASSERT_TRUE(s.start(o, &err)) << err;
  EXPECT_EQ(s.model(), "fake-model");
  ASSERT_TRUE(starts_with(s.base_url(), "http://127.0.0.1:")) << s.base_url();
  HttpRequest req;
  req.method = "GET";
  req.url = s.base_url() + "/models";
  HttpResponse r = make_http_client()->send(req);
  ASSERT_TRUE(r.transport_ok) << r.error;
  EXPECT_EQ(Json::parse(r.body)["data"][0]["id"], "fake-model");
  EXPECT_NE(s.log_tail().find("Uvicorn running on " + s.base_url().substr(0, s.base_url().size() - 3)),
            std::string::npos)
      << s.log_tail();

  int server = s.pid();
  int grandchild = std::stoi(read_file(d.path / "grandchild.pid").value_or("0"));
  ASSERT_GT(grandchild, 0);
  s.stop();
  EXPECT_EQ(s.pid(), -1);
  EXPECT_TRUE(gone(server));
  for (int i = 0; i < 50 && !gone(grandchild); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(gone(grandchild));
  EXPECT_FALSE(make_http_client()->send(req).transport_ok);
}

// The interpreter of the installed local model, or "" (with *why).
std::string installed_python(std::string* why) {
  const char* env = std::getenv("ANVIL_LLM_PYTHON");
  std::string p = env && *env ? env : std::string(ANVIL_SOURCE_DIR) + "/.venv-llm/bin/python";
  if (!fs::exists(p)) {
    *why = "the local model is not installed (" + p + " does not exist): run scripts/local_model.sh";
    return "";
  }
  return p;
}

TEST(LocalServer, GemmaAnswersAChatCompletionWithTools) {
  std::string why;
  std::string python = installed_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  auto t0 = std::chrono::steady_clock::now();
  LocalServer s;
  LocalServerOptions o;
  o.python = python;
  o.context = 2048;
  std::string err;
  ASSERT_TRUE(s.start(o, &err)) << err;
  double startup = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  auto http = make_http_client();
  HttpRequest get;
  get.method = "GET";
  get.url = s.base_url() + "/models";
  HttpResponse models = http->send(get);
  ASSERT_EQ(models.status, 200) << models.error << models.body;
  EXPECT_EQ(Json::parse(models.body)["data"][0]["id"], "gemma-3-270m");

  Json bash = {{"type", "function"},
               {"function",
                {{"name", "bash"},
                 {"description", "Run a shell command in the work directory."},
                 {"parameters",
                  {{"type", "object"},
                   {"properties", {{"command", {{"type", "string"}}}}},
                   {"required", {"command"}}}}}}};
  Json finish = {{"type", "function"},
                 {"function",
                  {{"name", "finish"},
                   {"description", "End the episode."},
                   {"parameters", {{"type", "object"}, {"properties", Json::object()}}}}}};
  Json body = {{"model", s.model()},
               {"messages",
                {{{"role", "system"}, {"content", "You write CUDA kernels. Use the bash tool to run commands."}},
                 {{"role", "user"}, {"content", "List the files in the work directory."}}}},
               {"tools", {bash, finish}},
               {"tool_choice", "auto"},
               {"max_tokens", 64},
               {"temperature", 0},
               {"seed", 1},
               {"logprobs", true},
               {"return_token_ids", true}};  // a vLLM field: llama.cpp ignores it
  HttpRequest post;
  post.url = s.base_url() + "/chat/completions";
  post.headers = {"Content-Type: application/json"};
  post.body = body.dump();
  post.timeout = std::chrono::seconds(120);
  HttpResponse r = http->send(post);
  ASSERT_TRUE(r.transport_ok) << r.error;
  ASSERT_EQ(r.status, 200) << r.body;
  Json j = Json::parse(r.body);
  const Json& msg = j["choices"][0]["message"];
  EXPECT_EQ(msg["role"], "assistant") << r.body;
  // tool_calls where the model wrote <tool_call> blocks, else its text.
  if (msg.contains("tool_calls") && msg["tool_calls"].is_array() && !msg["tool_calls"].empty()) {
    std::string name = msg["tool_calls"][0]["function"]["name"];
    EXPECT_TRUE(name == "bash" || name == "finish") << r.body;
    EXPECT_EQ(j["choices"][0]["finish_reason"], "tool_calls") << r.body;
  } else {
    EXPECT_TRUE(msg["content"].is_string()) << r.body;
  }
  EXPECT_GT(j["usage"]["total_tokens"].get<int>(), 0) << r.body;
  // Token-in/token-out: the sampled ids, each with its log-probability, and the prompt's ids, which
  // are what /tokenize makes of the same messages and tools (the model's own chat template).
  const Json& ids = j["choices"][0]["token_ids"];
  ASSERT_TRUE(ids.is_array() && !ids.empty()) << r.body;
  const Json& lps = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lps.size(), ids.size()) << r.body;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(lps[i]["token_id"], ids[i]) << r.body;
    EXPECT_LE(lps[i]["logprob"].get<double>(), 0.0) << r.body;
  }
  HttpRequest tok;
  tok.url = s.base_url().substr(0, s.base_url().size() - 3) + "/tokenize";
  tok.headers = {"Content-Type: application/json"};
  tok.body = Json{{"messages", body["messages"]}, {"tools", body["tools"]}, {"add_generation_prompt", true}}.dump();
  HttpResponse t = http->send(tok);
  ASSERT_EQ(t.status, 200) << t.body;
  EXPECT_EQ(Json::parse(t.body)["tokens"], j["prompt_token_ids"]) << t.body;
  std::printf("start-up %.1f s, one turn %.1f s: %s\n", startup, r.seconds, msg.dump().c_str());

  int pid = s.pid();
  s.stop();
  EXPECT_TRUE(gone(pid));
}

// Gemma's own tokenizer and anvil's template for it: a sampled turn continued token for token. The
// sequence after a turn is the prompt, the sampled ids, and the template's rendering from the
// turn's end token on; where the model wrote its call as the template renders the parsed call (its
// arguments as parse_tool_call_blocks serialises them), that is the whole conversation rendered
// afresh; where it wrote it otherwise, what it wrote stays as written.
TEST(LocalServer, ATurnIsContinuedTokenForTokenByTheModelsOwnTemplate) {
  std::string why;
  std::string python = installed_python(&why);
  if (python.empty()) GTEST_SKIP() << why;
  LocalServer s;
  LocalServerOptions o;
  o.python = python;
  o.context = 2048;
  std::string err;
  ASSERT_TRUE(s.start(o, &err)) << err;
  auto http = make_http_client();
  ModelClient model({s.base_url(), s.model(), ""}, *http);
  auto tokenize_text = [&](const std::string& text) {
    HttpRequest q;
    q.url = s.base_url().substr(0, s.base_url().size() - 3) + "/tokenize";
    q.headers = {"Content-Type: application/json"};
    q.body = Json{{"prompt", text}, {"add_special_tokens", false}}.dump();
    HttpResponse a = http->send(q);
    EXPECT_EQ(a.status, 200) << a.body;
    return Json::parse(a.body)["tokens"].get<std::vector<int64_t>>();
  };
  Json tools = Json::array({{{"type", "function"},
                             {"function", {{"name", "bash"}, {"description", "Run a command."},
                                           {"parameters", {{"type", "object"},
                                                           {"properties", {{"command", {{"type", "string"}}}}}}}}}}});
  Json opening = Json::array({{{"role", "system"}, {"content", "You write kernels."}},
                              {{"role", "user"}, {"content", "List the files."}}});
  TokenizeResult prompt = model.tokenize_chat(opening, tools, true);
  ASSERT_TRUE(prompt.ok) << prompt.error;
  std::vector<int64_t> end = tokenize_text("<end_of_turn>");
  ASSERT_EQ(end.size(), 1u);

  for (std::string sampled : {std::string("I will look.<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\":\"ls\"}}</tool_call>"),
                              std::string("I will look.\n<tool_call>{ \"name\":\"bash\",\"arguments\":{ \"command\":\"ls\" } }</tool_call>")}) {
    std::vector<int64_t> ids = tokenize_text(sampled);
    ids.push_back(end[0]);  // the model ended its turn
    ParsedCalls parsed = parse_tool_call_blocks(sampled, "call_0");
    ASSERT_EQ(parsed.tool_calls.size(), 1u) << sampled;
    Json messages = opening;
    messages.push_back({{"role", "assistant"}, {"content", parsed.content}, {"tool_calls", parsed.tool_calls}});
    TokenizeResult closed = model.tokenize_chat(messages, tools, false);
    messages.push_back({{"role", "tool"}, {"tool_call_id", "call_0_0"}, {"content", "model.py\nkernels/"}});
    TokenizeResult appended = model.tokenize_chat(messages, tools, true);
    ASSERT_TRUE(closed.ok && appended.ok) << closed.error << appended.error;
    auto after = tokens_after_turn(prompt.tokens, closed.tokens, appended.tokens, end[0], &err);
    ASSERT_TRUE(after) << err;
    std::vector<int64_t> seq = prompt.tokens;
    seq.insert(seq.end(), ids.begin(), ids.end());
    seq.insert(seq.end(), after->begin(), after->end());
    EXPECT_EQ(tokenize_text("\n<start_of_turn>user\n<tool_response>\nmodel.py\nkernels/\n</tool_response><end_of_turn>\n"
                            "<start_of_turn>model\n"),
              *after);
    bool as_rendered = sampled.find("{ ") == std::string::npos;
    EXPECT_EQ(seq == appended.tokens, as_rendered) << sampled;
    // What the model wrote is in the sequence as it wrote it, in both cases.
    EXPECT_TRUE(std::search(seq.begin(), seq.end(), ids.begin(), ids.end()) == seq.begin() + static_cast<long>(prompt.tokens.size()));
  }
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

  // Token-in/token-out (the local endpoint's default): every turn's prompt is the previous turn's
  // prompt and sampled ids, token for token, and then the template's rendering of what followed;
  // re-decoded, the sampled ids are the model's message and the opening prompt is the template's.
  EXPECT_EQ((*rec)["token_level"], true);
  LocalServer server;
  LocalServerOptions o;
  o.context = 8192;
  ASSERT_TRUE(server.start(o, &err)) << err;
  auto http = make_http_client();
  auto post = [&](const std::string& path, const Json& body) {
    HttpRequest q;
    q.url = server.base_url().substr(0, server.base_url().size() - 3) + path;
    q.headers = {"Content-Type: application/json"};
    q.body = body.dump();
    q.timeout = std::chrono::seconds(60);
    HttpResponse a = http->send(q);
    EXPECT_EQ(a.status, 200) << a.body;
    return Json::parse(a.body, nullptr, false);
  };
  Json opening = Json::array({(*rec)["messages"][0], (*rec)["messages"][1]});
  std::vector<int64_t> seq;
  const Json& turns = (*rec)["turns"];
  for (size_t i = 0; i < turns.size(); ++i) {
    const Json& t = turns[i];
    ASSERT_TRUE(t.contains("prompt_token_ids")) << t.dump();
    EXPECT_EQ(t["prompt_token_ids"]["prefix"].get<size_t>(), seq.size()) << "turn " << i << " re-rendered the past";
    std::vector<int64_t> prompt = expand_prompt_ids(seq, t["prompt_token_ids"]);
    if (i == 0) {
      EXPECT_EQ(t["prompt_kind"], "opening");
      EXPECT_EQ(Json(prompt), post("/tokenize", {{"messages", opening}, {"tools", (*rec)["tools"]}})["tokens"]);
    }
    std::vector<int64_t> ids = t["token_ids"].get<std::vector<int64_t>>();
    EXPECT_EQ(t["logprobs"].size(), ids.size());
    const Json& msg = (*rec)["messages"][t["message_index"].get<size_t>()];
    if (t["finish_reason"] == "stop") ids.pop_back();  // its end token
    if (!msg.contains("tool_calls")) {
      EXPECT_EQ(post("/detokenize", {{"tokens", ids}})["prompt"], msg["content"]) << "turn " << i;
    }
    seq = prompt;
    for (const auto& id : t["token_ids"]) seq.push_back(id.get<int64_t>());
  }
}

}  // namespace
}  // namespace anvil
