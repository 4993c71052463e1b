/* Background tasks over HTTP: a table of jobs by id, run one at a time on their own thread at
 * nice 10, with the states, answers and eviction that the avatar studio (avatars.c) and bulk
 * renders (renders.c) share.
 *
 * A kind embeds fc_task as the first member of its job struct and says how to run, describe
 * and free one. The table owns a job from fc_tasks_submit on (also when that refuses it).
 * Status moves pending → running → completed | failed | canceled; the job thread sets running
 * and the final state, the main loop cancels. Everything in fc_task except `cancel` and
 * `progress` (relaxed atomics, below) is read and written under the table's
 * lock; a kind's own fields are written by its run callback before the final state is set
 * under the lock, so readers that look only at finished jobs' results need no more. */
#ifndef FC_SERVER_TASKS_H
#define FC_SERVER_TASKS_H

#include <glib.h>
#include <libsoup/soup.h>

typedef struct fc_server fc_server;

enum { FC_TASK_PENDING, FC_TASK_RUNNING, FC_TASK_COMPLETED, FC_TASK_FAILED, FC_TASK_CANCELED };

typedef struct fc_task {
  char id[64];
  int status;
  int progress;       /* 0..100 */
  int queued;         /* in the pool's queue: the pool holds the pointer, so it stays listed */
  int cancel;         /* set to stop a running job at its next check (fc_task_cancel) */
  char error[512];    /* failed or canceled: why */
  char owner[64];     /* the API key that made it ("" without keys): only it sees the job */
  gint64 created;
  gint64 start_real, end_real; /* wall clock (µs since the epoch): submitted, finished (0: not yet) */
  char notify_url[512]; /* "" or an http(s) URL the job's JSON is POSTed to at each change of
                         * status (LiveTalking's notifyurl; set before fc_tasks_submit) */
  struct fc_webhook_log *notify_log; /* its POSTs' attempts (webhook.h); set by the table */
} fc_task;

/* cancel and progress cross threads without the lock: one word each, no order needed. */
static inline void fc_task_cancel(fc_task *t) { __atomic_store_n(&t->cancel, 1, __ATOMIC_RELAXED); }
static inline int fc_task_canceled(const fc_task *t) {
  return __atomic_load_n(&t->cancel, __ATOMIC_RELAXED);
}
static inline void fc_task_set_progress(fc_task *t, int pct) {
  __atomic_store_n(&t->progress, pct, __ATOMIC_RELAXED);
}
static inline int fc_task_progress(const fc_task *t) {
  return __atomic_load_n(&t->progress, __ATOMIC_RELAXED);
}

typedef struct fc_task_kind {
  const char *noun; /* in messages: "render", "avatar task" */
  int max;          /* jobs kept; the oldest finished ones are forgotten first */
  /* Runs the job on the task thread; 0 or an error code with its detail set. */
  int (*run)(fc_server *srv, fc_task *t);
  /* The job as a JSON object (lock held). */
  void (*json)(const fc_task *t, GString *out);
  /* Optional: the job leaves the table by request or eviction (lock held), e.g. its file. */
  void (*forget)(fc_task *t);
  /* Optional: the job will not run (cancelled while queued; the job thread, no lock): what it
   * holds for its run can go now. */
  void (*skipped)(fc_server *srv, fc_task *t);
  void (*destroy)(fc_task *t);
} fc_task_kind;

typedef struct fc_tasks fc_tasks;

fc_tasks *fc_tasks_new(fc_server *srv, const fc_task_kind *kind);
/* Cancels every job, waits for the running one, frees them all. NULL is fine. */
void fc_tasks_free(fc_tasks *ts);

/* Queues t under id (NULL: "<prefix>-N", the first N free) and answers msg: 200
 * {task_id, status: "pending"}, 409 when the id is taken, 503 when the table is full of
 * unfinished jobs. Takes t either way. */
void fc_tasks_submit(fc_tasks *ts, SoupServerMessage *msg, fc_task *t, const char *id,
                     const char *prefix);
/* GET: the job's JSON; DELETE: cancel it (pending or running) or forget it (finished). */
void fc_tasks_answer(fc_tasks *ts, SoupServerMessage *msg, const char *id);
/* GET: every job's JSON, newest first, as LiveTalking's {"tasks": [...]}. */
void fc_tasks_list(fc_tasks *ts, SoupServerMessage *msg);
/* The lock and a lookup under it, for a kind's own answers (e.g. a finished render's file). */
void fc_tasks_lock(fc_tasks *ts);
void fc_tasks_unlock(fc_tasks *ts);
fc_task *fc_tasks_find_locked(fc_tasks *ts, const char *id);
/* Every job (a list to g_list_free; lock held). */
GList *fc_tasks_all_locked(fc_tasks *ts);
/* Whether the request may see t: without API keys any, with keys its own key's. */
int fc_task_visible(const fc_tasks *ts, const fc_task *t, SoupServerMessage *msg);

const char *fc_task_status_name(int status);
/* Appends "task_id", "status", "progress" and, when failed or canceled, "error" (no braces). */
void fc_task_json_fields(const fc_task *t, GString *out);

#endif
