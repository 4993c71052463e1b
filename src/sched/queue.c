/* A device's request storage: a fixed pool of slots and two deadline heaps.
 *
 * All memory is taken when the device is created, so submitting and completing a request only
 * moves pointers: a slot comes off the free list (an index chain through the slots), sits in
 * the heap of its class while queued, is out of both while its batch runs, and goes back on the
 * free list after its done callback. Heaps are binary min-heaps on (deadline, submission order)
 * holding at most the pool's size. The caller (the device) holds the device lock.
 */
#include "facecast/error.h"
#include "sched/internal.h"

#include <stdlib.h>

int pool_init(sched_pool *p, int cap) {
  p->slot = calloc((size_t)cap, sizeof *p->slot);
  if (!p->slot) return fc_error_set(FC_ENOMEM, "sched: out of memory");
  p->cap = cap;
  p->used = 0;
  for (int i = 0; i < cap; i++) p->slot[i].next_free = i + 1 < cap ? i + 1 : -1;
  p->free_head = 0;
  return FC_OK;
}

void pool_free(sched_pool *p) {
  free(p->slot);
  p->slot = NULL;
}

sched_item *pool_get(sched_pool *p) {
  if (p->free_head < 0) return NULL;
  sched_item *it = &p->slot[p->free_head];
  p->free_head = it->next_free;
  p->used++;
  return it;
}

void pool_put(sched_pool *p, sched_item *it) {
  it->next_free = p->free_head;
  p->free_head = (int)(it - p->slot);
  p->used--;
}

int heap_init(sched_heap *h, int cap) {
  h->n = 0;
  h->a = calloc((size_t)cap, sizeof *h->a);
  return h->a ? FC_OK : fc_error_set(FC_ENOMEM, "sched: out of memory");
}

void heap_free(sched_heap *h) {
  free(h->a);
  h->a = NULL;
}

static int before(const sched_item *x, const sched_item *y) {
  if (x->req.deadline_ns != y->req.deadline_ns) return x->req.deadline_ns < y->req.deadline_ns;
  return x->seq < y->seq;
}

static void sift_up(sched_heap *h, int i) {
  sched_item *it = h->a[i];
  while (i > 0 && before(it, h->a[(i - 1) / 2])) {
    h->a[i] = h->a[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  h->a[i] = it;
}

static void sift_down(sched_heap *h, int i) {
  sched_item *it = h->a[i];
  for (;;) {
    int k = 2 * i + 1;
    if (k >= h->n) break;
    if (k + 1 < h->n && before(h->a[k + 1], h->a[k])) k++;
    if (!before(h->a[k], it)) break;
    h->a[i] = h->a[k];
    i = k;
  }
  h->a[i] = it;
}

void heap_push(sched_heap *h, sched_item *it) {
  h->a[h->n++] = it;
  sift_up(h, h->n - 1);
}

/* Removes the item at index i, keeping the heap order. */
static sched_item *take_at(sched_heap *h, int i) {
  sched_item *it = h->a[i];
  h->a[i] = h->a[--h->n];
  if (i < h->n) {
    sift_down(h, i);
    sift_up(h, i);
  }
  return it;
}

sched_item *heap_pop(sched_heap *h) { return h->n ? take_at(h, 0) : NULL; }

sched_item *heap_take_client(sched_heap *h, const fc_sched_client *c) {
  for (int i = 0; i < h->n; i++)
    if (h->a[i]->client == c) return take_at(h, i);
  return NULL;
}
