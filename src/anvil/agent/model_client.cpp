// model_client.cpp: the chat-completions request, its retries, and the parse
// of what came back.
//
// Servers differ in what they accept: vLLM takes return_token_ids and top_k,
// OpenAI's API rejects both, llama.cpp ignores them. A 400 that names an
// optional field we sent drops those fields for this client from then on
// (recorded in the retry log), so one configuration works everywhere.
#include "anvil/agent/model_client.h"

#include <algorithm>
#include <cctype>
#include <mutex>
#include <thread>

#include "anvil/util/strings.h"

namespace anvil {

namespace {

using Json = nlohmann::json;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string excerpt(const std::string& body, size_t n = 500) {
  std::string s = trim(body);
  return s.size() > n ? s.substr(0, n) + "..." : s;
}

std::string normalise_base(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (!ends_with(url, "/v1")) url += "/v1";
  return url;
}

bool retryable(long status) { return status == 408 || status == 409 || status == 429 || status >= 500; }

// The optional fields a server may refuse, in the request body.
const char* kOptional[] = {"logprobs", "return_token_ids", "top_k"};

}  // namespace

Json SamplingOptions::to_json() const {
  Json j = Json::object();
  if (temperature) j["temperature"] = *temperature;
  if (top_p) j["top_p"] = *top_p;
  if (top_k) j["top_k"] = *top_k;
  if (max_tokens) j["max_tokens"] = *max_tokens;
  if (seed) j["seed"] = *seed;
  j["logprobs"] = logprobs;
  j["return_token_ids"] = return_token_ids;
  if (!extra.empty()) j["extra"] = extra;
  return j;
}

bool is_context_overflow(long status, const std::string& body) {
  if (status != 400 && status != 413 && status != 422) return false;
  std::string b = lower(body);
  for (const char* p : {"maximum context length", "context length", "context_length_exceeded", "context window",
                        "exceeds the available context size", "too many tokens", "prompt is too long",
                        "input is too long", "maximum input length"}) {
    if (b.find(p) != std::string::npos) return true;
  }
  return false;
}

ModelClient::ModelClient(Endpoint endpoint, HttpClient& http, RetryPolicy retry,
                         std::function<void(std::chrono::milliseconds)> sleep)
    : endpoint_(std::move(endpoint)), http_(http), retry_(retry), sleep_(std::move(sleep)) {
  endpoint_.base_url = normalise_base(endpoint_.base_url);
  if (!sleep_) sleep_ = [](std::chrono::milliseconds d) { std::this_thread::sleep_for(d); };
}

ChatResponse ModelClient::chat(const Json& messages, const Json& tools, const SamplingOptions& s) {
  ChatResponse res;
  auto t0 = std::chrono::steady_clock::now();
  auto body_for = [&](bool drop_optional) {
    Json b = {{"model", endpoint_.model}, {"messages", messages}};
    if (tools.is_array() && !tools.empty()) {
      b["tools"] = tools;
      b["tool_choice"] = "auto";
    }
    if (s.temperature) b["temperature"] = *s.temperature;
    if (s.top_p) b["top_p"] = *s.top_p;
    if (s.max_tokens) b["max_tokens"] = *s.max_tokens;
    if (s.seed) b["seed"] = *s.seed;
    if (!drop_optional) {
      if (s.top_k) b["top_k"] = *s.top_k;
      if (s.logprobs) b["logprobs"] = true;
      if (s.return_token_ids) b["return_token_ids"] = true;
    }
    for (auto it = s.extra.begin(); it != s.extra.end(); ++it) b[it.key()] = it.value();
    return b;
  };
  HttpRequest req;
  req.url = endpoint_.base_url + "/chat/completions";
  req.headers = {"Content-Type: application/json", "Accept: application/json"};
  if (!endpoint_.api_key.empty()) req.headers.push_back("Authorization: Bearer " + endpoint_.api_key);
  req.timeout = retry_.request_timeout;

  auto backoff = retry_.initial_backoff;
  bool fallback_tried = false;
  for (int attempt = 1; attempt <= retry_.max_attempts; ++attempt) {
    bool drop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      drop = drop_optional_;
    }
    req.body = body_for(drop).dump();
    res.attempts = attempt;
    HttpResponse r = http_.send(req);
    res.http_status = r.transport_ok ? r.status : 0;
    std::string problem;
    std::chrono::milliseconds wait = backoff;
    if (!r.transport_ok) {
      problem = "no answer: " + r.error;
    } else if (r.status == 200) {
      Json j = Json::parse(r.body, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        problem = "200 with a body that is not JSON: " + excerpt(r.body, 120);
      } else if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty() ||
                 !j["choices"][0].is_object() || !j["choices"][0].contains("message")) {
        problem = "200 without choices[0].message: " + excerpt(r.body, 200);
      } else {
        const Json& c = j["choices"][0];
        res.status = ChatResponse::Status::ok;
        res.message = c["message"].is_object() ? c["message"] : Json::object();
        res.message["role"] = "assistant";
        if (!res.message.contains("content")) res.message["content"] = nullptr;
        res.finish_reason = c.contains("finish_reason") && c["finish_reason"].is_string()
                                ? c["finish_reason"].get<std::string>()
                                : "";
        res.usage = j.contains("usage") ? j["usage"] : Json(nullptr);
        if (c.contains("token_ids") && c["token_ids"].is_array()) res.token_ids = c["token_ids"];
        if (j.contains("prompt_token_ids") && j["prompt_token_ids"].is_array()) res.prompt_token_ids = j["prompt_token_ids"];
        else if (c.contains("prompt_token_ids") && c["prompt_token_ids"].is_array()) res.prompt_token_ids = c["prompt_token_ids"];
        if (c.contains("logprobs") && c["logprobs"].is_object() && c["logprobs"].contains("content") &&
            c["logprobs"]["content"].is_array()) {
          res.logprobs = Json::array();
          for (const auto& t : c["logprobs"]["content"]) {
            Json e = {{"token", t.value("token", std::string())}, {"logprob", t.value("logprob", 0.0)}};
            if (t.contains("token_id")) e["token_id"] = t["token_id"];
            res.logprobs.push_back(e);
          }
        }
        res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        return res;
      }
    } else if (is_context_overflow(r.status, r.body)) {
      res.status = ChatResponse::Status::context_overflow;
      res.error = "HTTP " + std::to_string(r.status) + ": " + excerpt(r.body);
      res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return res;
    } else if (r.status == 400 && !drop && !fallback_tried) {
      std::string b = lower(r.body);
      bool names_optional = false;
      for (const char* f : kOptional) names_optional = names_optional || b.find(f) != std::string::npos;
      if (names_optional || b.find("extra fields not permitted") != std::string::npos ||
          b.find("unrecognized request argument") != std::string::npos) {
        std::lock_guard<std::mutex> lock(mu_);
        drop_optional_ = true;
        fallback_tried = true;
        res.retry_log.push_back("400: the server refused an optional field (logprobs, return_token_ids, top_k); "
                                "asking again without them: " + excerpt(r.body, 200));
        continue;  // at once, not counted as a failure
      }
      problem = "HTTP 400";
    } else {
      problem = "HTTP " + std::to_string(r.status);
    }
    // A request the server cannot parse fails the same way every time, even
    // when a server reports it as a 500 (llama-cpp-python's validation errors).
    bool invalid = r.transport_ok && r.status >= 500 && lower(r.body).find("validation error") != std::string::npos;
    if (r.transport_ok && r.status != 200 && (!retryable(r.status) || invalid)) {
      res.status = ChatResponse::Status::failed;
      res.error = "POST " + req.url + " (model " + endpoint_.model + "): " + problem + ": " + excerpt(r.body);
      res.retry_log.push_back(problem + ": " + excerpt(r.body, 200));
      res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return res;
    }
    if (r.transport_ok && r.status != 200) problem += ": " + excerpt(r.body, 200);
    std::string after = r.transport_ok ? r.header("Retry-After") : "";
    if (!after.empty() && std::all_of(after.begin(), after.end(), ::isdigit)) {
      wait = std::min<std::chrono::milliseconds>(std::chrono::seconds(std::stol(after)), retry_.max_backoff);
    }
    res.retry_log.push_back(problem);
    res.error = "POST " + req.url + " (model " + endpoint_.model + "): gave up after " + std::to_string(attempt) +
                " attempts; the last: " + problem;
    if (attempt < retry_.max_attempts) {
      sleep_(wait);
      backoff = std::min<std::chrono::milliseconds>(
          std::chrono::milliseconds(static_cast<long>(static_cast<double>(backoff.count()) * retry_.factor)),
          retry_.max_backoff);
    }
  }
  res.status = ChatResponse::Status::failed;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

std::string ModelClient::check() const {
  HttpRequest req;
  req.method = "GET";
  req.url = endpoint_.base_url + "/models";
  req.headers = {"Accept: application/json"};
  if (!endpoint_.api_key.empty()) req.headers.push_back("Authorization: Bearer " + endpoint_.api_key);
  req.timeout = std::chrono::seconds(10);
  req.connect_timeout = std::chrono::seconds(3);
  HttpResponse r;
  int attempts = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (; attempts < 3; ++attempts) {
    r = http_.send(req);
    if (r.transport_ok && !retryable(r.status)) break;
    if (attempts < 2) sleep_(std::chrono::milliseconds(1000));
  }
  attempts = std::min(attempts + 1, 3);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char took[64];
  std::snprintf(took, sizeof took, "%d attempt%s over %.1f s", attempts, attempts == 1 ? "" : "s", secs);
  std::string where = endpoint_.base_url + " (model " + endpoint_.model + ")";
  if (!r.transport_ok) {
    return "cannot reach the model server at " + where + ": GET /models, " + took + ": " + r.error +
           ". Is the server running, and is the URL right (e.g. http://HOST:8000/v1 for vLLM, :30000 for SGLang)?";
  }
  if (r.status == 401 || r.status == 403) {
    return "the model server at " + where + " refused the request (HTTP " + std::to_string(r.status) +
           "): set the API key in ANVIL_API_KEY or OPENAI_API_KEY, or name its variable with --api-key-env. " +
           excerpt(r.body, 200);
  }
  if (r.status == 200) {
    Json j = Json::parse(r.body, nullptr, false);
    std::vector<std::string> ids;
    if (!j.is_discarded() && j.is_object() && j.contains("data") && j["data"].is_array()) {
      for (const auto& m : j["data"]) {
        if (m.is_object() && m.contains("id") && m["id"].is_string()) ids.push_back(m["id"]);
      }
    }
    if (std::find(ids.begin(), ids.end(), endpoint_.model) != ids.end()) return "";
    if (!ids.empty()) {
      return "the model server at " + endpoint_.base_url + " does not serve model '" + endpoint_.model +
             "' (GET /models lists: " + join(ids, ", ") + "); pass one of them with --model";
    }
    // A server that lists nothing useful: ask the model itself, below.
  }
  // No usable /models (404, or an empty list): one minimal chat request.
  HttpRequest c;
  c.url = endpoint_.base_url + "/chat/completions";
  c.headers = {"Content-Type: application/json"};
  if (!endpoint_.api_key.empty()) c.headers.push_back("Authorization: Bearer " + endpoint_.api_key);
  c.timeout = std::chrono::seconds(120);
  c.body = Json({{"model", endpoint_.model},
                 {"messages", Json::array({{{"role", "user"}, {"content", "ping"}}})},
                 {"max_tokens", 1}})
               .dump();
  HttpResponse cr = http_.send(c);
  if (cr.transport_ok && cr.status == 200) return "";
  return "the model server at " + where + " has no usable GET /models (HTTP " + std::to_string(r.status) +
         ") and a one-token chat request failed: " +
         (cr.transport_ok ? "HTTP " + std::to_string(cr.status) + ": " + excerpt(cr.body, 300) : cr.error);
}

}  // namespace anvil
