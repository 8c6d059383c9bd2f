// sandbox.cpp: the bash tool's jail: the workdir, its protected files, the toolchain.
#include "anvil/agent/sandbox.h"

#include <algorithm>
#include <cstdlib>

#include "anvil/util/fs.h"

namespace anvil {

namespace {

// A small clean environment: nothing of anvil's own (API keys, tokens) leaks in; what makes nvcc
// and python behave as they do for the harness is kept.
std::vector<std::string> clean_env(const SandboxOptions& o) {
  std::vector<std::string> env = {
      "PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "HOME=" + o.workdir.string(), "LANG=C.UTF-8", "TERM=dumb", "TMPDIR=/tmp",
      // stdout and stderr are merged: keep Python's in the order written
      "PYTHONUNBUFFERED=1"};
  if (const char* p = std::getenv("PATH"); p && *p) env[0] = std::string("PATH=") + p;
  for (const char* k : {"CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NVIDIA_VISIBLE_DEVICES",
                        "NVIDIA_DRIVER_CAPABILITIES", "CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH",
                        "TORCH_CUDA_ARCH_LIST", "ANVIL_PYTHON", "PYTHONPATH", "VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (const char* v = std::getenv(k); v && *v) env.push_back(std::string(k) + "=" + v);
  }
  for (const auto& e : o.env) {  // opts.env replaces a variable of the same name
    std::string name = e.substr(0, e.find('='));
    std::erase_if(env, [&](const std::string& x) { return x.compare(0, name.size() + 1, name + "=") == 0; });
    env.push_back(e);
  }
  return env;
}

// The protected files that exist, as read-only binds. A symlink is not followed: its target is
// either outside (not in view) or another file of the workdir, which is not protected.
std::vector<JailBind> protected_binds(const fs::path& workdir, const std::vector<std::string>& names) {
  std::vector<JailBind> out;
  std::error_code ec;
  for (const auto& f : names) {
    fs::path path = (workdir / f).lexically_normal();
    auto st = fs::symlink_status(path, ec);
    if (ec || !fs::exists(st) || fs::is_symlink(st)) continue;
    fs::path rel = path.lexically_relative(workdir);
    if (rel.empty() || *rel.begin() == "..") continue;
    out.push_back({path, false});
  }
  return out;
}

}  // namespace

SandboxResult run_sandboxed(const std::string& command, const SandboxOptions& opts) {
  std::error_code ec;
  fs::path workdir = fs::canonical(fs::absolute(opts.workdir, ec), ec);
  if (ec || !fs::is_directory(workdir, ec)) {
    SandboxResult res;
    res.error = "sandbox: the workdir " + opts.workdir.string() + " is not a directory";
    return res;
  }
  SandboxOptions o = opts;
  o.workdir = workdir;
  JailOptions j;
  j.config = opts.config;
  j.cwd = workdir;
  j.binds = {{workdir, true}};
  for (auto& b : protected_binds(workdir, opts.read_only)) j.binds.push_back(b);
  j.toolchain = opts.toolchain;
  j.hide = opts.hide;
  j.gpu = opts.gpu;
  j.network = opts.network;
  j.env = clean_env(o);
  j.timeout = opts.timeout;
  j.max_output = opts.max_output;
  j.uid = opts.uid;
  j.cancel = opts.cancel;
  j.limits.data = opts.config ? opts.config->shell_data_bytes : 0;
  j.limits.file_size = opts.config ? opts.config->shell_file_bytes : 0;
  return run_jailed({"/bin/bash", "-c", command}, j);
}

}  // namespace anvil
