#include "anvil/env/toolchain.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <regex>
#include <stdexcept>

#include "anvil/env/cache_layout.h"
#include "anvil/util/fs.h"
#include "anvil/util/hash.h"
#include "anvil/util/json_text.h"
#include "anvil/util/strings.h"
#include "anvil/util/subprocess.h"

namespace anvil {

namespace {

constexpr const char* kEnvFormat = "anvil-env-v1";

std::string getenv_str(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

// "path|size|mtime" of a file, or "" if it does not exist.
std::string stat_identity(const fs::path& p) {
  struct stat st;
  if (p.empty() || ::stat(p.c_str(), &st) != 0) return "";
  return p.string() + "|" + std::to_string(st.st_size) + "|" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

fs::path find_nvcc() {
  if (auto v = getenv_str("ANVIL_NVCC"); !v.empty()) return find_program(v);
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (auto h = getenv_str(var); !h.empty()) {
      fs::path p = fs::path(h) / "bin" / "nvcc";
      if (::access(p.c_str(), X_OK) == 0) return p;
    }
  }
  if (auto p = find_program("nvcc"); !p.empty()) return p;
  fs::path p = "/usr/local/cuda/bin/nvcc";
  if (::access(p.c_str(), X_OK) == 0) return p;
  return {};
}

fs::path find_cxx() {
  for (const char* var : {"ANVIL_CXX", "CXX"}) {
    if (auto v = getenv_str(var); !v.empty()) return find_program(v);
  }
  return find_program("g++");
}

Tool probe_tool(const fs::path& path, const std::regex& version_line) {
  Tool t;
  if (path.empty()) return t;
  SubprocessOptions o;
  o.timeout = std::chrono::seconds(30);
  SubprocessResult r = run_subprocess({path.string(), "--version"}, o);
  if (!r.ok()) return t;
  t.path = path;
  for (const auto& line : split_lines(r.output)) {
    if (std::regex_search(line, version_line)) {
      t.version = trim(line);
      break;
    }
  }
  if (t.version.empty()) t.version = trim(split_lines(r.output).empty() ? "" : split_lines(r.output)[0]);
  Hasher h;
  h.add("path", path.string()).add("version", r.output);
  t.identity = h.hex();
  return t;
}

std::string boot_id() {
  auto s = read_file("/proc/sys/kernel/random/boot_id");
  return s ? trim(*s) : "";
}

// Hash of anvil's shipped headers and fixed sources: they are inputs of every
// build, so editing them must invalidate the cache.
std::string anvil_files_hash(const fs::path& home) {
  Hasher h;
  for (const fs::path& dir : {home / "include" / "anvil", home / "share"}) {
    for (const fs::path& rel : list_files(dir)) {
      // How the tools are confined and how a candidate is judged do not shape what they build: the
      // cache keys stay as they were.
      if (dir.filename() == "share" && (rel == "sandbox.json" || rel == "protocol.json")) continue;
      auto content = read_file(dir / rel);
      h.add("file", (dir.filename() / rel).string()).add("content", content ? *content : "");
    }
  }
  return h.hex();
}

nlohmann::json json_or_null(const std::string& s) {
  if (s.empty()) return nullptr;
  return s;
}

std::string str_at(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

void fill_from_probe(Environment& env, const nlohmann::json& p) {
  const auto& py = p.value("python", nlohmann::json::object());
  env.python_version = str_at(py, "version");
  env.python_include = str_at(py, "include_dir");
  const auto& t = p.value("torch", nlohmann::json());
  if (t.is_object()) {
    env.torch.present = true;
    env.torch.version = str_at(t, "version");
    env.torch.cuda = str_at(t, "cuda");
    for (const auto& x : t.value("include_paths", nlohmann::json::array())) env.torch.include_paths.push_back(x);
    env.torch.library_dir = str_at(t, "library_dir");
    for (const auto& x : t.value("libraries", nlohmann::json::array())) env.torch.libraries.push_back(x);
    env.torch.cxx11_abi = t.value("cxx11_abi", true);
    for (const auto& x : t.value("pybind11_flags", nlohmann::json::array())) env.torch.pybind11_flags.push_back(x);
    env.torch.version_file = str_at(t, "version_file");
  }
  auto libdirs = [&](const char* key, LibraryDirs& out) {
    const auto& c = p.value(key, nlohmann::json());
    if (!c.is_object()) return;
    out.include_dir = str_at(c, "include_dir");
    out.library_dir = str_at(c, "library_dir");
    out.library = str_at(c, "library");
  };
  libdirs("cudnn", env.cudnn);
  libdirs("cublas", env.cublas);
  for (const auto& g : p.value("gpus", nlohmann::json::array())) {
    Gpu gpu;
    gpu.index = g.value("index", 0);
    gpu.name = str_at(g, "name");
    gpu.capability = str_at(g, "capability");
    if (g.contains("memory_bytes") && g["memory_bytes"].is_number_unsigned()) gpu.memory_bytes = g["memory_bytes"];
    env.gpus.push_back(gpu);
  }
  env.driver = str_at(p, "driver");
}

}  // namespace

std::string Environment::python_path() const {
  const char* pp = std::getenv("PYTHONPATH");
  return (home / "python").string() + (pp && *pp ? ":" + std::string(pp) : "");
}

fs::path Environment::cuda_lib() const {
  for (const char* sub : {"lib64", "targets/x86_64-linux/lib", "lib"}) {
    fs::path p = cuda_home / sub;
    std::error_code ec;
    if (fs::exists(p / "libcudart.so", ec)) return p;
  }
  return cuda_home / "lib64";
}

nlohmann::json Environment::to_json() const {
  nlohmann::json gpus_j = nlohmann::json::array();
  for (const auto& g : gpus) gpus_j.push_back({{"index", g.index}, {"name", g.name}, {"capability", g.capability}, {"memory_bytes", g.memory_bytes}});
  return {
      {"home", home.string()},
      {"cache", cache.string()},
      {"nvcc", {{"path", json_or_null(nvcc.path.string())}, {"version", json_or_null(nvcc.version)}}},
      {"cxx", {{"path", json_or_null(cxx.path.string())}, {"version", json_or_null(cxx.version)}}},
      {"cuda_home", json_or_null(cuda_home.string())},
      {"python", {{"path", json_or_null(python.string())}, {"version", json_or_null(python_version)}}},
      {"torch",
       torch.present ? nlohmann::json{{"version", torch.version}, {"cuda", json_or_null(torch.cuda)}}
                     : nlohmann::json(nullptr)},
      {"cudnn", cudnn.found() ? nlohmann::json(cudnn.include_dir.string()) : nlohmann::json(nullptr)},
      {"gpus", gpus_j},
      {"driver", json_or_null(driver)},
      {"probe_error", json_or_null(probe_error)},
      {"fingerprint", fingerprint},
  };
}

// ANVIL_PYTHON; else the .venv that the README's set-up (scripts/lib.sh) makes beside anvil's
// sources, when there is one; else python3 on PATH.
fs::path find_python(const fs::path& home) {
  if (auto v = getenv_str("ANVIL_PYTHON"); !v.empty()) return find_program(v);
  fs::path venv = home / ".venv" / "bin" / "python";
  if (!home.empty() && ::access(venv.c_str(), X_OK) == 0) return venv;
  return find_program("python3");
}

fs::path find_anvil_home() {
  auto valid = [](const fs::path& p) {
    std::error_code ec;
    return fs::exists(p / "include" / "anvil" / "binding.h", ec) && fs::exists(p / "share" / "runtime", ec);
  };
  if (auto h = getenv_str("ANVIL_HOME"); !h.empty()) {
    if (!valid(h)) throw std::runtime_error("ANVIL_HOME=" + h + " does not hold include/anvil/binding.h and share/");
    return fs::absolute(h);
  }
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (fs::path p = exe.parent_path(); !ec && !p.empty(); p = p.parent_path()) {
    if (valid(p)) return p;
    if (valid(p / "share" / "anvil")) return p / "share" / "anvil";
    if (p == p.root_path()) break;
  }
  throw std::runtime_error("cannot find anvil's data files (include/anvil/binding.h) above " + exe.string() +
                           "; set ANVIL_HOME to the anvil source or install directory");
}

fs::path default_cache_dir() {
  if (auto c = getenv_str("ANVIL_CACHE"); !c.empty()) return fs::absolute(c);
  if (auto x = getenv_str("XDG_CACHE_HOME"); !x.empty()) return fs::path(x) / "anvil";
  if (auto h = getenv_str("HOME"); !h.empty()) return fs::path(h) / ".cache" / "anvil";
  return fs::temp_directory_path() / "anvil-cache";
}

Environment load_environment(const EnvOptions& opts) {
  Environment env;
  env.home = find_anvil_home();
  env.cache = default_cache_dir();
  fs::path nvcc = find_nvcc();
  fs::path cxx = find_cxx();
  env.python = find_python(env.home);

  Hasher key;
  key.add("format", kEnvFormat)
      .add("python", stat_identity(env.python))
      .add("nvcc", stat_identity(nvcc))
      .add("cxx", stat_identity(cxx))
      .add("boot", boot_id())
      .add("visible", getenv_str("CUDA_VISIBLE_DEVICES"));
  fs::path cached = cache_dir(env, CacheArea::kEnv) / (key.hex() + ".json");

  nlohmann::json record;
  if (!opts.refresh) {
    if (auto text = read_file(cached)) {
      try {
        record = nlohmann::json::parse(*text);
        if (record.value("torch_version_stat", std::string()) !=
            stat_identity(record.value("torch_version_file", std::string()))) {
          record = nlohmann::json();  // torch was reinstalled
        }
      } catch (const std::exception&) {
        record = nlohmann::json();
      }
    }
  }
  if (record.is_null()) {
    Tool nv = probe_tool(nvcc, std::regex("release [0-9]"));
    Tool cx = probe_tool(cxx, std::regex("[0-9]+\\.[0-9]+"));
    record = {{"nvcc", {{"path", nv.path.string()}, {"version", nv.version}, {"identity", nv.identity}}},
              {"cxx", {{"path", cx.path.string()}, {"version", cx.version}, {"identity", cx.identity}}},
              {"probe", nullptr},
              {"probe_error", ""}};
    if (env.python.empty()) {
      record["probe_error"] = "python3 not found (set ANVIL_PYTHON to the interpreter that has torch)";
    } else {
      SubprocessOptions o;
      o.timeout = std::chrono::seconds(180);
      o.merge_stderr = false;
      o.env["PYTHONPATH"] = (env.home / "python").string() +
                            (getenv_str("PYTHONPATH").empty() ? "" : ":" + getenv_str("PYTHONPATH"));
      SubprocessResult r = run_subprocess({env.python.string(), "-m", "anvil.probe_env"}, o);
      try {
        if (!r.ok()) throw std::runtime_error(r.describe() + ": " + tail_lines(r.err_output, 5));
        record["probe"] = nlohmann::json::parse(r.output);
      } catch (const std::exception& e) {
        record["probe_error"] = std::string("probing ") + env.python.string() + " failed: " + e.what();
      }
    }
    const auto& t = record["probe"].is_object() ? record["probe"].value("torch", nlohmann::json()) : nlohmann::json();
    std::string vf = t.is_object() ? str_at(t, "version_file") : "";
    record["torch_version_file"] = vf;
    record["torch_version_stat"] = stat_identity(vf);
    std::string err;
    write_file_atomic(cached, json_text(record, 2), &err);  // a failed write only costs a re-probe
  }

  auto tool_from = [](const nlohmann::json& j) {
    Tool t;
    t.path = str_at(j, "path");
    t.version = str_at(j, "version");
    t.identity = str_at(j, "identity");
    if (t.identity.empty()) t.path.clear();
    return t;
  };
  env.nvcc = tool_from(record["nvcc"]);
  env.cxx = tool_from(record["cxx"]);
  if (env.nvcc.found()) env.cuda_home = env.nvcc.path.parent_path().parent_path();
  env.probe_error = record.value("probe_error", std::string());
  if (record["probe"].is_object()) fill_from_probe(env, record["probe"]);
  if (env.probe_error.empty() && !env.torch.present) {
    env.probe_error = "torch is not installed for " + env.python.string() +
                      " (pip install torch, or set ANVIL_PYTHON to an interpreter that has it)";
  }

  Hasher fp;
  fp.add("format", kEnvFormat)
      .add("nvcc", env.nvcc.identity)
      .add("cxx", env.cxx.identity)
      .add("python", env.python.string() + "|" + env.python_version)
      .add("torch", env.torch.version + "|" + env.torch.cuda + "|" + env.torch.library_dir.string())
      .add("cudnn", env.cudnn.include_dir.string() + "|" + env.cudnn.library)
      .add("anvil", anvil_files_hash(env.home));
  env.fingerprint = fp.hex();
  return env;
}

std::string arch_for_capability(const std::string& capability) {
  auto parts = split(capability, '.');
  if (parts.size() != 2) return "";
  int major = std::atoi(parts[0].c_str());
  std::string base = "sm_" + parts[0] + parts[1];
  // Architecture-specific features (wgmma, setmaxnreg, tcgen05) need the "a" target.
  if (major == 9 || major == 10 || major == 12) return base + "a";
  return base;
}

int cuda_release(const std::string& nvcc_version) {
  static const std::regex kRelease("release ([0-9]+)\\.([0-9]+)");
  std::smatch m;
  if (!std::regex_search(nvcc_version, m, kRelease)) return 0;
  return std::stoi(m[1].str()) * 10 + std::stoi(m[2].str());
}

std::string check_nvcc_for_arch(const std::string& nvcc_version, const std::string& arch) {
  int release = cuda_release(nvcc_version);
  if (release == 0) return "";  // unknown: let nvcc itself decide
  static const std::regex kArch("sm_([0-9]+)");
  int needed = 0;  // the first release that knows the architecture
  for (const auto& one : split(arch, ',')) {
    std::smatch m;
    std::string a = trim(one);
    if (!std::regex_search(a, m, kArch)) continue;
    int sm = std::stoi(m[1].str());
    int n = sm >= 120 ? 128 : sm >= 100 ? 128 : sm >= 90 ? (ends_with(a, "a") ? 120 : 118) : sm >= 89 ? 118 : 110;
    needed = std::max(needed, n);
  }
  if (release >= needed) return "";
  auto ver = [](int r) { return std::to_string(r / 10) + "." + std::to_string(r % 10); };
  return "nvcc is CUDA " + ver(release) + ", too old for " + arch + " (needs CUDA " + ver(needed) +
         " or newer): install a newer CUDA toolkit and put its nvcc first on PATH, or set CUDA_HOME";
}

bool gencode_flags(const std::string& arch, std::vector<std::string>* flags, std::string* err) {
  static const std::regex kArch("sm_([0-9]{2,3})([af]?)");
  for (const auto& one : split(arch, ',')) {
    std::smatch m;
    std::string a = trim(one);
    if (!std::regex_match(a, m, kArch)) {
      *err = "bad architecture '" + a + "': expected a name like sm_90a, sm_90 or sm_80";
      return false;
    }
    flags->push_back("-gencode=arch=compute_" + m[1].str() + m[2].str() + ",code=sm_" + m[1].str() + m[2].str());
  }
  return true;
}

}  // namespace anvil
