/* Hand-offs ThreadSanitizer cannot see, made visible to it in the FC_TSAN build (where
 * src/core/tsan_glib.h, force-included, defines FC_TSAN_BUILD) and nothing in any other.
 *
 * For data passed between our threads through a library that is not built with it (a
 * GStreamer queue, a buffer pool): the sender releases an address that stands for the data
 * once it is written, the receiver acquires the same address before reading, and the same in
 * the other direction when the data goes back for reuse. */
#ifndef FC_CORE_TSAN_H
#define FC_CORE_TSAN_H

#ifdef FC_TSAN_BUILD
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define FC_TSAN_RELEASE(p) __tsan_release((void *)(p))
#define FC_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#else
#define FC_TSAN_RELEASE(p) ((void)(p))
#define FC_TSAN_ACQUIRE(p) ((void)(p))
#endif

#endif
