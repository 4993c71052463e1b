/* The worker pool (its jobs): everything a request starts that may take longer than the main loop can
 * wait (speech synthesis, WAV decoding, finishing an MP4) and frame production. A job that
 * answers a request finishes it on the main loop (the request stays paused until then). */
#include "facecast/error.h"
#include "facecast/tts.h"
#include "media/audio_dec.h"
#include "server/internal.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef struct reply {
  SoupServerMessage *msg;
  fc_server *srv;
  int status;
  char *text;      /* the error message (status >= 400) or the data JSON (NULL = none) */
  char *record_id; /* RECORD_STOP: session id, path and owner to register */
  char *record_path;
  char record_owner[64];
} reply;

static gboolean deliver_reply(gpointer data) {
  reply *r = data;
  if (r->record_id && r->record_path) {
    fc_recording *rec = g_new0(fc_recording, 1);
    rec->path = r->record_path;
    rec->made = g_get_monotonic_time();
    g_strlcpy(rec->owner, r->record_owner, sizeof rec->owner);
    fc_recordings_add(r->srv, r->record_id, rec); /* keeps one per session, and a bounded number */
    r->record_id = r->record_path = NULL;
  }
  if (r->msg) {
    if (r->status >= 400)
      fc_http_error(r->msg, r->status, "%s", r->text);
    else
      fc_http_ok(r->msg, r->text);
    soup_server_message_unpause(r->msg);
  }
  return G_SOURCE_REMOVE;
}

static void free_reply(gpointer data) {
  reply *r = data;
  if (r->msg) g_object_unref(r->msg);
  g_free(r->text);
  g_free(r->record_id);
  g_free(r->record_path);
  g_free(r);
}

static void post_reply(fc_server *srv, reply *r) {
  GSource *src = g_idle_source_new();
  g_source_set_callback(src, deliver_reply, r, free_reply);
  g_source_attach(src, srv->ctx);
  g_source_unref(src);
}

/* Queues speech on the session (interrupting first when asked) and starts production; text
 * (or NULL) is what it says, for its SSE events. */
static int queue_speech(fc_session *s, const fc_speech *sp, int interrupt, const char *text) {
  if (interrupt) fc_session_interrupt(s);
  g_mutex_lock(&s->lock);
  uint32_t utt = 0;
  int err = g_atomic_int_get(&s->closed) ? fc_error_set(FC_ENOTFOUND, "the session is closed")
                      : fc_stream_push_speech(s->stream, sp->audio.samples, sp->audio.n, sp->ph,
                                              sp->n_ph, &utt);
  if (!err) fc_session_utt_text(s, utt, text);
  if (!err) fc_session_want_fill_locked(s);
  g_mutex_unlock(&s->lock);
  return err;
}

/* An upload that is not WAV, through GStreamer (media/audio_dec.h), from a temporary file:
 * containers such as MP4 keep their index at the end, so the decoder needs to seek. */
static int decode_upload(const void *d, size_t n, fc_audio *out) {
  GError *e = NULL;
  char *path = NULL;
  int fd = g_file_open_tmp("facecast-upload-XXXXXX", &path, &e);
  int err;
  if (fd < 0) {
    err = fc_error_set(FC_EIO, "cannot keep the upload: %s", e->message);
    g_error_free(e);
    return err;
  }
  ssize_t w = write(fd, d, n);
  close(fd);
  err = w == (ssize_t)n ? fc_audio_decode_file(path, 120, out)
                        : fc_error_set(FC_EIO, "cannot keep the upload");
  unlink(path);
  g_free(path);
  return err;
}

/* Frees a job and what it holds (the paused request's reference too, if it still has one). */
void fc_job_free(fc_job *j) {
  if (j->counted) g_atomic_int_add(&j->s->jobs_waiting, -1);
  if (j->msg) g_object_unref(j->msg);
  fc_session_unref(j->s);
  if (j->data) g_bytes_unref(j->data);
  g_free(j->text);
  g_free(j->voice);
  g_free(j->name);
  g_free(j);
}

void fc_job_run(gpointer data, gpointer user) {
  fc_job *j = data;
  fc_server *srv = user;
  reply *r = g_new0(reply, 1);
  r->srv = srv;
  r->msg = j->msg;
  r->status = 200;
  j->msg = NULL;
  int err = FC_OK;
  fc_error_clear();
  switch (j->kind) {
  case FC_JOB_FILL: fc_session_fill(j->s); break;
  case FC_JOB_SAY: fc_session_say_run(j->s); break;
  case FC_JOB_SPEAK: {
    fc_speech sp;
    fc_tts_params tp = {.voice = j->voice ? j->voice : srv->p.tts_voice}; /* --tts-voice */
    if (!(err = fc_tts_speak(j->text, &tp, &sp))) {
      err = queue_speech(j->s, &sp, j->interrupt, j->text);
      fc_speech_free(&sp);
    }
    break;
  }
  case FC_JOB_AUDIO: {
    fc_audio raw;
    fc_speech sp = {0};
    gsize n;
    const void *d = g_bytes_get_data(j->data, &n);
    if (n >= 4 && !memcmp(d, "RIFF", 4)) { /* WAV: read here */
      if (!(err = fc_wav_read_mem(d, n, j->name, &raw))) {
        err = fc_resample(&raw, FC_SAMPLE_RATE, &sp.audio);
        fc_audio_free(&raw);
      }
    } else { /* anything else GStreamer decodes: MP3, M4A, Ogg, WebM from MediaRecorder … */
      err = decode_upload(d, n, &sp.audio);
    }
    if (!err) err = queue_speech(j->s, &sp, j->interrupt, j->text);
    fc_speech_free(&sp);
    break;
  }
  case FC_JOB_RECORD_STOP: {
    char *path = NULL;
    err = fc_recorder_finish(j->rec, &path);
    if (!err) {
      r->record_id = g_strdup(j->s->id);
      r->record_path = path;
      g_strlcpy(r->record_owner, j->s->owner, sizeof r->record_owner);
      r->text = g_strdup_printf("{\"url\":\"/record/%s\"}", j->s->id);
    }
    break;
  }
  }
  if (err) {
    r->status = fc_http_status_of(err);
    g_free(r->text);
    r->text = g_strdup(fc_error_detail(err));
  }
  if (r->msg || r->record_id)
    post_reply(srv, r);
  else
    free_reply(r);
  fc_job_free(j);
}

int fc_job_push(fc_server *srv, fc_job *j) {
  GError *e = NULL;
  GThreadPool *pool = j->kind == FC_JOB_SAY && srv->say_workers ? srv->say_workers : srv->workers;
  if (g_thread_pool_push(pool, j, &e)) return FC_OK;
  int err = fc_error_set(FC_ENOMEM, "cannot queue work: %s", e->message);
  g_error_free(e);
  fc_job_free(j);
  return err;
}
