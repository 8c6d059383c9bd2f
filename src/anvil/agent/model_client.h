// model_client.h: chat completions against any OpenAI-compatible server
// (vLLM, SGLang, llama.cpp, hosted APIs).
//
// One call to chat() is one model turn: the request (messages, tools, sampling
// settings) is sent, retried with exponential back-off on 429, 5xx and dropped
// connections (honouring Retry-After), and the first choice's message comes
// back with its finish_reason, usage, and, when the server returns them, the
// generated token ids and log-probabilities (vLLM's return_token_ids and
// logprobs), which RL training needs exactly. A context-length error (HTTP 400
// naming the maximum context length) is its own status, so the agent can
// shorten its history and ask again; it is never retried as is.
#pragma once

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "anvil/agent/http.h"

namespace anvil {

struct Endpoint {
  // e.g. http://127.0.0.1:8000/v1. Normalised by ModelClient: trailing '/'
  // stripped, then "/v1" appended unless it already ends with "/v1"
  // (http://h:8000/ -> http://h:8000/v1); requests go to {base}/chat/completions
  // and {base}/models.
  std::string base_url;
  std::string model;
  std::string api_key;   // sent as "Authorization: Bearer ..." when not empty
};

struct SamplingOptions {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int> top_k;            // vLLM/SGLang extension
  std::optional<int> max_tokens;       // per turn
  std::optional<uint64_t> seed;
  bool logprobs = true;                // ask for log-probabilities (servers that refuse get none)
  bool return_token_ids = true;        // vLLM: prompt_token_ids and token_ids
  nlohmann::json extra = nlohmann::json::object();  // merged into the request body as is
  nlohmann::json to_json() const;      // what the trajectory records
};

// Retried: no answer (refused, reset, timed out), HTTP 408, 429, 500, 502,
// 503, 504, and a 200 that is not a completion. The wait before retry n is
// initial_backoff * factor^(n-1), capped at max_backoff; a Retry-After header
// (seconds) replaces it, capped the same way.
struct RetryPolicy {
  int max_attempts = 8;  // requests per chat(), not counting the one sent again without optional fields
  std::chrono::milliseconds initial_backoff{1000};
  double factor = 2.0;
  std::chrono::milliseconds max_backoff{60000};
  std::chrono::milliseconds request_timeout{900000};  // one request (a long generation)
};

struct ChatResponse {
  enum class Status {
    ok,                // message holds the model's turn
    context_overflow,  // the server said the request exceeds the context length
    failed,            // gave up: error says why (status, body excerpt, attempts)
  };
  Status status = Status::failed;
  std::string error;
  long http_status = 0;      // the last HTTP status (0: no answer)
  int attempts = 0;          // requests sent, retries included
  std::vector<std::string> retry_log;  // one line per failed attempt: "HTTP 503: {body excerpt}", "no answer: ...",
                                       // "200 with a body that is not JSON: ...", "HTTP 400: the server refused ..."
  nlohmann::json message;    // {"role":"assistant","content":...,"tool_calls":[...]}
  std::string finish_reason; // stop | length | tool_calls | ...
  nlohmann::json usage;      // {"prompt_tokens", "completion_tokens", "total_tokens"} or null
  nlohmann::json prompt_token_ids;  // arrays of ints, or null when not returned
  nlohmann::json token_ids;
  nlohmann::json logprobs;   // [{"token","logprob","token_id"?}, ...] or null (token_id from the entry,
                             // vLLM's "token_id:N" tokens, or token_ids when they line up)
  double seconds = 0;        // wall time, retries and back-off included
};

struct TokenizeResult {
  bool ok = false;
  std::string error;
  long http_status = 0;
  std::vector<int64_t> tokens;
};

// Thread-safe: one client serves many concurrent episodes (the HttpClient
// must be thread-safe too, as make_http_client()'s is).
class ModelClient {
 public:
  // `sleep` waits between retries (tests pass a recorder).
  ModelClient(Endpoint endpoint, HttpClient& http, RetryPolicy retry = {},
              std::function<void(std::chrono::milliseconds)> sleep = {});

  ChatResponse chat(const nlohmann::json& messages, const nlohmann::json& tools, const SamplingOptions& sampling);

  // Token-in/token-out (vLLM's endpoints; anvil.local_model's): one turn sampled after `prompt`
  // (POST {base}/completions with the ids, logprobs 0, return_token_ids): message.content is the
  // text, token_ids the sampled ids (a server that returns none fails the call), logprobs
  // [{"token", "logprob", "token_id"}] where it returns them. Retried as chat() is.
  ChatResponse complete(const std::vector<int64_t>& prompt, const SamplingOptions& sampling);
  // The model's own chat template over `messages` and `tools`, as token ids (POST /tokenize beside
  // {base}, vLLM's), with the generation prompt or without.
  TokenizeResult tokenize_chat(const nlohmann::json& messages, const nlohmann::json& tools, bool add_generation_prompt);

  // Checks, before any episode, that the endpoint answers and serves the
  // model: GET {base}/models (3 attempts over about 3 s). Returns "" when it
  // does, else one message naming the URL, the model and what was tried
  // ("cannot reach the model server at URL for model 'm' (GET URL/models, 3
  // attempts over 3.0 s): Failed to connect ...; is the server running ...?",
  // "... does not serve model 'm'; it serves: a, b ..."). Without a usable
  // /models (404) a one-token chat request decides, and its error is quoted.
  std::string check() const;

  const Endpoint& endpoint() const { return endpoint_; }

 private:
  // One request with the retry policy: body_for(drop_optional) is what is sent, parse fills the
  // answer from a 200's body ("" or what is wrong with it, then retried). optional_fields: a
  // server that refuses the optional fields is asked again without them (chat's).
  // A parse problem marked permanent (model_client.cpp kPermanent) is not retried.
  ChatResponse post(const std::string& url, const std::function<nlohmann::json(bool)>& body_for,
                    const std::function<std::string(const std::string&, ChatResponse&)>& parse, bool optional_fields);

  Endpoint endpoint_;
  HttpClient& http_;
  RetryPolicy retry_;
  std::function<void(std::chrono::milliseconds)> sleep_;
  // A server refused an optional field (logprobs, return_token_ids, top_k)
  // and accepted the request without them: they are left out of this
  // client's later requests (all threads'; read and set under mu_).
  std::mutex mu_;
  bool drop_optional_ = false;
};

// Whether an error answer says the prompt is longer than the model's context:
// HTTP 400 (413, 422 from proxies and pydantic servers) whose body contains,
// case-insensitively, one of the servers' phrasings (vLLM: "maximum context length is N tokens"; SGLang: "longer than the
// model's context length"; OpenAI: "context_length_exceeded"; llama.cpp:
// "exceeds the available context size").
bool is_context_overflow(long status, const std::string& body);

}  // namespace anvil
