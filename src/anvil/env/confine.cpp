// confine.cpp: the environment's side of the jail.
#include "anvil/env/confine.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "anvil/env/build.h"
#include "anvil/util/fs.h"

namespace anvil {

const JailConfig* sandbox_config(const Environment& env, std::string* err) {
  static std::mutex mu;
  static std::map<std::string, std::pair<JailConfig, std::string>> loaded;  // path -> (config, error)
  std::string path = (env.share() / "sandbox.json").string();
  std::lock_guard<std::mutex> g(mu);
  auto it = loaded.find(path);
  if (it == loaded.end()) {
    JailConfig c;
    std::string e;
    load_jail_config(path, &c, &e);
    it = loaded.emplace(path, std::make_pair(c, e)).first;
  }
  if (!it->second.second.empty()) {
    *err = it->second.second;
    return nullptr;
  }
  return &it->second.first;
}

std::vector<fs::path> toolchain_paths(const Environment& env) {
  std::vector<fs::path> out;
  std::error_code ec;
  if (!env.python.empty()) {
    fs::path venv = env.python.parent_path().parent_path();
    if (fs::exists(venv / "pyvenv.cfg", ec)) out.push_back(venv);
    out.push_back(fs::canonical(env.python, ec).parent_path().parent_path());  // the interpreter's prefix
  }
  if (!env.python_include.empty()) out.push_back(env.python_include);
  // The compilers themselves, wherever they are, and the installation each lives in: a compiler
  // under a prefix of its own (/opt/gcc/bin/g++, a wrapper that runs g++-real beside it and reads
  // its lib/) needs that prefix's programs and libraries. Only a bin/ directory is taken whole: a
  // compiler named elsewhere (~/g++) brings no more than itself.
  for (const Tool* t : {&env.cxx, &env.nvcc}) {
    if (!t->found()) continue;
    out.push_back(t->path);
    for (const fs::path& program : {t->path, fs::canonical(t->path, ec)}) {
      fs::path bin = program.parent_path();
      if (program.empty() || bin.filename() != "bin") continue;
      out.push_back(bin);
      for (const char* part : {"lib", "lib64", "libexec", "include"}) out.push_back(bin.parent_path() / part);
    }
  }
  for (const auto& inc : env.torch.include_paths) out.push_back(inc);
  if (!env.torch.library_dir.empty()) out.push_back(env.torch.library_dir.parent_path());
  if (!env.cuda_home.empty()) out.push_back(env.cuda_home);
  for (const LibraryDirs* l : {&env.cudnn, &env.cublas}) {
    if (!l->include_dir.empty()) out.push_back(l->include_dir);
    if (!l->library_dir.empty()) out.push_back(l->library_dir);
  }
  out.push_back(env.anvil_include());  // <anvil/binding.h>; the rest of anvil's tree stays out of view
  out.push_back(runtime_dir(env));
  return out;
}

std::vector<std::string> tool_environment() {
  std::vector<std::string> env = {"PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                  "HOME=/tmp", "TMPDIR=/tmp"};
  if (const char* p = std::getenv("PATH"); p && *p) env[0] = std::string("PATH=") + p;
  for (const char* k : {"LANG", "LC_ALL", "LC_MESSAGES", "LC_CTYPE", "CUDA_HOME", "CUDA_PATH"}) {
    if (const char* v = std::getenv(k); v && *v) env.push_back(std::string(k) + "=" + v);
  }
  return env;
}

void give_to_episode(const JailConfig& config, const fs::path& workdir) {
  if (geteuid() != 0) return;
  if (jail_uid(config) != config.uid) return give_to_jail(config, workdir);  // no user of its own to drop to
  unsigned u = episode_uid(config);
  set_owner(workdir, u, u);
}

std::optional<unsigned> episode_user(const JailConfig& config, const fs::path& workdir) {
  struct stat st;
  if (geteuid() != 0 || ::stat(workdir.c_str(), &st) != 0) return std::nullopt;
  if (st.st_uid < config.episode_uid_base || st.st_uid - config.episode_uid_base >= config.episode_uid_span) {
    return std::nullopt;
  }
  return static_cast<unsigned>(st.st_uid);
}

void give_to_jail(const JailConfig& config, const fs::path& path) {
  if (geteuid() != 0) return;
  set_owner(path, jail_uid(config), jail_gid(config));
}

}  // namespace anvil
