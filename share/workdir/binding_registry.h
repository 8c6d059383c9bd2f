// binding_registry.h: fixed by the harness; do not edit (anvil builds with its own copy).
//
// CUDA-Agent-compatible registry. Each kernels/*_binding.cpp defines a function
// `void register_foo(pybind11::module& m)` that adds its functions with m.def(...)
// and registers it with REGISTER_BINDING(foo, register_foo); binding.cpp applies
// every registration when the module `cuda_extension` is imported.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

class BindingRegistry {
 public:
  using BindingFunction = std::function<void(pybind11::module&)>;

  static BindingRegistry& getInstance() {
    static BindingRegistry registry;
    return registry;
  }
  void registerBinding(const std::string& name, BindingFunction fn) {
    bindings_.emplace_back(name, std::move(fn));
  }
  void applyBindings(pybind11::module& m) {
    for (auto& entry : bindings_) entry.second(m);
  }

 private:
  BindingRegistry() = default;
  std::vector<std::pair<std::string, BindingFunction>> bindings_;
};

class BindingRegistrar {
 public:
  BindingRegistrar(const std::string& name, BindingRegistry::BindingFunction fn) {
    BindingRegistry::getInstance().registerBinding(name, std::move(fn));
  }
};

#define REGISTER_BINDING(name, func) \
  static BindingRegistrar anvil_binding_registrar_##name(#name, [](pybind11::module& m) { func(m); })
