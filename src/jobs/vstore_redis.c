/* Placeholder for the Redis video job store (vstore.h, `serve --redis`, `worker --redis`): the
 * implementation (Redis Streams consumer group) replaces this file. Until then a redis URL is
 * refused at start with a clear message instead of failing to link. */
#include "jobs/vstore_internal.h"

#include "facecast/error.h"

#include <stddef.h>

fc_vstore *fc_vstore_redis_create(const fc_vstore_params *p, int *err) {
  *err = fc_error_set(FC_EUNSUPPORTED, "video store on Redis (%s): not built in yet",
                      p->redis_url);
  return NULL;
}
