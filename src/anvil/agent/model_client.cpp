// model_client.cpp: the chat-completions request, its retries, and the parse
// of what came back.
//
// Servers differ in what they accept: vLLM takes return_token_ids and top_k,
// OpenAI's API rejects both ("Unrecognized request argument supplied"),
// pydantic-strict servers say "extra fields not permitted", llama.cpp ignores
// them. A 400 that names an optional field we sent is answered by asking again
// at once without any of them (recorded in the retry log); when that is
// accepted, this client leaves them out from then on, so one configuration
// works everywhere at the price of one refused request.
//
// What is retried (with back-off): no answer at all (refused, reset, timed
// out), 408, 429, 500, 502, 503, 504, and a 200 that is not a completion (not
// JSON, or no choices[0].message: a proxy's error page, a truncated body).
// What fails at once: every other status, and a 5xx whose body says the
// request itself is invalid (llama-cpp-python reports pydantic validation
// errors as 500: asking again gets the same answer).
#include "anvil/agent/model_client.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <mutex>
#include <thread>

#include "anvil/util/json_reader.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"

namespace anvil {

namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The first n characters of a body, trimmed, for error messages.
std::string excerpt(const std::string& body, size_t n = 500) {
  std::string s = trim(body);
  return s.size() > n ? s.substr(0, n) + "..." : s;
}

// "http://h:8000/" and "http://h:8000" -> "http://h:8000/v1"; "http://h/v1/" -> "http://h/v1".
// A base that ends in another version ("/v2") or path gets "/v1" appended too:
// OpenAI-compatible routes live under /v1.
std::string normalise_base(std::string url) {
  while (!url.empty() && url.back() == '/') url.pop_back();
  if (!ends_with(url, "/v1")) url += "/v1";
  return url;
}

bool retryable(long status) {
  return status == 408 || status == 429 || status == 500 || status == 502 || status == 503 || status == 504;
}

// A 5xx that is really the server refusing the request (it will refuse it again).
bool invalid_request_5xx(long status, const std::string& body) {
  return status >= 500 && contains(lower(body), "validation error");
}

// The optional fields a server may refuse (vLLM/SGLang extensions and logprobs).
const char* const kOptional[] = {"logprobs", "top_logprobs", "return_token_ids", "top_k"};

// Whether a 400 says the server does not accept an optional field we sent.
bool refuses_optional(const std::string& body, const Json& sent) {
  std::string b = lower(body);
  bool sent_any = false;
  for (const char* f : kOptional) {
    if (!sent.contains(f)) continue;
    sent_any = true;
    if (contains(b, f)) return true;
  }
  // Phrasings that reject unknown fields without naming ours in a way we can match.
  return sent_any && (contains(b, "extra fields not permitted") || contains(b, "extra inputs are not permitted") ||
                      contains(b, "unrecognized request argument"));
}

// Retry-After in seconds (the HTTP-date form is not used by model servers and
// is ignored, as is anything unparsable): the wait, capped; nullopt when absent.
std::optional<milliseconds> retry_after(const HttpResponse& r, milliseconds cap) {
  std::string v = r.header("Retry-After");
  if (v.empty() || v.size() > 9 || !std::all_of(v.begin(), v.end(), [](unsigned char c) { return std::isdigit(c); })) {
    return std::nullopt;
  }
  return std::min<milliseconds>(std::chrono::seconds(std::stol(v)), cap);
}

// choices[0].logprobs.content -> [{"token", "logprob", "token_id"?}]. The id
// comes from the entry ("token_id"), from vLLM's return_tokens_as_token_ids
// form ("token_id:1234"), or from the choice's token_ids when they line up.
Json parse_logprobs(const Json& choice, const Json& token_ids) {
  if (!choice.contains("logprobs") || !choice["logprobs"].is_object()) return nullptr;
  const Json& content = choice["logprobs"].value("content", Json(nullptr));
  if (!content.is_array()) return nullptr;
  bool aligned = token_ids.is_array() && token_ids.size() == content.size();
  Json out = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& t = content[i];
    if (!t.is_object()) continue;
    Json token = t.value("token", Json(""));
    Json logprob = t.contains("logprob") && t["logprob"].is_number() ? t["logprob"] : Json(nullptr);
    Json e = {{"token", token}, {"logprob", logprob}};
    if (t.contains("token_id") && t["token_id"].is_number_integer()) {
      e["token_id"] = t["token_id"];
    } else if (token.is_string() && starts_with(token.get<std::string>(), "token_id:")) {
      try {
        e["token_id"] = std::stoll(token.get<std::string>().substr(9));
      } catch (const std::exception&) {
      }
    }
    if (!e.contains("token_id") && aligned && token_ids[i].is_number_integer()) e["token_id"] = token_ids[i];
    out.push_back(std::move(e));
  }
  return out;
}

// Fills res from a 200's body; returns "" or what is wrong with it (then retried).
std::string parse_completion(const std::string& body, ChatResponse& res) {
  Json j = untrusted_json(body);
  if (j.is_discarded() || !j.is_object()) return "200 with a body that is not JSON: " + excerpt(body, 120);
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty() || !j["choices"][0].is_object() ||
      !j["choices"][0].contains("message") || !j["choices"][0]["message"].is_object()) {
    return "200 without choices[0].message: " + excerpt(body, 200);
  }
  const Json& c = j["choices"][0];
  res.message = c["message"];
  res.message["role"] = "assistant";
  if (!res.message.contains("content")) res.message["content"] = nullptr;
  res.finish_reason = c.contains("finish_reason") && c["finish_reason"].is_string() ? c["finish_reason"].get<std::string>() : "";
  res.usage = j.contains("usage") && j["usage"].is_object() ? j["usage"] : Json(nullptr);
  res.token_ids = c.contains("token_ids") && c["token_ids"].is_array() ? c["token_ids"] : Json(nullptr);
  // vLLM puts prompt_token_ids on the response; some versions on the choice.
  if (j.contains("prompt_token_ids") && j["prompt_token_ids"].is_array()) {
    res.prompt_token_ids = j["prompt_token_ids"];
  } else if (c.contains("prompt_token_ids") && c["prompt_token_ids"].is_array()) {
    res.prompt_token_ids = c["prompt_token_ids"];
  } else {
    res.prompt_token_ids = nullptr;
  }
  res.logprobs = parse_logprobs(c, res.token_ids);
  return "";
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<std::string> auth_headers(const Endpoint& e, std::vector<std::string> h) {
  if (!e.api_key.empty()) h.push_back("Authorization: Bearer " + e.api_key);
  return h;
}

// A parse problem the server will repeat: not retried.
constexpr const char* kPermanent = "(not retried) ";

std::vector<int64_t> ids_of_json(const Json& a) {
  std::vector<int64_t> out;
  if (!a.is_array()) return out;
  for (const auto& x : a) {
    if (x.is_number_integer()) out.push_back(x.get<int64_t>());
  }
  return out;
}

bool all_ids(const Json& a) {
  return a.is_array() && std::all_of(a.begin(), a.end(), [](const Json& x) { return x.is_number_integer(); });
}

// A text completion (POST /completions with a prompt of token ids): the text as the assistant's
// content, the sampled ids (required: token-in/token-out has no other source of them) and their
// log-probabilities ({"tokens", "token_logprobs"}, OpenAI's legacy form) as [{"token", "logprob", "token_id"}].
std::string parse_text_completion(const std::string& body, ChatResponse& res) {
  Json j = untrusted_json(body);
  if (j.is_discarded() || !j.is_object()) return "200 with a body that is not JSON: " + excerpt(body, 120);
  if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty() || !j["choices"][0].is_object() ||
      !j["choices"][0].contains("text") || !j["choices"][0]["text"].is_string()) {
    return "200 without choices[0].text: " + excerpt(body, 200);
  }
  const Json& c = j["choices"][0];
  if (!all_ids(c.value("token_ids", Json()))) {
    return std::string(kPermanent) + "200 without choices[0].token_ids (token-in/token-out needs the server to return the sampled ids: "
           "vLLM's return_token_ids): " + excerpt(body, 200);
  }
  res.message = {{"role", "assistant"}, {"content", c["text"]}};
  res.finish_reason = c.contains("finish_reason") && c["finish_reason"].is_string() ? c["finish_reason"].get<std::string>() : "";
  res.usage = j.contains("usage") && j["usage"].is_object() ? j["usage"] : Json(nullptr);
  res.token_ids = c["token_ids"];
  res.prompt_token_ids = j.contains("prompt_token_ids") && all_ids(j["prompt_token_ids"]) ? j["prompt_token_ids"] : Json(nullptr);
  res.logprobs = nullptr;
  const Json lp = c.value("logprobs", Json());
  if (lp.is_object() && lp.value("token_logprobs", Json()).is_array()) {
    const Json& values = lp["token_logprobs"];
    const Json tokens = lp.value("tokens", Json::array());
    if (values.size() == res.token_ids.size()) {
      res.logprobs = Json::array();
      for (size_t i = 0; i < values.size(); ++i) {
        res.logprobs.push_back({{"token", i < tokens.size() ? tokens[i] : Json("")},
                                {"logprob", values[i].is_number() ? values[i] : Json(nullptr)},
                                {"token_id", res.token_ids[i]}});
      }
    }
  }
  return "";
}

// POST /tokenize's answer: {"tokens": [ids]} into res.token_ids.
std::string parse_tokens(const std::string& body, ChatResponse& res) {
  Json j = untrusted_json(body);
  if (j.is_discarded() || !j.is_object() || !all_ids(j.value("tokens", Json()))) {
    return "200 without tokens (a list of ids): " + excerpt(body, 200);
  }
  res.token_ids = j["tokens"];
  return "";
}

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
  // 400 from vLLM, SGLang, OpenAI and llama.cpp; 413 from proxies; 422 from
  // servers that validate with pydantic (TGI-style "input validation error").
  if (status != 400 && status != 413 && status != 422) return false;
  std::string b = lower(body);
  for (const char* p : {"maximum context length", "context length", "context_length_exceeded", "context window",
                        "exceeds the available context size", "too many tokens", "prompt is too long",
                        "input is too long", "maximum input length"}) {
    if (contains(b, p)) return true;
  }
  return false;
}

ModelClient::ModelClient(Endpoint endpoint, HttpClient& http, RetryPolicy retry,
                         std::function<void(std::chrono::milliseconds)> sleep)
    : endpoint_(std::move(endpoint)), http_(http), retry_(retry), sleep_(std::move(sleep)) {
  endpoint_.base_url = normalise_base(endpoint_.base_url);
  if (!sleep_) sleep_ = [](milliseconds d) { std::this_thread::sleep_for(d); };
}

ChatResponse ModelClient::chat(const Json& messages, const Json& tools, const SamplingOptions& s) {
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
      if (s.logprobs) {
        b["logprobs"] = true;
        b["top_logprobs"] = 0;  // llama.cpp's server returns no logprobs without it
      }
      if (s.return_token_ids) b["return_token_ids"] = true;
    }
    if (s.extra.is_object()) {
      for (auto it = s.extra.begin(); it != s.extra.end(); ++it) b[it.key()] = it.value();
    }
    return b;
  };
  return post(endpoint_.base_url + "/chat/completions", body_for, parse_completion, /*optional_fields=*/true);
}

ChatResponse ModelClient::complete(const std::vector<int64_t>& prompt, const SamplingOptions& s) {
  auto body_for = [&](bool) {
    Json b = {{"model", endpoint_.model}, {"prompt", prompt}, {"logprobs", 0}, {"return_token_ids", true}};
    if (s.temperature) b["temperature"] = *s.temperature;
    if (s.top_p) b["top_p"] = *s.top_p;
    if (s.top_k) b["top_k"] = *s.top_k;
    if (s.max_tokens) b["max_tokens"] = *s.max_tokens;
    if (s.seed) b["seed"] = *s.seed;
    if (s.extra.is_object()) {
      for (auto it = s.extra.begin(); it != s.extra.end(); ++it) b[it.key()] = it.value();
    }
    return b;
  };
  return post(endpoint_.base_url + "/completions", body_for, parse_text_completion, /*optional_fields=*/false);
}

TokenizeResult ModelClient::tokenize_chat(const Json& messages, const Json& tools, bool add_generation_prompt) {
  auto body_for = [&](bool) {
    Json b = {{"model", endpoint_.model}, {"messages", messages}, {"add_generation_prompt", add_generation_prompt}};
    if (tools.is_array() && !tools.empty()) b["tools"] = tools;
    return b;
  };
  // vLLM serves /tokenize beside /v1, not under it.
  std::string root = endpoint_.base_url.substr(0, endpoint_.base_url.size() - 3);
  ChatResponse r = post(root + "/tokenize", body_for, parse_tokens, /*optional_fields=*/false);
  TokenizeResult out;
  out.ok = r.status == ChatResponse::Status::ok;
  out.http_status = r.http_status;
  out.error = r.error;
  if (out.ok) out.tokens = ids_of_json(r.token_ids);
  return out;
}

ChatResponse ModelClient::post(const std::string& url, const std::function<Json(bool)>& body_for,
                               const std::function<std::string(const std::string&, ChatResponse&)>& parse,
                               bool optional_fields) {
  ChatResponse res;
  auto t0 = std::chrono::steady_clock::now();
  HttpRequest req;
  req.url = url;
  req.headers = auth_headers(endpoint_, {"Content-Type: application/json", "Accept: application/json"});
  req.timeout = retry_.request_timeout;
  const std::string what = "POST " + req.url + " (model " + endpoint_.model + ")";

  milliseconds backoff = retry_.initial_backoff;
  int failures = 0;       // attempts that count against max_attempts
  bool dropping = false;  // this call leaves the optional fields out, on trial (see below)
  while (true) {
    bool drop = dropping;
    if (optional_fields) {
      std::lock_guard<std::mutex> lock(mu_);
      drop = drop || drop_optional_;
    }
    Json body = body_for(drop);
    req.body = json_text(body);
    ++res.attempts;
    HttpResponse r = http_.send(req);
    res.http_status = r.transport_ok ? r.status : 0;

    std::string problem;  // why this attempt failed, for the retry log
    if (!r.transport_ok) {
      problem = "no answer: " + r.error;
    } else if (r.status == 200) {
      problem = parse(r.body, res);
      if (starts_with(problem, kPermanent)) {
        res.status = ChatResponse::Status::failed;
        res.error = what + ": " + problem.substr(std::string(kPermanent).size());
        res.retry_log.push_back(problem);
        res.seconds = seconds_since(t0);
        return res;
      }
      if (problem.empty()) {
        if (dropping) {
          // Accepted without them: the server does not take them; later requests leave them out.
          std::lock_guard<std::mutex> lock(mu_);
          drop_optional_ = true;
        }
        res.status = ChatResponse::Status::ok;
        res.error.clear();
        res.seconds = seconds_since(t0);
        return res;
      }
    } else if (is_context_overflow(r.status, r.body)) {
      res.status = ChatResponse::Status::context_overflow;
      res.error = what + ": the request exceeds the model's context: HTTP " + std::to_string(r.status) + ": " +
                  excerpt(r.body);
      res.seconds = seconds_since(t0);
      return res;
    } else if (optional_fields && r.status == 400 && !drop && refuses_optional(r.body, body)) {
      // Only remembered for the client once a request without them is
      // accepted: a 400 that merely echoes our body (field names and all)
      // must not cost every later request its token ids.
      dropping = true;
      res.retry_log.push_back("HTTP 400: the server refused an optional field (logprobs, return_token_ids, top_k); "
                              "asking again without them: " + excerpt(r.body, 200));
      continue;  // at once, and not counted against max_attempts
    } else {
      problem = "HTTP " + std::to_string(r.status) + ": " + excerpt(r.body, 200);
      if (!retryable(r.status) || invalid_request_5xx(r.status, r.body)) {
        res.status = ChatResponse::Status::failed;
        res.error = what + ": HTTP " + std::to_string(r.status) + " (not retried): " + excerpt(r.body);
        res.retry_log.push_back(problem);
        res.seconds = seconds_since(t0);
        return res;
      }
    }

    // A failure worth retrying.
    ++failures;
    res.retry_log.push_back(problem);
    if (failures >= retry_.max_attempts) {
      res.status = ChatResponse::Status::failed;
      res.error = what + ": gave up after " + std::to_string(res.attempts) + " attempts; the last: " + problem;
      res.seconds = seconds_since(t0);
      return res;
    }
    milliseconds wait = backoff;
    if (r.transport_ok) {
      if (auto ra = retry_after(r, retry_.max_backoff)) wait = *ra;
    }
    sleep_(wait);
    backoff = std::min<milliseconds>(
        milliseconds(static_cast<long long>(static_cast<double>(backoff.count()) * retry_.factor)), retry_.max_backoff);
  }
}

std::string ModelClient::check() const {
  // GET /models: 3 attempts, 1 s then 2 s apart, each with short timeouts, so
  // a server that is still starting gets a few seconds and a dead one fails fast.
  const int kAttempts = 3;
  HttpRequest req;
  req.method = "GET";
  req.url = endpoint_.base_url + "/models";
  req.headers = auth_headers(endpoint_, {"Accept: application/json"});
  req.timeout = std::chrono::seconds(5);
  req.connect_timeout = std::chrono::seconds(2);
  HttpResponse r;
  int attempts = 0;
  auto t0 = std::chrono::steady_clock::now();
  milliseconds wait(1000);
  while (true) {
    r = http_.send(req);
    ++attempts;
    if ((r.transport_ok && !retryable(r.status)) || attempts == kAttempts) break;
    sleep_(wait);
    wait *= 2;
  }
  char took[32];
  std::snprintf(took, sizeof took, "%.1f s", seconds_since(t0));
  const std::string tried = "GET " + req.url + ", " + std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts") +
                            " over " + took;
  const std::string model = "model '" + endpoint_.model + "'";
  if (!r.transport_ok) {
    return "cannot reach the model server at " + endpoint_.base_url + " for " + model + " (" + tried + "): " + r.error +
           "; is the server running, and is the URL right (e.g. http://HOST:8000/v1 for vLLM, :30000 for SGLang)?";
  }
  if (r.status == 401 || r.status == 403) {
    return "the model server at " + endpoint_.base_url + " refused " + tried + " for " + model + " (HTTP " +
           std::to_string(r.status) + "): set the API key in ANVIL_API_KEY or OPENAI_API_KEY, or name its variable " +
           "with --api-key-env: " + excerpt(r.body, 200);
  }
  if (r.status == 200) {
    Json j = untrusted_json(r.body);
    std::vector<std::string> ids;
    if (!j.is_discarded() && j.is_object() && j.contains("data") && j["data"].is_array()) {
      for (const auto& m : j["data"]) {
        if (m.is_object() && m.contains("id") && m["id"].is_string()) ids.push_back(m["id"]);
      }
    }
    if (std::find(ids.begin(), ids.end(), endpoint_.model) != ids.end()) return "";
    if (!ids.empty()) {
      return "the model server at " + endpoint_.base_url + " does not serve " + model + "; it serves: " +
             join(ids, ", ") + " (pass one of them with --model)";
    }
    // A listing with no ids: ask the model itself, below.
  } else if (r.status != 404 && r.status != 405) {
    return "the model server at " + endpoint_.base_url + " answered " + tried + " for " + model + " with HTTP " +
           std::to_string(r.status) + ": " + excerpt(r.body, 300);
  }
  // No usable /models (404, 405, or an empty listing): one minimal chat
  // request, whose error names an unknown model on every server we know.
  HttpRequest c;
  c.url = endpoint_.base_url + "/chat/completions";
  c.headers = auth_headers(endpoint_, {"Content-Type: application/json", "Accept: application/json"});
  c.timeout = std::chrono::seconds(60);
  c.connect_timeout = std::chrono::seconds(2);
  c.body = json_text(Json({{"model", endpoint_.model},
                          {"messages", Json::array({{{"role", "user"}, {"content", "ping"}}})},
                          {"max_tokens", 1}}));
  HttpResponse cr = http_.send(c);
  if (cr.transport_ok && cr.status == 200) return "";
  return "the model server at " + endpoint_.base_url + " has no usable GET /models (HTTP " + std::to_string(r.status) +
         "), and a one-token POST " + c.url + " for " + model + " failed: " +
         (cr.transport_ok ? "HTTP " + std::to_string(cr.status) + ": " + excerpt(cr.body, 300) : cr.error);
}

}  // namespace anvil
