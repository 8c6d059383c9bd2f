#include "anvil/serve/requests.h"

#include <algorithm>
#include <filesystem>

#include "anvil/env/protocol.h"
#include "anvil/util/hash.h"
#include "anvil/util/strings.h"

namespace anvil {
namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

const std::vector<std::string> kTaskKeys = {"path", "source", "name"};
const std::vector<std::string> kCandidateKeys = {"path", "source", "files", "beside"};
const std::vector<std::string> kCandidateForms = {"path", "source", "files"};
const std::vector<std::string> kCompileModes = {"default", "reduce-overhead", "max-autotune",
                                                "max-autotune-no-cudagraphs", "none"};
const std::vector<std::string> kOptionKeys = {"protocol", "preset", "trials", "seed", "measure_time", "compile_mode",
                                              "config"};

// Exactly one of `keys` present.
std::optional<Invalid> one_of(const Json& obj, const std::string& where, const std::vector<std::string>& keys) {
  int n = 0;
  for (const auto& k : keys) n += obj.contains(k) ? 1 : 0;
  if (n != 1) return Invalid{where, "give exactly one of: " + join(keys, ", ")};
  return std::nullopt;
}

std::optional<Invalid> text_within(const Json& v, const std::string& field, const std::string& what,
                                   const RequestLimits& limits) {
  if (!v.is_string()) return Invalid{field, what + ", a string"};
  if (v.get_ref<const std::string&>().size() > limits.max_file_bytes) {
    return Invalid{field, "larger than " + std::to_string(limits.max_file_bytes) + " bytes"};
  }
  return std::nullopt;
}

}  // namespace

std::string file_content(const Json& value) {
  if (value.is_string()) return value.get<std::string>();
  return base64_decode(value.at("base64").get_ref<const std::string&>()).value_or("");
}

ServeReply serve_error(int status, const std::string& field, const std::string& message) {
  return {status, {{"error", {{"field", field}, {"message", message}}}}, {}};
}

EvalOptions with_options(EvalOptions o, const Json& op) {
  if (op.contains("protocol")) o.protocol = op["protocol"];
  if (op.contains("preset")) o.preset = op["preset"];
  if (op.contains("trials")) o.trials = op["trials"];
  if (op.contains("seed")) o.seed = op["seed"].get<uint32_t>();
  if (op.contains("measure_time")) o.measure_time = op["measure_time"];
  if (op.contains("compile_mode")) o.compile_mode = op["compile_mode"];
  if (op.contains("config")) o.config = op["config"].get<int64_t>();
  return o;
}

bool inside(const std::string& rel) {
  if (rel.empty() || rel.size() > 255 || rel.front() == '/') return false;
  for (const auto& part : fs::path(rel)) {
    std::string p = part.string();
    if (p.empty() || p == "." || p == ".." || p.find('\0') != std::string::npos) return false;
  }
  return true;
}

std::optional<Invalid> only_keys(const Json& obj, const std::string& where, const std::vector<std::string>& keys) {
  for (const auto& [k, _] : obj.items()) {
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
      return Invalid{where.empty() ? k : where + "." + k, "unknown field (known: " + join(keys, ", ") + ")"};
    }
  }
  return std::nullopt;
}

std::optional<Invalid> validate_task(const Json& body, const RequestLimits& limits, Json* out) {
  if (!body.contains("task") || !body["task"].is_object()) return Invalid{"task", "an object: {path} or {source, name}"};
  const Json& t = body["task"];
  if (auto bad = only_keys(t, "task", kTaskKeys)) return bad;
  if (auto bad = one_of(t, "task", {"path", "source"})) return bad;
  if (t.contains("path")) {
    if (t.contains("name")) return Invalid{"task.name", "only with task.source (a path names its own file)"};
    if (!t["path"].is_string() || t["path"].get<std::string>().empty()) return Invalid{"task.path", "a non-empty string"};
    std::string spec = t["path"];
    // FILE or DATASET#ROW: the file part must exist here.
    std::string file = spec.substr(0, spec.rfind('#') == std::string::npos ? spec.size() : spec.rfind('#'));
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) return Invalid{"task.path", "no such file on the server: " + file};
    *out = {{"path", fs::absolute(file).string() + spec.substr(file.size())}};
    return std::nullopt;
  }
  if (auto bad = text_within(t["source"], "task.source", "the task's Python source", limits)) return bad;
  if (t.contains("name") && !t["name"].is_string()) return Invalid{"task.name", "a file name ending in .py"};
  std::string name = t.value("name", std::string("task.py"));
  if (!inside(name) || name.find('/') != std::string::npos || !ends_with(name, ".py")) {
    return Invalid{"task.name", "a file name ending in .py, without directories"};
  }
  *out = {{"source", t["source"]}, {"name", name}};
  return std::nullopt;
}

std::optional<Invalid> validate_candidate(const Json& body, const RequestLimits& limits, Json* out) {
  if (!body.contains("candidate") || !body["candidate"].is_object()) {
    return Invalid{"candidate", "an object: {path}, {source} (a KernelBench single file) or {files}"};
  }
  const Json& c = body["candidate"];
  if (auto bad = only_keys(c, "candidate", kCandidateKeys)) return bad;
  if (auto bad = one_of(c, "candidate", kCandidateForms)) return bad;
  if (c.contains("beside") && !c.contains("source")) {
    return Invalid{"candidate.beside", "only with candidate.source (the sources beside a single file)"};
  }
  if (c.contains("path")) {
    if (!c["path"].is_string() || c["path"].get<std::string>().empty()) {
      return Invalid{"candidate.path", "a non-empty string"};
    }
    std::error_code ec;
    if (!fs::exists(c["path"].get<std::string>(), ec)) {
      return Invalid{"candidate.path", "no such file or directory on the server: " + c["path"].get<std::string>()};
    }
    *out = {{"path", fs::absolute(c["path"].get<std::string>()).string()}};
    return std::nullopt;
  }
  if (c.contains("source")) {
    if (auto bad = text_within(c["source"], "candidate.source", "the single file's Python source", limits)) return bad;
    *out = {{"source", c["source"]}};
    if (c.contains("beside")) {  // what its load() calls may name, copied beside it as a file's neighbours are
      if (auto bad = validate_files(c["beside"], "candidate.beside", limits)) return bad;
      for (const auto& [name, _] : c["beside"].items()) {
        if (name == "model_new.py" || starts_with(name, "task/")) {
          return Invalid{"candidate.beside[\"" + name + "\"]", "a name of the single file's own (model_new.py, task/)"};
        }
      }
      (*out)["beside"] = c["beside"];
    }
    return std::nullopt;
  }
  const Json& files = c["files"];
  if (auto bad = validate_files(files, "candidate.files", limits)) return bad;
  if (!files.contains("model_new.py")) return Invalid{"candidate.files", "no model_new.py"};
  *out = {{"files", files}};
  return std::nullopt;
}

std::optional<Invalid> validate_files(const Json& files, const std::string& where, const RequestLimits& limits) {
  if (!files.is_object() || files.empty()) return Invalid{where, "an object of relative path -> text"};
  if (files.size() > limits.max_files) {
    return Invalid{where, "more than " + std::to_string(limits.max_files) + " files"};
  }
  for (const auto& [name, text] : files.items()) {
    std::string field = where + "[\"" + name + "\"]";
    if (!inside(name)) return Invalid{field, "a relative path inside the candidate's directory"};
    if (text.is_object()) {  // bytes that are not UTF-8 text
      if (auto bad = only_keys(text, field, {"base64"})) return bad;
      if (!text.contains("base64") || !text["base64"].is_string()) return Invalid{field + ".base64", "a string"};
      const std::string& b64 = text["base64"].get_ref<const std::string&>();
      if (b64.size() / 4 * 3 > limits.max_file_bytes + 2) {
        return Invalid{field, "larger than " + std::to_string(limits.max_file_bytes) + " bytes"};
      }
      if (!base64_decode(b64)) return Invalid{field + ".base64", "not base64 (RFC 4648, padded)"};
      continue;
    }
    if (auto bad = text_within(text, field, "the file's text, or {\"base64\": ...}", limits)) return bad;
  }
  return std::nullopt;
}

std::optional<Invalid> validate_options(const Json& body, Json* out) {
  *out = Json::object();
  if (!body.contains("options")) return std::nullopt;
  const Json& op = body["options"];
  if (!op.is_object()) return Invalid{"options", "an object"};
  if (auto bad = only_keys(op, "options", kOptionKeys)) return bad;
  for (const char* k : {"protocol", "preset", "compile_mode"}) {
    if (op.contains(k) && !op[k].is_string()) return Invalid{std::string("options.") + k, "a string"};
  }
  if (op.contains("protocol")) {
    try {
      protocol_named(op["protocol"]);
    } catch (const std::exception& e) {
      return Invalid{"options.protocol", e.what()};
    }
  }
  if (op.contains("preset")) {
    try {
      tolerance_preset(op["preset"]);
    } catch (const std::exception& e) {
      return Invalid{"options.preset", e.what()};
    }
  }
  if (op.contains("compile_mode") &&
      std::find(kCompileModes.begin(), kCompileModes.end(), op["compile_mode"].get<std::string>()) == kCompileModes.end()) {
    return Invalid{"options.compile_mode", "one of: " + join(kCompileModes, ", ")};
  }
  if (op.contains("trials") && (!op["trials"].is_number_integer() || op["trials"] < 1 || op["trials"] > 100)) {
    return Invalid{"options.trials", "an integer from 1 to 100"};
  }
  if (op.contains("seed") && (!op["seed"].is_number_unsigned() || op["seed"] > 0xffffffffu)) {
    return Invalid{"options.seed", "an integer from 0 to 2^32-1"};
  }
  if (op.contains("measure_time") && !op["measure_time"].is_boolean()) {
    return Invalid{"options.measure_time", "true or false"};
  }
  if (op.contains("config") && (!op["config"].is_number_integer() || op["config"] < 0 || op["config"] > kMaxConfig)) {
    return Invalid{"options.config", "an integer from 0 to 2^31-1 (ModelNew's launch configuration)"};
  }
  *out = op;
  return std::nullopt;
}

std::optional<Invalid> validate_evaluation(const Json& body, const RequestLimits& limits, Json* out) {
  if (!body.is_object()) return Invalid{"", "the body must be a JSON object"};
  if (auto bad = only_keys(body, "", {"task", "candidate", "options", "idempotency_key"})) return bad;
  Json task, candidate, options;
  if (auto bad = validate_task(body, limits, &task)) return bad;
  if (auto bad = validate_candidate(body, limits, &candidate)) return bad;
  if (auto bad = validate_options(body, &options)) return bad;
  *out = {{"task", task}, {"candidate", candidate}, {"options", options}};
  return std::nullopt;
}

std::optional<Invalid> idempotency_key_of(const Json& body, const std::string& header_key, std::string* key) {
  *key = header_key;
  if (body.is_object() && body.contains("idempotency_key")) {
    if (!body["idempotency_key"].is_string()) return Invalid{"idempotency_key", "a string"};
    std::string k = body["idempotency_key"];
    if (!key->empty() && k != *key) return Invalid{"idempotency_key", "differs from the Idempotency-Key header"};
    *key = k;
  }
  if (key->size() > 256) return Invalid{"idempotency_key", "longer than 256 bytes"};
  if (key->rfind(kOwnKeyPrefix, 0) == 0) {
    return Invalid{"idempotency_key", std::string("keys beginning with \"") + kOwnKeyPrefix + "\" are anvil's own"};
  }
  return std::nullopt;
}

}  // namespace anvil
