/* Stand-in for Huawei's libboundscheck (thirdparty/securec, a git submodule absent from the mirror): the few
 * functions msSanitizer's detectors call, with their bounds checks. Not the real library. */
#ifndef SANITIZERD_DRIVER_SECUREC_H
#define SANITIZERD_DRIVER_SECUREC_H
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#ifndef EOK
#define EOK 0
#endif
typedef int errno_t;
static inline errno_t memset_s(void *dest, size_t destMax, int c, size_t count)
{
    if (dest == NULL || count > destMax) return 34; /* ERANGE */
    memset(dest, c, count);
    return EOK;
}
static inline errno_t memcpy_s(void *dest, size_t destMax, const void *src, size_t count)
{
    if (dest == NULL || src == NULL || count > destMax) return 34;
    memcpy(dest, src, count);
    return EOK;
}
static inline errno_t strcpy_s(char *dest, size_t destMax, const char *src)
{
    if (dest == NULL || src == NULL || strlen(src) + 1 > destMax) return 34;
    memcpy(dest, src, strlen(src) + 1);
    return EOK;
}
static inline int vsnprintf_s(char *dest, size_t destMax, size_t count, const char *format, va_list ap)
{
    size_t limit = count + 1 < destMax ? count + 1 : destMax;
    int n = vsnprintf(dest, limit, format, ap);
    return (n < 0 || (size_t)n >= limit) ? -1 : n;
}
static inline int sprintf_s(char *dest, size_t destMax, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf(dest, destMax, format, ap);
    va_end(ap);
    return (n < 0 || (size_t)n >= destMax) ? -1 : n;
}
static inline int snprintf_s(char *dest, size_t destMax, size_t count, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    int n = vsnprintf_s(dest, destMax, count, format, ap);
    va_end(ap);
    return n;
}
#endif
