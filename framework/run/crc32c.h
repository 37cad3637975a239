// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord framing checks it (framework/run/tensorboard.h).
#pragma once
#include <cstddef>
#include <cstdint>

namespace rt {

// The CRC-32C of `n` bytes; `crc` continues an earlier value (0 to start). crc32c("123456789") == 0xE3069283.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
// TFRecord's masked form of a CRC: rotated right by 15 bits plus 0xa282ead8 (a CRC of data holding CRCs is weak).
uint32_t mask_crc32c(uint32_t crc);

}  // namespace rt
