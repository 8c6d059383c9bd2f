// toolchain.h: the build environment: compilers, CUDA, Python, torch, GPUs.
//
// Probing torch means importing it (seconds), so the probe's result is cached
// under <cache>/env/, keyed by the identity (path, size, mtime) of the Python,
// nvcc and host-compiler binaries and the boot id, and re-checked against the
// mtime of torch's version.py. A cached build therefore starts in milliseconds.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace anvil {

namespace fs = std::filesystem;

struct Tool {
  fs::path path;        // empty: not found
  std::string version;  // the line of `--version` that names the version
  std::string identity; // hash of path and full `--version` output
  bool found() const { return !path.empty(); }
};

struct TorchInfo {
  bool present = false;
  std::string version;
  std::string cuda;  // torch.version.cuda, empty for a CPU-only torch
  std::vector<std::string> include_paths;
  fs::path library_dir;
  std::vector<std::string> libraries;
  bool cxx11_abi = true;
  std::vector<std::string> pybind11_flags;
  fs::path version_file;
};

struct LibraryDirs {
  fs::path include_dir;
  fs::path library_dir;
  std::string library;  // file name to link, e.g. libcudnn.so.9
  bool found() const { return !include_dir.empty(); }
};

struct Gpu {
  int index = 0;
  std::string name;
  std::string capability;  // "9.0"
  uint64_t memory_bytes = 0;  // 0: not known (a probe of an older anvil)
};

struct Environment {
  fs::path home;   // anvil's data: include/anvil, share/
  fs::path cache;  // the build cache
  Tool nvcc;
  Tool cxx;
  fs::path cuda_home;
  fs::path python;
  std::string python_version;
  fs::path python_include;
  TorchInfo torch;
  LibraryDirs cudnn;
  LibraryDirs cublas;
  std::vector<Gpu> gpus;
  std::string driver;
  std::string probe_error;  // why torch/Python could not be probed, if so
  // The anvil program the runner calls back (load_inline's `anvil build-sources`); empty: this
  // process's own executable (tests, which are another executable, name the real one).
  fs::path anvil_program;
  // Hash over everything above that shapes a build, plus anvil's own shipped
  // headers and fixed sources.
  std::string fingerprint;

  fs::path cuda_include() const { return cuda_home / "include"; }
  fs::path cuda_lib() const;
  fs::path anvil_include() const { return home / "include"; }
  fs::path share() const { return home / "share"; }
  // PYTHONPATH for a Python child of anvil's: anvil's package first, then the caller's PYTHONPATH.
  std::string python_path() const;
  nlohmann::json to_json() const;
};

struct EnvOptions {
  bool refresh = false;  // ignore the cached probe
};

// The anvil data directory: $ANVIL_HOME, else the first ancestor of the
// executable's directory holding include/anvil/binding.h.
fs::path find_anvil_home();
// The Python interpreter anvil runs: $ANVIL_PYTHON, else HOME/.venv/bin/python (the README's
// set-up makes it beside anvil's sources), else python3 on PATH.
fs::path find_python(const fs::path& home);
// $ANVIL_CACHE, else $XDG_CACHE_HOME/anvil, else ~/.cache/anvil.
fs::path default_cache_dir();

// Loads (probing if needed) the environment. Throws std::runtime_error with a
// message fit for a user when anvil's own files cannot be found.
Environment load_environment(const EnvOptions& opts = {});

// "sm_90a" for compute capability 9.0, "sm_100a" for 10.0, "sm_86" for 8.6.
std::string arch_for_capability(const std::string& capability);
// The CUDA release of an `nvcc --version` line ("... release 13.0, V13.0.88"),
// as major*10+minor (130); 0 if it cannot be read.
int cuda_release(const std::string& nvcc_version);
// An error if nvcc cannot build for `arch` (sm_90a needs CUDA 12.0 or newer),
// with what to install; empty if it can.
std::string check_nvcc_for_arch(const std::string& nvcc_version, const std::string& arch);

// nvcc flags for an architecture list such as "sm_90a" or "sm_80,sm_90a".
// Returns false for a malformed name.
bool gencode_flags(const std::string& arch, std::vector<std::string>* flags, std::string* err);

}  // namespace anvil
