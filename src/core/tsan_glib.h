/* ThreadSanitizer builds only (CMake -DFC_TSAN=ON force-includes this header in every file).
 *
 * GLib is not built with ThreadSanitizer, and on Linux its GMutex and GCond are futexes inside
 * it: TSan would see no ordering at all between threads that take our sessions' locks, and
 * report every shared field as raced. The same goes for data handed to another thread through
 * GLib: a job pushed to a GThreadPool, a callback attached to a main context. So in these
 * builds the calls are wrapped to tell TSan what they do (__tsan_acquire / __tsan_release on
 * the lock, or on the data handed over); the program itself behaves exactly as in any build. */
#ifndef FC_CORE_TSAN_GLIB_H
#define FC_CORE_TSAN_GLIB_H
#define FC_TSAN_BUILD 1 /* src/core/tsan.h */

#include <glib.h>
#include <stdlib.h>

void __tsan_acquire(void *addr);
void __tsan_release(void *addr);

static inline void fc_tsan_mutex_lock(GMutex *m) {
  (g_mutex_lock)(m);
  __tsan_acquire(m);
}
static inline void fc_tsan_mutex_unlock(GMutex *m) {
  __tsan_release(m);
  (g_mutex_unlock)(m);
}
static inline gboolean fc_tsan_mutex_trylock(GMutex *m) {
  if (!(g_mutex_trylock)(m)) return FALSE;
  __tsan_acquire(m);
  return TRUE;
}
static inline void fc_tsan_cond_wait(GCond *c, GMutex *m) {
  __tsan_release(m);
  (g_cond_wait)(c, m);
  __tsan_acquire(m);
}
static inline gboolean fc_tsan_cond_wait_until(GCond *c, GMutex *m, gint64 end) {
  __tsan_release(m);
  gboolean r = (g_cond_wait_until)(c, m, end);
  __tsan_acquire(m);
  return r;
}
#define g_mutex_lock(m) fc_tsan_mutex_lock(m)
#define g_mutex_unlock(m) fc_tsan_mutex_unlock(m)
#define g_mutex_trylock(m) fc_tsan_mutex_trylock(m)
#define g_cond_wait(c, m) fc_tsan_cond_wait(c, m)
#define g_cond_wait_until(c, m, e) fc_tsan_cond_wait_until(c, m, e)

/* A job handed to a pool: released by the pusher, acquired before the pool's function; every
 * job's end is released on one address that freeing a pool (which waits for its jobs) then
 * acquires. */
static char fc_tsan_pools_done;
typedef struct fc_tsan_pool_fn {
  GFunc fn;
  gpointer user;
} fc_tsan_pool_fn;
static inline void fc_tsan_pool_run(gpointer data, gpointer user) {
  const fc_tsan_pool_fn *f = user;
  __tsan_acquire((void *)f); /* written once when the pool was made */
  __tsan_acquire(data);
  f->fn(data, f->user);
  __tsan_release(&fc_tsan_pools_done);
}
static inline GThreadPool *fc_tsan_pool_new(GFunc fn, gpointer user, gint max, gboolean excl,
                                            GError **e) {
  fc_tsan_pool_fn *f = malloc(sizeof *f); /* lives as long as the process: pools do too */
  f->fn = fn, f->user = user;
  __tsan_release(f);
  return (g_thread_pool_new)(fc_tsan_pool_run, f, max, excl, e);
}
static inline gboolean fc_tsan_pool_push(GThreadPool *p, gpointer data, GError **e) {
  __tsan_release(data);
  return (g_thread_pool_push)(p, data, e);
}
static inline void fc_tsan_pool_free(GThreadPool *p, gboolean immediate, gboolean wait) {
  (g_thread_pool_free)(p, immediate, wait);
  if (wait) __tsan_acquire(&fc_tsan_pools_done);
}
#define g_thread_pool_new(fn, user, max, excl, e) fc_tsan_pool_new(fn, user, max, excl, e)
#define g_thread_pool_free(p, immediate, wait) fc_tsan_pool_free(p, immediate, wait)
#define g_thread_pool_push(p, data, e) fc_tsan_pool_push(p, data, e)

/* A callback attached to a main context from another thread: what it is given, and the wrapper
 * that carries it (filled in on the attaching thread, read on the context's), are released at
 * the attach and acquired when it runs or is freed. */
typedef struct fc_tsan_source_fn {
  GSourceFunc fn;
  gpointer data;
  GDestroyNotify destroy;
} fc_tsan_source_fn;
static inline gboolean fc_tsan_source_run(gpointer user) {
  fc_tsan_source_fn *f = user;
  __tsan_acquire(f);
  __tsan_acquire(f->data);
  return f->fn(f->data);
}
static inline void fc_tsan_source_free(gpointer user) {
  fc_tsan_source_fn *f = user;
  __tsan_acquire(f);
  if (f->destroy) f->destroy(f->data);
  free(f);
}
static inline void fc_tsan_set_callback(GSource *src, GSourceFunc fn, gpointer data,
                                        GDestroyNotify destroy) {
  fc_tsan_source_fn *f = malloc(sizeof *f);
  f->fn = fn, f->data = data, f->destroy = destroy;
  __tsan_release(data);
  __tsan_release(f);
  (g_source_set_callback)(src, fc_tsan_source_run, f, fc_tsan_source_free);
}
#define g_source_set_callback(src, fn, data, destroy) fc_tsan_set_callback(src, fn, data, destroy)

#endif
