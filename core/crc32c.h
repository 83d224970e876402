/* crc32c.h - CRC32C (Castagnoli), the checksum of every metadata block. */
#ifndef SHOAL_CRC32C_H
#define SHOAL_CRC32C_H
#include <stddef.h>
#include <stdint.h>

/* Continue a CRC32C: start with crc = 0. */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);

#endif
