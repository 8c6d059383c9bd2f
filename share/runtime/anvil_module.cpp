// anvil_module.cpp: the fixed part of every fast-mode module. It is compiled
// once per environment and linked into each candidate's cuda_extension.so; its
// PyInit hands the module's registry to anvil's torch runtime, which makes the
// Python module. No torch and no Python headers are needed here.
#include <anvil/binding.h>

#ifndef ANVIL_MODULE_NAME
#define ANVIL_MODULE_NAME cuda_extension
#endif
#define ANVIL_STR_INNER(x) #x
#define ANVIL_STR(x) ANVIL_STR_INNER(x)
#define ANVIL_PYINIT_INNER(name) PyInit_##name
#define ANVIL_PYINIT(name) ANVIL_PYINIT_INNER(name)

struct _object;  // PyObject

extern "C" _object* anvil_rt_create_module(const char* name, const anvil_op* ops, int32_t count,
                                           int32_t abi_version);

extern "C" __attribute__((visibility("default"))) _object* ANVIL_PYINIT(ANVIL_MODULE_NAME)(void) {
  std::vector<anvil_op>& ops = anvil::detail::registry();
  const std::vector<std::string>& sigs = anvil::detail::signatures();
  for (size_t i = 0; i < ops.size() && i < sigs.size(); ++i) ops[i].signature = sigs[i].c_str();
  return anvil_rt_create_module(ANVIL_STR(ANVIL_MODULE_NAME), ops.data(), static_cast<int32_t>(ops.size()),
                                ANVIL_ABI_VERSION);
}
