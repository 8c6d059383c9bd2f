// device.h: where a candidate is built and judged, and a task run: a GPU (cuda) or the host's CPU
// (cpu). The name is its spelling in results, runner requests, cache keys and the command line;
// inside anvil it is this type.
#pragma once

#include <optional>
#include <string>

namespace anvil {

struct Environment;

enum class Device { Cuda, Cpu };

const char* to_string(Device d);  // "cuda", "cpu"
const char* to_string(const std::optional<Device>& d);  // "" when unset
// The device of that name, or nullopt.
std::optional<Device> device_named(const std::string& name);
// "unknown device 'tpu' (use cuda or cpu)": what a command says of a name device_named refuses.
std::string unknown_device(const std::string& name);
// The device a command uses when the user names none: cuda where a GPU is found, else cpu.
Device default_device(const Environment& env);
// `given`, else default_device(env).
Device device_or_default(const std::optional<Device>& given, const Environment& env);

}  // namespace anvil
