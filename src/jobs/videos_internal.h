/* Private to the /v1/videos API (videos.c: routes, answers, limits, lifetime;
 * videos_create.c: POST /v1/videos). */
#ifndef FC_JOBS_VIDEOS_INTERNAL_H
#define FC_JOBS_VIDEOS_INTERNAL_H

#include "jobs/vstore.h"

#include <glib.h>
#include <libsoup/soup.h>

#define FC_VIDEO_REQUEST_ID_MAX 95
#define FC_VIDEO_MAX_UPLOAD (64 * 1024 * 1024) /* an uploaded or fetched audio / image file */

struct fc_server;
struct fc_vrun;

typedef struct fc_bucket {
  double tokens;
  gint64 at; /* µs, monotonic: when tokens was last brought up to date */
} fc_bucket;

typedef struct fc_videos {
  struct fc_server *srv;
  fc_vstore *store;       /* the server's handle (metrics: the local store's brief lock) */
  struct fc_vrun *run;    /* NULL with --render-slots 0 */
  char *shared;           /* the jobs' folders */
  int retention_s, max_active, rate_per_min;
  GThreadPool *pool;      /* the requests' work (vreq) */
  GThreadPool *sweeper;   /* the retention sweep, one at a time */
  GMutex lock;            /* handles, active */
  GPtrArray *handles;     /* store handles not in use (clones, one per concurrent request) */
  GHashTable *active;     /* owner → GPtrArray of ids: its jobs submitted here, maybe unfinished */
  GMutex submit_lock;     /* one submission at a time: counting a key's jobs and adding one */
  GHashTable *buckets;    /* "k:KEY" / "a:ADDRESS" → fc_bucket (main loop only) */
  guint expire_timer;
  int off;               /* no shared folder: /v1 answers 503 */
  gint expiring, canceled;
  gint depth_pending, depth_queued, depth_asked; /* a Redis store's depth, read by the sweeper */
} fc_videos;

/* Whether an X-Request-ID may be used as it is (1-95 of A-Z a-z 0-9 . _ : -). */
int fc_videos_request_id_valid(const char *id);

/* A POST's request, copied on the main loop (the pool thread does not touch the message). */
typedef struct fc_video_post {
  GBytes *body;
  int multipart;
  char *boundary;  /* multipart's */
  char *idem_key;  /* Idempotency-Key, or NULL */
} fc_video_post;
void fc_video_post_clear(fc_video_post *p);

/* POST /v1/videos on a pool thread with the thread's store handle: checks and stores the job
 * (uploads and fetched audio into its folder first); the answer's status, data JSON or error
 * text (g_free), Retry-After seconds (0: none) and Location (g_free; NULL: none). */
typedef struct fc_video_answer {
  int status;
  char *text;
  int retry_after;
  char *location;
} fc_video_answer;
void fc_videos_create(fc_videos *v, fc_vstore *st, const fc_video_post *in, const char *owner,
                      const char *request_id, fc_video_answer *out);

#endif
