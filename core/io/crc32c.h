// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of TFRecord files and of each
// piece of a training checkpoint. Table-driven, eight bytes per step (about 1-2 GB/s per core,
// portable to x86 and Arm alike).
#pragma once

#include <cstdint>
#include <string_view>

namespace kelvin::io {

// The CRC-32C of `bytes`; Crc32c(b, Crc32c(a)) is the CRC-32C of a followed by b.
uint32_t Crc32c(std::string_view bytes, uint32_t crc_so_far = 0);

}  // namespace kelvin::io
