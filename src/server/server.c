/* facecast serve: server lifetime (see include/facecast/server.h and internal.h). */
#include "facecast/error.h"
#include "converse/llm.h"
#include "core/file.h"
#include "core/stale.h"
#include "server/internal.h"
#include "server/fleet.h"
#include "server/listen.h"
#include "speech/voice.h"
#include "server/keys.h"
#include "server/listener.h"
#include "jobs/webhook.h"

#include <errno.h>
#include <glib-unix.h>
#include <glib/gstdio.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void fc_recording_free(gpointer p) {
  fc_recording *r = p;
  if (!r) return;
  if (r->remove_file) g_remove(r->path);
  g_free(r->path);
  g_free(r);
}

void fc_recordings_add(fc_server *srv, char *id, fc_recording *r) {
  r->remove_file = srv->own_record_dir; /* a --record-dir keeps every file */
  g_hash_table_replace(srv->recordings, id, r); /* a session's earlier one goes (file too) */
  if (g_hash_table_size(srv->recordings) <= FC_MAX_RECORDINGS) return;
  GHashTableIter it;
  gpointer k, v, oldest = NULL;
  gint64 t = G_MAXINT64;
  g_hash_table_iter_init(&it, srv->recordings);
  while (g_hash_table_iter_next(&it, &k, &v))
    if (((fc_recording *)v)->made < t) t = ((fc_recording *)v)->made, oldest = k;
  g_hash_table_remove(srv->recordings, oldest);
}

fc_server_params fc_server_params_default(void) {
  return (fc_server_params){.port = 8010, .width = 512, .height = 512, .max_sessions = 5,
                            .barge_in = 1};
}

static gint job_order(gconstpointer a, gconstpointer b, gpointer user) {
  /* Frame production first: a session waiting for frames is late, a sentence waiting for
   * synthesis is merely not started. */
  int fa = ((const fc_job *)a)->kind == FC_JOB_FILL, fb = ((const fc_job *)b)->kind == FC_JOB_FILL;
  return fb - fa;
}

typedef struct fc_avatar_ref {
  fc_avatar *av;
  int refs;
} fc_avatar_ref;

static void free_avatar_ref(gpointer p) {
  fc_avatar_ref *r = p;
  fc_avatar_destroy(r->av);
  g_free(r);
}

fc_avatar *fc_server_avatar_get(fc_server *srv, const char *name, int *err) {
  if (!name || !*name || strcmp(name, "default") == 0 || strcmp(name, fc_avatar_id(srv->avatar)) == 0)
    return srv->avatar;
  if (!fc_avatar_id_valid(name)) {
    *err = fc_error_set(FC_ENOTFOUND, "unknown avatar '%s'", name);
    return NULL;
  }
  g_mutex_lock(&srv->avatar_lock);
  fc_avatar_ref *r = g_hash_table_lookup(srv->avatar_cache, name);
  if (!r) {
    fc_avatar *av = fc_avatar_open_pack(name, err);
    if (av) {
      r = g_new0(fc_avatar_ref, 1);
      r->av = av;
      g_hash_table_insert(srv->avatar_cache, g_strdup(name), r);
    }
  }
  if (r) r->refs++;
  g_mutex_unlock(&srv->avatar_lock);
  return r ? r->av : NULL;
}

void fc_server_avatar_put(fc_server *srv, fc_avatar *av) {
  if (!av || av == srv->avatar) return;
  g_mutex_lock(&srv->avatar_lock);
  fc_avatar_ref *r = g_hash_table_lookup(srv->avatar_cache, fc_avatar_id(av));
  if (r && r->av == av && --r->refs == 0) /* nobody uses it: its memory goes */
    g_hash_table_remove(srv->avatar_cache, fc_avatar_id(av));
  g_mutex_unlock(&srv->avatar_lock);
}

int fc_server_sched_start(fc_server *srv) {
  fc_lipsync *ls[FC_SERVER_MAX_DEVICES];
  for (int k = 0; k < srv->n_devs; k++) ls[k] = srv->devs[k].ls;
  /* A GPU backend gains from batches across sessions; the CPU backends cost per frame, so
   * their batches stay as large as the sessions make them without waiting for others. */
  fc_lipsync_pool_params pp = {.backends = ls, .n_backends = srv->n_devs,
                               .max_batch = fc_server_max_batch(srv), .gather_ms = srv->gpu ? 2 : -1};
  int err;
  if (!(srv->pool = fc_lipsync_pool_create(&pp, &err))) return err;
  srv->sched = fc_lipsync_pool_sched(srv->pool);
  return FC_OK;
}

/* What servers, renders and avatar creation killed before they finished left behind:
 * temporary folders and uploads, partly written packs (core/stale.h). */
static void sweep_leftovers(void) {
  int n = fc_stale_sweep(g_get_tmp_dir(), "facecast-rec-", NULL, 1) +
          fc_stale_sweep(g_get_tmp_dir(), "facecast-upload-", NULL, 0) +
          fc_stale_sweep(fc_avatar_dir(), NULL, ".fcpack.tmp.", 0);
  if (n) g_message("removed %d leftovers of facecast runs that were killed", n);
}

fc_server *fc_server_create(const fc_server_params *p, int *err) {
  fc_server *srv = g_new0(fc_server, 1);
  srv->record_lock = -1;
  srv->p = p ? *p : fc_server_params_default();
  if (srv->p.max_sessions <= 0) srv->p.max_sessions = 5;
  if (srv->p.opus_complexity < 0 || srv->p.opus_complexity > 10) {
    *err = fc_error_set(FC_EINVAL, "Opus complexity %d: expected 1..10", srv->p.opus_complexity);
    g_free(srv);
    return NULL;
  }
  if (srv->p.x264_preset && (*err = fc_live_check_preset(srv->p.x264_preset))) {
    g_free(srv); /* refused at start, not at the first session */
    return NULL;
  }
  if ((*err = fc_push_check(&srv->p)) || (*err = fc_ice_check(&srv->p))) { /* refused at start */
    g_free(srv);
    return NULL;
  }
  if (srv->p.width <= 0) srv->p.width = 512, srv->p.height = 512;
  g_mutex_init(&srv->lock);
  g_mutex_init(&srv->asr_lock);
  g_mutex_init(&srv->avatar_lock);
  g_mutex_init(&srv->stat_lock);
  srv->avatar_cache = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, free_avatar_ref);
  srv->ctx = g_main_context_ref(g_main_context_default());
  srv->loop = g_main_loop_new(srv->ctx, FALSE);
  srv->sessions = g_hash_table_new(g_str_hash, g_str_equal);
  srv->recordings = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, fc_recording_free);
  /* the checkout's (or install's) web/ beside the binary's folder, else ./web */
  const char *web = srv->p.web_dir ? srv->p.web_dir : fc_beside_exe("web");
  srv->web_dir = g_strdup(web ? web : "web");
  GError *e = NULL;
  if (srv->p.record_dir) {
    srv->record_dir = g_strdup(srv->p.record_dir);
    if (g_mkdir_with_parents(srv->record_dir, 0755) != 0) {
      *err = fc_error_set(FC_EIO, "cannot create the recording folder %s", srv->record_dir);
      goto fail;
    }
  } else if ((srv->record_dir = g_build_filename(g_get_tmp_dir(), "facecast-rec-XXXXXX", NULL),
              (srv->record_lock = fc_stale_mkdtemp(srv->record_dir)) < 0)) {
    *err = fc_error_set(FC_EIO, "cannot create a recording folder in %s: %s", g_get_tmp_dir(),
                        g_strerror(errno));
    goto fail;
  } else {
    srv->own_record_dir = 1;
  }

  fc_avatar_params ap = fc_avatar_params_default();
  ap.width = srv->p.width;
  ap.height = srv->p.height;
  if (!srv->p.avatar) ap.framing = FC_FRAMING_HEAD;
  if (srv->p.avatar && fc_avatar_is_pack_ref(srv->p.avatar))
    srv->avatar = fc_avatar_open_pack(srv->p.avatar, err);
  else
    srv->avatar = fc_avatar_create_from_image(srv->p.avatar ? srv->p.avatar : fc_avatar_default_path(),
                                              &ap, err);
  if (!srv->avatar) goto fail;
  srv->gpu = srv->p.device && strncmp(srv->p.device, "cuda", 4) == 0;
  /* --device A,B,...: one backend per device (the same model on each) */
  gchar **names = g_strsplit(srv->p.device ? srv->p.device : "cpu", ",", -1);
  for (int k = 0; names[k]; k++) {
    if (k >= FC_SERVER_MAX_DEVICES || !*names[k]) {
      *err = fc_error_set(FC_EINVAL, "--device '%s': 1 to %d devices, comma-separated",
                          srv->p.device, FC_SERVER_MAX_DEVICES);
      g_strfreev(names);
      goto fail;
    }
    fc_lipsync_params lp = {.model = srv->p.model, .checkpoint = srv->p.checkpoint,
                            .device = names[k]};
    if (!(srv->devs[k].ls = fc_lipsync_create(&lp, err))) {
      g_strfreev(names);
      goto fail;
    }
    srv->devs[k].gpu = strncmp(names[k], "cuda", 4) ? -1 : names[k][4] == ':' ? atoi(names[k] + 5) : 0;
    srv->n_devs = k + 1;
  }
  g_strfreev(names);
  /* The CPU renderer (parametric) keeps per-call state, so one backend draws one frame at a
   * time: on a machine with many cores one scheduler thread would serialise every session's
   * lip-sync. So the plain "cpu" device gets one backend per two cores, each with its own
   * scheduler thread, and sessions are placed on them like on several GPUs. (A neural model
   * on the CPU already spreads one call over every core, and stays one.) */
  if (srv->n_devs == 1 && (!srv->p.device || !strcmp(srv->p.device, "cpu")) &&
      !fc_lipsync_needs_mel(srv->devs[0].ls) && !srv->p.solo_batches) {
    int want = (int)g_get_num_processors() / 2;
    want = want > FC_SERVER_MAX_DEVICES ? FC_SERVER_MAX_DEVICES : want;
    for (int k = 1; k < want; k++) {
      fc_lipsync_params lp = {.model = srv->p.model, .checkpoint = srv->p.checkpoint, .device = "cpu"};
      if (!(srv->devs[k].ls = fc_lipsync_create(&lp, err))) goto fail;
      srv->devs[k].gpu = -1;
      srv->n_devs = k + 1;
    }
  }
  srv->lipsync = srv->devs[0].ls;
  g_mutex_init(&srv->solo_lock);
  if (!srv->p.solo_batches && (*err = fc_server_sched_start(srv))) goto fail;

  /* One worker per core; with a GPU backend a producing worker mostly waits for its batch, and
   * a batch holds at most as many sessions as there are workers waiting: four per core. */
  int gpu = srv->p.device && strncmp(srv->p.device, "cuda", 4) == 0;
  srv->workers = g_thread_pool_new(fc_job_run, srv, (gint)g_get_num_processors() * (gpu ? 4 : 1),
                                   FALSE, &e);
  if (!srv->workers) {
    *err = fc_error_set(FC_ENOMEM, "cannot start workers: %s", e->message);
    g_error_free(e);
    goto fail;
  }
  g_thread_pool_set_sort_function(srv->workers, job_order, NULL);

  if (srv->p.api_keys && !(srv->keys = fc_keys_load(srv->p.api_keys, err))) goto fail;
  if (fc_server_llm_start(srv, err) || fc_server_voice_start(srv, err) ||
      fc_server_asr_start(srv, err))
    goto fail;
  if (srv->p.media_dirs) { /* each an absolute folder: a relative one would never match */
    gchar **dirs = g_strsplit(srv->p.media_dirs, ":", -1);
    int bad = 0;
    for (int i = 0; dirs[i] && !bad; i++)
      if (!*dirs[i] || !g_path_is_absolute(dirs[i]) || !g_file_test(dirs[i], G_FILE_TEST_IS_DIR))
        bad = fc_error_set(FC_EINVAL, "--media-dir '%s': expected an absolute path to a folder",
                           dirs[i]);
    g_strfreev(dirs);
    if ((*err = bad)) goto fail;
  }
  srv->webhook = fc_webhook_new(srv->p.webhook_secret); /* before the tables that use it */
  srv->soup = soup_server_new("server-header", "facecast", NULL);
  if (!(srv->fleet = fc_fleet_create(srv, err)) && *err) goto fail;
  fc_http_register(srv);
  if (fc_videos_start(srv, err)) goto fail;
  fc_listener_params lp = {.host = srv->p.host,
                           .port = srv->p.port,
                           .tls_cert = srv->p.tls_cert,
                           .tls_key = srv->p.tls_key,
                           .max_per_client = srv->p.max_conns_per_client,
                           .header_timeout_s = srv->p.header_timeout_s,
                           .body_timeout_s = srv->p.body_timeout_s,
                           .idle_timeout_s = srv->p.idle_timeout_s,
                           .write_timeout_s = srv->p.write_timeout_s};
  if (!(srv->listener = fc_listener_create(srv->soup, &lp, err))) goto fail;
  srv->port = fc_listener_port(srv->listener);

  if ((*err = fc_fleet_start(srv->fleet))) goto fail; /* registers the node with its port */
  if ((*err = fc_pacer_start(srv))) goto fail;
  if ((*err = fc_push_start(srv))) goto fail; /* sessions "0".. with --transport rtmp|rtcpush */
  fc_videos_log_start(srv);
  if (srv->keys)
    g_message("API keys: %d from %s; control routes need 'Authorization: Bearer KEY'",
              fc_keys_count(srv->keys), srv->p.api_keys);
  else
    g_message("no API keys (--api-keys FILE): anyone who reaches this port may open sessions; "
              "a session id is the only credential for acting on its session");
  /* a photo's face: from the face cache or found (most of a CPU start when found); here, once
   * started, so that a refused start stays one line */
  const char *found = fc_avatar_detection(srv->avatar, NULL);
  if (found)
    fprintf(stderr, "facecast: avatar %s: %s\n", srv->p.avatar ? srv->p.avatar : "default", found);
  /* Once started: a refused start stays one line, whatever killed runs left behind (our own
   * folders are locked by now, so only theirs go). */
  sweep_leftovers();
  *err = FC_OK;
  return srv;
fail:
  fc_server_destroy(srv);
  return NULL;
}

int fc_server_port(const fc_server *s) { return s->port; }

static gboolean on_signal(gpointer data) {
  fc_server_quit(data);
  return G_SOURCE_CONTINUE;
}

int fc_server_run(fc_server *srv, int handle_signals) {
  guint a = 0, b = 0;
  if (handle_signals) {
    a = g_unix_signal_add(SIGINT, on_signal, srv);
    b = g_unix_signal_add(SIGTERM, on_signal, srv);
  }
  g_main_loop_run(srv->loop);
  if (a) g_source_remove(a);
  if (b) g_source_remove(b);
  return FC_OK;
}

void fc_server_quit(fc_server *srv) { g_main_loop_quit(srv->loop); }

void fc_server_destroy(fc_server *srv) {
  if (!srv) return;
  /* Requests that arrive while it goes (the listener accepts until the end) get 503 instead of
   * reaching jobs and tables already freed: SIGTERM under traffic crashed in /api/avatar/task */
  srv->closing = 1;
  fc_pacer_stop(srv);
  /* Close every session (stops outputs; recordings are finished by the workers) while the
   * HTTP side is still connected: closing completes their event streams. */
  for (;;) {
    g_mutex_lock(&srv->lock);
    GHashTableIter it;
    gpointer v = NULL;
    g_hash_table_iter_init(&it, srv->sessions);
    int any = g_hash_table_iter_next(&it, NULL, &v);
    if (any) fc_session_ref(v);
    g_mutex_unlock(&srv->lock);
    if (!any) break;
    fc_session_close(v, "server stopping");
    fc_session_unref(v);
  }
  fc_push_stop(srv); /* closed above with the others */
  /* deregistered (its sessions' keys deleted) and its proxies answered while the HTTP side is
   * still there */
  fc_fleet_destroy(srv->fleet);
  srv->fleet = NULL;
  if (srv->soup) soup_server_disconnect(srv->soup);
  if (srv->say_workers) g_thread_pool_free(srv->say_workers, FALSE, TRUE); /* cancelled */
  if (srv->listen_workers) g_thread_pool_free(srv->listen_workers, FALSE, TRUE);
  if (srv->workers) g_thread_pool_free(srv->workers, FALSE, TRUE);
  fc_avatar_tasks_free(srv);
  fc_render_tasks_free(srv);
  fc_videos_free(srv); /* its render slots stop at their next lip-sync request */
  fc_webhook_free(srv->webhook); /* after the tables and the videos: their last notices (3 s at most) */
  /* Replies the workers posted at the end are dropped with their sources. */
  while (g_main_context_iteration(srv->ctx, FALSE)) {
  }
  /* After libsoup let go of its connections and no other thread holds one (workers, tasks). */
  fc_listener_destroy(srv->listener);
  if (srv->soup) g_object_unref(srv->soup);
  if (srv->recordings) g_hash_table_destroy(srv->recordings); /* files in our own folder go */
  if (srv->own_record_dir) {
    char *lock = g_build_filename(srv->record_dir, ".lock", NULL);
    g_remove(lock);
    g_free(lock);
    g_rmdir(srv->record_dir);
  }
  if (srv->record_lock >= 0) close(srv->record_lock);
  if (srv->sessions) g_hash_table_destroy(srv->sessions);
  fc_lipsync_pool_destroy(srv->pool); /* the sessions and renders (its clients) are gone */
  g_mutex_clear(&srv->solo_lock);
  for (int k = 0; k < srv->n_devs; k++) fc_lipsync_destroy(srv->devs[k].ls);
  if (srv->avatar_cache) g_hash_table_destroy(srv->avatar_cache); /* sessions are gone */
  g_mutex_clear(&srv->avatar_lock);
  g_mutex_clear(&srv->stat_lock);
  fc_avatar_destroy(srv->avatar);
  g_free(srv->web_dir);
  g_free(srv->record_dir);
  fc_keys_free(srv->keys);
  fc_llm_destroy(srv->llm); /* after the sessions: their chats used it */
  fc_voice_destroy(srv->voice);
  fc_server_asr_stop(srv); /* after the listening workers */
  g_mutex_clear(&srv->asr_lock);
  if (srv->loop) g_main_loop_unref(srv->loop);
  if (srv->ctx) g_main_context_unref(srv->ctx);
  g_mutex_clear(&srv->lock);
  g_free(srv);
}
