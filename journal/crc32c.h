/* CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, init and xorout 0xFFFFFFFF), the
 * checksum of journal frames (journal/format.py), for the compiled parts of mqstore: SSE4.2
 * instructions when the CPU has them, else a slicing-by-8 table. Call crc_init() once at module
 * init. Equal to the crc32c package and to crcmod's "crc-32c" (tests check both). */
#ifndef MQSTORE_CRC32C_H
#define MQSTORE_CRC32C_H
#include <stdint.h>
#include <string.h>

static uint32_t crc_table[8][256];
static int have_hw = 0;  /* set by crc_init on x86-64 with SSE4.2 */

static void crc_init(void) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    have_hw = __builtin_cpu_supports("sse4.2");
#endif
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
        crc_table[0][i] = c;
    }
    for (int t = 1; t < 8; t++)
        for (int i = 0; i < 256; i++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xFF];
}

static uint32_t crc_soft(uint32_t prev, const uint8_t *p, size_t n) {
    uint32_t c = prev ^ 0xFFFFFFFFu;
    while (n >= 8) {
        uint32_t lo, hi;
        memcpy(&lo, p, 4);
        memcpy(&hi, p + 4, 4);
        lo ^= c;
        c = crc_table[7][lo & 0xFF] ^ crc_table[6][(lo >> 8) & 0xFF] ^
            crc_table[5][(lo >> 16) & 0xFF] ^ crc_table[4][lo >> 24] ^
            crc_table[3][hi & 0xFF] ^ crc_table[2][(hi >> 8) & 0xFF] ^
            crc_table[1][(hi >> 16) & 0xFF] ^ crc_table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = (c >> 8) ^ crc_table[0][(c ^ *p++) & 0xFF];
    return c ^ 0xFFFFFFFFu;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t prev, const uint8_t *p,
                                                         size_t n) {
    uint64_t c = prev ^ 0xFFFFFFFFu;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32 ^ 0xFFFFFFFFu;
}
/* crc32c_from(prev, p, n): the CRC of the bytes before p (``prev``) continued over p[0:n], as
 * the crc32c package's crc32c(data, value=prev); crc32c(p, n) starts from nothing. */
static uint32_t crc32c_from(uint32_t prev, const uint8_t *p, size_t n) {
    return have_hw ? crc_hw(prev, p, n) : crc_soft(prev, p, n);
}
#else
static uint32_t crc32c_from(uint32_t prev, const uint8_t *p, size_t n) {
    return crc_soft(prev, p, n);
}
#endif
static uint32_t crc32c(const uint8_t *p, size_t n) { return crc32c_from(0, p, n); }

#endif
