/* facecast worker: a node that renders bulk video jobs from Redis (issue 17).
 *
 * Why the server in a worker role rather than a program of its own: a worker renders exactly
 * as an API node does — the same lip-sync pool over the same devices and model, the same
 * avatars, the same runner (jobs/vrun.h) over the same store (jobs/vstore.h on Redis) — and
 * it wants the same /healthz and /metrics for its orchestrator and Prometheus. So it is
 * `serve` with every option serve has (--model, --device, --avatar, --preset, --tts...), the
 * store on Redis required, render slots the machine's cores unless told, and its HTTP answering
 * /healthz and /metrics only (fc_server_params.worker): requests go to API nodes
 * (`serve --redis`), which need not render at all. */
#include "cli/cli.h"
#include "facecast/error.h"
#include "facecast/server.h"

#include <stdio.h>
#include <string.h>

void fc_cli_worker_usage(FILE *f) {
  fputs("usage: facecast worker --redis URL [--render-slots K] [--shared-dir DIR]\n"
        "                       [--port 8010] [--host ADDR] [--model NAME] [--checkpoint FILE]\n"
        "                       [--device D[,D...]] [--avatar IMG] [--preset X264_PRESET]\n"
        "                       [--tts PROVIDER ...] [--webhook-secret-file FILE]\n"
        "                       [--video-retention S] [--claim-idle S] [--config FILE] [--quiet]\n"
        "\n"
        "Renders the bulk video jobs (POST /v1/videos) that `facecast serve --redis URL` nodes\n"
        "take: their shards and joins come from the Redis Stream's consumer group, K at a time\n"
        "(--render-slots, default: the cores), into --shared-dir (default DATA_DIR/videos),\n"
        "which every node must see (NFS, a shared volume). A worker killed mid-shard leaves its\n"
        "item pending; another worker takes it over once it has been quiet for --claim-idle\n"
        "seconds (15; at least 5: a working slot touches its item every 2 s), so run\n"
        "as many as you like and stop or lose any of them. Stop one with SIGTERM: its renders\n"
        "stop and their items go to the others.\n"
        "URL: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB] (port 6379, database 0).\n"
        "HTTP (--port, --host): GET /healthz and GET /metrics only.\n"
        "Every other option is serve's (facecast serve --help): the lip-sync model and\n"
        "devices, avatars, the voice, the webhook secret for callbacks.\n",
        f);
}

int fc_cli_worker_check(fc_server_params *p) {
  if (!p->redis_url)
    return fc_error_set(FC_EINVAL, "worker: --redis URL is required (the job store whose work "
                                   "it renders)");
  if (p->render_slots < 0)
    return fc_error_set(FC_EINVAL, "worker: --render-slots must be 1 or more (a worker renders)");
  if (p->transport && strcmp(p->transport, "webrtc") != 0)
    return fc_error_set(FC_EINVAL, "worker: --transport %s: a worker has no live sessions",
                        p->transport);
  p->worker = 1;
  return FC_OK;
}

void fc_cli_worker_started(const fc_server_params *p, int port) {
  /* the URL without its password (logs are read by others) */
  const char *at = strrchr(p->redis_url, '@');
  const char *where = at ? at + 1 : p->redis_url + (strncmp(p->redis_url, "redis://", 8) ? 0 : 8);
  int slots = p->render_slots > 0 ? p->render_slots : (int)g_get_num_processors();
  fprintf(stderr, "facecast: worker on %s://%s:%d/ (/healthz, /metrics): %d render slot%s, "
                  "jobs from redis://%s\n",
          p->tls_cert ? "https" : "http", p->host ? p->host : "0.0.0.0", port, slots,
          slots == 1 ? "" : "s", where);
}

int fc_cmd_worker(int argc, char **argv) { return fc_cli_serve(argc, argv, 1); }
