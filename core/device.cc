// The host's memory, the one device query that needs no CUDA (see device.h).
#include "core/device.h"

#include <unistd.h>

namespace kelvin {

int64_t HostMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page_size = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : 0;
}

}  // namespace kelvin
