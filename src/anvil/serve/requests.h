// requests.h: the checks of `anvil serve`'s request bodies (docs/service.md), shared by the
// stateless evaluations and the sessions: each part of a body validated into the form the store
// and the workers use, or refused with the field it names.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "anvil/env/eval.h"

namespace anvil {

// What an HTTP layer sends back: a status, a JSON body, extra headers.
struct ServeReply {
  int status = 200;
  nlohmann::json body;
  std::vector<std::pair<std::string, std::string>> headers;
};

// A 4xx body: {"error": {"field": ..., "message": ...}} (field "" when the whole body is wrong).
ServeReply serve_error(int status, const std::string& field, const std::string& message);

// A body that cannot be accepted: which field ("" for the whole body), and why.
struct Invalid {
  std::string field;
  std::string message;
};

// Bounds of what a request may carry inline.
struct RequestLimits {
  size_t max_files = 256;            // files of one inline candidate
  size_t max_file_bytes = 4u << 20;  // bytes of one inline file (a task's source, a candidate's file)
};

// A relative path that stays inside its directory: no "..", not absolute, no empty parts.
bool inside(const std::string& rel);

// Unknown members of `obj` (known: `keys`), named as where.KEY.
std::optional<Invalid> only_keys(const nlohmann::json& obj, const std::string& where, const std::vector<std::string>& keys);

// body["task"]: {path} (FILE or DATASET#ROW on the server, made absolute) or {source, name}.
std::optional<Invalid> validate_task(const nlohmann::json& body, const RequestLimits& limits, nlohmann::json* out);
// body["candidate"]: {path}, {source, beside?} (a KernelBench single file, and the C/C++/CUDA sources
// beside it its load() calls name) or {files} (relative path -> text, or {"base64": ...} for a file
// that is not UTF-8 text).
std::optional<Invalid> validate_candidate(const nlohmann::json& body, const RequestLimits& limits, nlohmann::json* out);
// An object of relative path -> text or {"base64": ...} (candidate.files, candidate.beside), within limits.
std::optional<Invalid> validate_files(const nlohmann::json& files, const std::string& where, const RequestLimits& limits);
// The bytes of one of a validated candidate.files' values: its text, or its {"base64": ...} decoded.
std::string file_content(const nlohmann::json& value);
// body["options"] (absent: {}): protocol, preset, trials, seed, measure_time, compile_mode.
std::optional<Invalid> validate_options(const nlohmann::json& body, nlohmann::json* out);
// `o` with a request's validated options applied.
EvalOptions with_options(EvalOptions o, const nlohmann::json& options);
// The idempotency key of a request: the Idempotency-Key header's or the body's idempotency_key
// (both: the same), at most 256 bytes; "" when neither.
std::optional<Invalid> idempotency_key_of(const nlohmann::json& body, const std::string& header_key, std::string* key);

// The keys anvil derives for its own records begin with this, and a client's key may not: a client
// that knows a session's id cannot take the key of that session's final evaluation first.
inline constexpr const char* kOwnKeyPrefix = "anvil:";

// The key of session `id`'s final evaluation (one per session: a retried finalize answers the same).
inline std::string session_final_key(const std::string& id) { return std::string(kOwnKeyPrefix) + "session:" + id; }
// An evaluation request: {task, candidate, options?, idempotency_key?} -> {task, candidate, options}.
std::optional<Invalid> validate_evaluation(const nlohmann::json& body, const RequestLimits& limits, nlohmann::json* out);

}  // namespace anvil
