// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of TFRecord files and of each
// piece of a training checkpoint. On x86-64 with SSE4.2 the crc32 instruction; elsewhere a
// portable table-driven loop, eight bytes per step.
#pragma once

#include <cstdint>
#include <string_view>

namespace kelvin::io {

// The CRC-32C of `bytes`; Crc32c(b, Crc32c(a)) is the CRC-32C of a followed by b.
uint32_t Crc32c(std::string_view bytes, uint32_t crc_so_far = 0);

namespace internal {
// The portable loop, which Crc32c uses where the CPU has no crc32 instruction (tests check both).
uint32_t PortableCrc32c(std::string_view bytes, uint32_t crc_so_far = 0);
}  // namespace internal

}  // namespace kelvin::io
