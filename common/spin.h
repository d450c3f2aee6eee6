#pragma once

// Busy-wait helpers for waits that spin briefly before they block.

namespace baton {

// Tells the CPU that this is a spin loop (saves power, yields to a sibling hyperthread).
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace baton
