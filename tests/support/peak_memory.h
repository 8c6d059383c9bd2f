// tests/support/peak_memory.h: this process's peak resident memory (VmHWM), reset before a step,
// so a test can say what the step cost: a hostile file read whole shows as its size.
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>

namespace anvil {

// Resets the peak to the current resident set (clear_refs 5, Linux 4.0 and later); false when the
// kernel does not allow it (the test then measures nothing).
inline bool reset_peak_memory() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

// VmHWM in bytes (0 when it cannot be read).
inline uint64_t peak_memory_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str(), "VmHWM: %llu kB", &kb) == 1) return kb << 10;
  }
  return 0;
}

}  // namespace anvil
