#include "anvil/env/device.h"

#include "anvil/env/toolchain.h"

namespace anvil {

const char* to_string(Device d) { return d == Device::Cuda ? "cuda" : "cpu"; }
const char* to_string(const std::optional<Device>& d) { return d ? to_string(*d) : ""; }

std::optional<Device> device_named(const std::string& name) {
  for (Device d : {Device::Cuda, Device::Cpu}) {
    if (name == to_string(d)) return d;
  }
  return std::nullopt;
}

std::string unknown_device(const std::string& name) { return "unknown device '" + name + "' (use cuda or cpu)"; }

Device default_device(const Environment& env) { return env.gpus.empty() ? Device::Cpu : Device::Cuda; }

Device device_or_default(const std::optional<Device>& given, const Environment& env) {
  return given ? *given : default_device(env);
}

}  // namespace anvil
