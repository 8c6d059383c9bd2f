// confine.h: what the environment's doors put in their jail (util/jail.h).
//
// Every process anvil starts for code it does not trust goes through run_jailed: the compilers
// and linker of the build service, the agent's shell, ncu. This file is the one home of what
// they share: the configuration (share/sandbox.json), the toolchain's read-only paths, the
// compilers' clean environment, and who owns what a jailed process must write.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "anvil/env/toolchain.h"
#include "anvil/util/jail.h"

namespace anvil {

// share/sandbox.json of this environment, read once per process; null with *err when it cannot be.
const JailConfig* sandbox_config(const Environment& env, std::string* err);

// The read-only paths beside the system directories: the Python prefixes (the venv and its base
// interpreter), the compilers (and, for one in a bin/ directory, its prefix's bin, lib, lib64, libexec
// and include), torch's include and library directories, CUDA, cuDNN and cuBLAS,
// anvil's include/ and the cache's runtime directory (libanvil_torch.so, the precompiled headers).
// Those that do not exist are skipped by the jail. The build adds share/ (anvil's fixed sources),
// ncu_profile adds python/ (anvil.ncu_target); the agent's shell sees no more of anvil's tree.
std::vector<std::filesystem::path> toolchain_paths(const Environment& env);

// A compiler's environment: PATH, the locale, CUDA_HOME/CUDA_PATH when set, HOME and TMPDIR in
// the private /tmp. Nothing else of anvil's (no NVCC_APPEND_FLAGS, CPATH, DEPENDENCIES_OUTPUT).
std::vector<std::string> tool_environment();

// Gives `path` (and, for a directory, everything under it) to the jail's user, so a jailed
// process can write there: a no-op unless anvil is root. Never follows a symlink.
void give_to_jail(const JailConfig& config, const std::filesystem::path& path);

// Gives an episode's workdir (and everything under it) to a user of its own (episode_uid): its
// shell runs as that user (episode_user), its processes counted apart from every other episode's.
// The jail's user instead when anvil is not root with CAP_SYS_ADMIN (a no-op then, as give_to_jail).
void give_to_episode(const JailConfig& config, const std::filesystem::path& workdir);

// Who an episode's shell runs as: its workdir's owner when that is one of the episode users, else
// nullopt (the jail's user).
std::optional<unsigned> episode_user(const JailConfig& config, const std::filesystem::path& workdir);

}  // namespace anvil
