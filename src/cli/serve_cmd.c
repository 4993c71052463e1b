/* facecast serve: the real-time server (see include/facecast/server.h). */
#include "cli/cli.h"
#include "facecast/error.h"
#include "facecast/server.h"

#include <getopt.h>
#include <glib.h>
#include <malloc.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static void serve_usage(FILE *f) {
  fputs("usage: facecast serve [--port 8010] [--host ADDR] [--avatar IMG] [--size N|WxH]\n"
        "                      [--max-sessions N] [--stun URL] [--turn URL] [--model NAME]\n"
        "                      [--checkpoint FILE] [--device D[,D...]] [--web DIR] [--record-dir DIR]\n"
        "                      [--preset X264_PRESET] [--opus-complexity 1..10]\n"
        "                      [--tls-cert FILE --tls-key FILE] [--max-conns-per-client N]\n"
        "                      [--header-timeout S] [--body-timeout S] [--idle-timeout S]\n"
        "                      [--write-timeout S]\n"
        "                      [--api-keys FILE] [--media-dir DIR[:DIR...]] [--metrics-session-ids]\n"
        "                      [--webhook-secret-file FILE]\n"
        "                      [--render-slots K] [--shared-dir DIR] [--video-retention S]\n"
        "                      [--video-max-active N] [--rate-limit N/min] [--redis URL]\n"
        "                      [--claim-idle S]\n"
        "                      [--llm-url URL] [--llm-model NAME] [--llm-system TEXT]\n"
        "                      [--llm-timeout S] [--tts PROVIDER] [--tts-url URL]\n"
        "                      [--tts-voice NAME] [--tts-model NAME] [--tts-ref-audio PATH]\n"
        "                      [--tts-ref-text TEXT] [--tts-lang LANG] [--tts-rate HZ]\n"
        "                      [--tts-timeout S] [--tts-edge-version V] [--asr PROVIDER]\n"
        "                      [--asr-url URL] [--asr-model M] [--asr-lang L] [--asr-timeout S]\n"
        "                      [--barge-in on|off] [--vad-hangover-ms MS]\n"
        "                      [--transport webrtc|rtmp|rtcpush] [--push-url URL]\n"
        "                      [--config FILE] [--quiet]\n"
        "                      [--ice-ports MIN-MAX] [--ice-tcp on|off]\n"
        /* fleet (src/server/fleet.h) */
        "                      [--node-url http://HOST:PORT] [--fleet-redirect]\n"
        "\n"
        "Open http://HOST:PORT/ in a browser, press Connect and type a sentence.\n"
        "Chat (/human type=chat) needs an OpenAI-compatible LLM: --llm-url (default\n"
        "$OPENAI_BASE_URL, or https://api.openai.com/v1 when only $OPENAI_API_KEY is set),\n"
        "--llm-model (default $LLM_MODEL, else gpt-4o-mini); the key comes from\n"
        "$OPENAI_API_KEY only (never a flag: flags show in ps).\n"
        "Voices: --tts espeak (embedded, the default), openai, edge, gpt-sovits, cosyvoice or\n"
        "fish (LiveTalking's edgetts and fishtts too), at --tts-url (default: the service's\n"
        "usual local address; edge: Microsoft's); its key from $TTS_API_KEY (openai: else\n"
        "$OPENAI_API_KEY). A sentence the service fails is spoken by espeak-ng.\n"
        "Ears (WS /ws/audio?mode=chat|echo, /api/asr): --asr pocketsphinx (embedded, the\n"
        "default), openai (/audio/transcriptions), funasr (its WebSocket) or none; key from\n"
        "$ASR_API_KEY (openai: else $OPENAI_API_KEY). --barge-in on: the user's speech stops\n"
        "the avatar. --vad-hangover-ms: the silence that ends a spoken turn (500).\n"
        "--transport rtmp --push-url URL: session \"0\" is made at start and pushed (H.264 +\n"
        "AAC in FLV) to an RTMP server (nginx-rtmp, SRS), reconnecting by itself; make it\n"
        "speak with POST /human {\"sessionid\":\"0\",...} (LiveTalking's rtmpapi.html). /offer\n"
        "still serves WebRTC viewers beside it. Its connection: GET /healthz, \"push\".\n"
        "--transport rtcpush --push-url URL: sessions \"0\"..\"N-1\" (N = --max-sessions) are\n"
        "made at start and published over WHIP (WebRTC, H.264 + Opus) to URL, URL1, URL2...\n"
        "(e.g. SRS's http://HOST:1985/rtc/v1/whip/?app=live&stream=livestream), with\n"
        "'Authorization: Bearer $WHIP_TOKEN' if set; they take every session, so /offer is\n"
        "answered 503.\n"
        "--avatar: a photo, an avatar id or .fcpack, or a LiveTalking wav2lip avatar folder\n"
        "(a path, or an id with a folder in data/avatars), imported once into the store.\n"
        "--config FILE: a YAML file of these options (e.g. 'api_keys: /etc/facecast/keys',\n"
        "'quiet: true', 'media_dir: [/srv/a, /srv/b]'); options given here override it; an\n"
        "empty value ('') leaves an option at its default.\n"
        "--data-dir DIR: avatars and api_keys (default $FACECAST_DATA_DIR, else ./data, else\n"
        "the data/ beside the binary's folder). --env-file FILE: KEY=VALUE lines put into the\n"
        "environment (secrets such as OPENAI_API_KEY; default ./.env when it exists; variables\n"
        "already set win; values are never printed).\n"
        "--cors-origins: the origins whose pages may call this server ('*', the default, as\n"
        "LiveTalking; 'none'; or 'https://a.example, http://b.example:8080').\n"
        "LiveTalking: its config.yaml works as --config, and its option names are accepted\n"
        "(--listenport, --max_session, --avatar_id, --TTS_SERVER: the URL of the cloning\n"
        "services, --REF_TEXT, --REF_FILE: the voice for edge/espeak, else the reference audio, --modelfile, --push_url, --stun\n"
        "stun:HOST:PORT, -c, --fps 25); -l/-m/-r, --batch_size, --modelres and\n"
        "--audio_output_device are accepted and have no effect; --model wav2lip without\n"
        "--checkpoint loads models/wav2lip.pth when it exists.\n"
        "--webhook-secret-file FILE: sign notifications (notifyurl) with HMAC-SHA256 of this\n"
        "secret (X-Facecast-Signature; else $FACECAST_WEBHOOK_SECRET; see README \"Webhooks\").\n"
        "Bulk videos (POST /v1/videos, docs/API.md): --render-slots K render threads (default:\n"
        "the cores; 0: this node only takes requests, workers render), files in --shared-dir\n"
        "(default DATA_DIR/videos), finished jobs kept --video-retention seconds (86400);\n"
        "with --api-keys a key has at most --video-max-active unfinished jobs (10). Every /v1\n"
        "request but file downloads takes a token of its key's (or address's) bucket:\n"
        "--rate-limit N/min (50; 0: no limit), else 429 with Retry-After.\n"
        "--redis redis://[:PASSWORD@]HOST[:PORT][/DB]: jobs and their work in Redis (a Stream\n"
        "read by a consumer group), shared with `facecast worker --redis` nodes that render\n"
        "them into the same --shared-dir; this node then only takes requests unless\n"
        "--render-slots K is given. A work item whose worker went quiet for --claim-idle\n"
        "seconds (15) is taken over by another.\n"
        "WebRTC behind firewalls: --ice-ports 50000-50100 keeps each session's media on one\n"
        "port of that range (UDP, and TCP with --ice-tcp on, the default): open the range.\n"
        "--turn turn://USER:PASS@HOST:PORT relays through a TURN server (coturn); with\n"
        "$TURN_SECRET (coturn's static-auth-secret) give turn://HOST:PORT and every client\n"
        "gets time-limited credentials. Browsers get the servers from GET /api/ice-servers.\n"
        /* fleet (src/server/fleet.h) */
        "Several machines, one URL: --redis redis://HOST:6379 registers this node and its free\n"
        "places in Redis (a heartbeat; gone 5 s after it stops); when every --max-sessions\n"
        "place is taken, /offer and WHEP go to the node with the most room (proxied; with\n"
        "--fleet-redirect answered 307 to it), and a request for a session another node holds\n"
        "is proxied there. --node-url: where the others reach this node (default: this\n"
        "machine's name, or --host, and the port). GET /api/fleet shows the fleet.\n",
        f);
}

static int int_opt(const char *name, const char *s, long lo, long hi, int *out) {
  char *end;
  long v = strtol(s, &end, 10);
  if (end == s || *end || v < lo || v > hi)
    return fc_error_set(FC_EINVAL, "%s '%s': expected %ld..%ld", name, s, lo, hi);
  *out = (int)v;
  return FC_OK;
}

/* Every connection, WebRTC session and recording takes descriptors; the soft limit (often
 * 1,024) is raised to the hard one so that the server is bounded by its own caps first. */
static void raise_fd_limit(void) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    rlim_t was = r.rlim_cur;
    r.rlim_cur = r.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &r) == 0)
      fprintf(stderr, "facecast: file descriptors: limit raised from %llu to %llu\n",
              (unsigned long long)was, (unsigned long long)r.rlim_cur);
  }
}

static int option_index_of(const struct option *opts, int val) {
  int i = 0;
  while (opts[i].name && opts[i].val != val) i++;
  return i;
}

/* LiveTalking's settings in facecast's terms: REF_FILE is the voice of its edge TTS (an Edge
 * voice name: espeak speaks its language) or the reference recording of the cloning services;
 * its stun URLs lack the "//"; its model lives at models/wav2lip.pth. */
static void lt_settings(fc_server_params *p, const char *ref_file, const char *tts_server) {
  if (p->avatar && !strcmp(p->avatar, "default")) p->avatar = NULL; /* the built-in one */
  const char *tts = p->tts ? p->tts : "espeak";
  int named_voice = !g_ascii_strcasecmp(tts, "espeak") || !g_ascii_strcasecmp(tts, "edge") ||
                    !g_ascii_strcasecmp(tts, "edgetts") || !g_ascii_strcasecmp(tts, "openai");
  if (ref_file && *ref_file && named_voice && !p->tts_voice) {
    static char lang[8];
    const char *dash = strchr(ref_file, '-');
    size_t n = dash ? strcspn(dash + 1, "-") + (size_t)(dash - ref_file) + 1 : 0;
    /* "zh-CN-YunxiaNeural" → espeak's "zh-cn" */
    if (!g_ascii_strcasecmp(tts, "espeak") && g_str_has_suffix(ref_file, "Neural") && n < sizeof lang) {
      for (size_t i = 0; i < n; i++) lang[i] = g_ascii_tolower(ref_file[i]);
      lang[n] = 0;
      p->tts_voice = lang;
    } else {
      p->tts_voice = ref_file;
    }
  } else if (ref_file && *ref_file && !named_voice && !p->tts_ref_audio) {
    p->tts_ref_audio = ref_file;
  }
  if (tts_server && *tts_server && !named_voice && !p->tts_url) p->tts_url = tts_server;
  static char stun[512];
  if (p->stun_server && !strncmp(p->stun_server, "stun:", 5) && strncmp(p->stun_server, "stun://", 7)) {
    snprintf(stun, sizeof stun, "stun://%s", p->stun_server + 5);
    p->stun_server = stun;
  }
  if (p->model && !strcmp(p->model, "wav2lip") && !p->checkpoint &&
      access("models/wav2lip.pth", R_OK) == 0) {
    p->checkpoint = "models/wav2lip.pth";
    fprintf(stderr, "facecast: --model wav2lip: using models/wav2lip.pth (LiveTalking's place)\n");
  }
}

/* serve, or (worker) the same server as a worker node: the same options, with --redis required,
 * render slots the cores by default, and only /healthz and /metrics over HTTP. */
int fc_cli_serve(int argc, char **argv, int worker) {
  static const struct option opts[] = {{"port", required_argument, 0, 'p'},
                                       {"host", required_argument, 0, 'H'},
                                       {"avatar", required_argument, 0, 'a'},
                                       {"size", required_argument, 0, 's'},
                                       {"max-sessions", required_argument, 0, 'm'},
                                       {"stun", required_argument, 0, 'S'},
                                       {"turn", required_argument, 0, 'T'},
                                       {"model", required_argument, 0, 'M'},
                                       {"checkpoint", required_argument, 0, 'c'},
                                       {"device", required_argument, 0, 'd'},
                                       {"web", required_argument, 0, 'w'},
                                       {"record-dir", required_argument, 0, 'r'},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"preset", required_argument, 0, 'P'},
                                       {"opus-complexity", required_argument, 0, 'O'},
                                       {"tls-cert", required_argument, 0, 1001},
                                       {"tls-key", required_argument, 0, 1002},
                                       {"max-conns-per-client", required_argument, 0, 1003},
                                       {"header-timeout", required_argument, 0, 1004},
                                       {"body-timeout", required_argument, 0, 1005},
                                       {"idle-timeout", required_argument, 0, 1006},
                                       {"api-keys", required_argument, 0, 1007},
                                       {"media-dir", required_argument, 0, 1008},
                                       {"metrics-session-ids", no_argument, 0, 1009},
                                       {"config", required_argument, 0, 1010},
                                       {"write-timeout", required_argument, 0, 1011},
                                       {"llm-url", required_argument, 0, 1012},
                                       {"llm-model", required_argument, 0, 1013},
                                       {"llm-system", required_argument, 0, 1014},
                                       {"llm-timeout", required_argument, 0, 1015},
                                       {"tts", required_argument, 0, 1016},
                                       {"tts-url", required_argument, 0, 1017},
                                       {"tts-voice", required_argument, 0, 1018},
                                       {"tts-model", required_argument, 0, 1019},
                                       {"tts-ref-audio", required_argument, 0, 1020},
                                       {"tts-ref-text", required_argument, 0, 1021},
                                       {"tts-lang", required_argument, 0, 1022},
                                       {"tts-rate", required_argument, 0, 1023},
                                       {"tts-timeout", required_argument, 0, 1024},
                                       {"tts-edge-version", required_argument, 0, 1025},
                                       {"asr", required_argument, 0, 1026},
                                       {"asr-url", required_argument, 0, 1027},
                                       {"asr-model", required_argument, 0, 1028},
                                       {"asr-lang", required_argument, 0, 1029},
                                       {"asr-timeout", required_argument, 0, 1030},
                                       {"barge-in", required_argument, 0, 1031},
                                       {"vad-hangover-ms", required_argument, 0, 1032},
                                       {"data-dir", required_argument, 0, 1033},
                                       {"env-file", required_argument, 0, 1034},
                                       {"cors-origins", required_argument, 0, 1044},
                                       /* LiveTalking's (core/config.h translates its names) */
                                       {"ref-file", required_argument, 0, 1035},
                                       {"tts-server", required_argument, 0, 1045},
                                       {"batch-size", required_argument, 0, 1036},
                                       {"fps", required_argument, 0, 1037},
                                       {"lt-l", required_argument, 0, 1038},
                                       {"lt-m", required_argument, 0, 1039},
                                       {"lt-r", required_argument, 0, 1040},
                                       {"modelres", required_argument, 0, 1041},
                                       {"customvideo-config", required_argument, 0, 1042},
                                       {"audio-output-device", required_argument, 0, 1043},
                                       {"transport", required_argument, 0, 1046},
                                       {"push-url", required_argument, 0, 1047},
                                       {"ice-ports", required_argument, 0, 1200},
                                       {"ice-tcp", required_argument, 0, 1201},
                                       {"webhook-secret-file", required_argument, 0, 1202},
                                       {"render-slots", required_argument, 0, 1203},
                                       {"shared-dir", required_argument, 0, 1204},
                                       {"video-retention", required_argument, 0, 1205},
                                       {"video-max-active", required_argument, 0, 1206},
                                       {"rate-limit", required_argument, 0, 1207},
                                       {"redis", required_argument, 0, 1300},
                                       {"claim-idle", required_argument, 0, 1301},
                                       {"node-url", required_argument, 0, 1320},
                                       {"fleet-redirect", no_argument, 0, 1321},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  fc_server_params p = fc_server_params_default();
  int c, err, unused = 0, ignored, slots_given = 0;
  const char *ref_file = NULL, *env_file = NULL, *tts_server = NULL, *webhook_secret_file = NULL;
  /* the options point into it for the server's whole life: kept until exit */
  static GPtrArray *keep;
  if ((err = fc_cli_with_config(argc, argv, opts, &argc, &argv, &keep))) return fc_cli_fail(err);
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "qh", opts, NULL)) != -1) {
    char *end;
    long v;
    switch (c) {
    case 'p':
      v = strtol(optarg, &end, 10);
      if (*end || v < 0 || v > 65535) {
        fprintf(stderr, "facecast: error: --port '%s': expected 0..65535\n", optarg);
        return FC_EXIT_INPUT;
      }
      p.port = (int)v;
      break;
    case 'm':
      v = strtol(optarg, &end, 10);
      if (*end || v < 1 || v > 10000) {
        fprintf(stderr, "facecast: error: --max-sessions '%s': expected 1..10000\n", optarg);
        return FC_EXIT_INPUT;
      }
      p.max_sessions = (int)v;
      break;
    case 'H': p.host = optarg; break;
    case 'a': p.avatar = optarg; break;
    case 's':
      if ((err = fc_cli_parse_size(optarg, &p.width, &p.height))) return fc_cli_fail(err);
      break;
    case 'S': p.stun_server = optarg; break;
    case 'T': p.turn_server = optarg; break;
    case 'M': p.model = optarg; break;
    case 'c': p.checkpoint = optarg; break;
    case 'd': p.device = optarg; break;
    case 'w': p.web_dir = optarg; break;
    case 'r': p.record_dir = optarg; break;
    case 'q': p.quiet = 1; break;
    case 'P': p.x264_preset = optarg; break;
    case 'O':
      if ((err = fc_cli_parse_opus_complexity(optarg, &p.opus_complexity))) return fc_cli_fail(err);
      break;
    case 1001: p.tls_cert = optarg; break;
    case 1002: p.tls_key = optarg; break;
    case 1003:
      if ((err = int_opt("--max-conns-per-client", optarg, -1, 1000000, &p.max_conns_per_client)))
        return fc_cli_fail(err);
      if (p.max_conns_per_client == 0) p.max_conns_per_client = -1; /* 0: no cap */
      break;
    case 1004:
      if ((err = int_opt("--header-timeout", optarg, 1, 3600, &p.header_timeout_s))) return fc_cli_fail(err);
      break;
    case 1005:
      if ((err = int_opt("--body-timeout", optarg, 1, 3600, &p.body_timeout_s))) return fc_cli_fail(err);
      break;
    case 1006:
      if ((err = int_opt("--idle-timeout", optarg, 1, 86400, &p.idle_timeout_s))) return fc_cli_fail(err);
      break;
    case 1007: p.api_keys = optarg; break;
    case 1008: p.media_dirs = optarg; break;
    case 1009: p.metrics_session_ids = 1; break;
    case 1010: break; /* --config: read before */
    case 1011:
      if ((err = int_opt("--write-timeout", optarg, 1, 86400, &p.write_timeout_s))) return fc_cli_fail(err);
      break;
    case 1012: p.llm_url = optarg; break;
    case 1013: p.llm_model = optarg; break;
    case 1014: p.llm_system = optarg; break;
    case 1015:
      if ((err = int_opt("--llm-timeout", optarg, 1, 3600, &p.llm_timeout_s))) return fc_cli_fail(err);
      break;
    case 1016: p.tts = optarg; break;
    case 1017: p.tts_url = optarg; break;
    case 1018: p.tts_voice = optarg; break;
    case 1019: p.tts_model = optarg; break;
    case 1020: p.tts_ref_audio = optarg; break;
    case 1021: p.tts_ref_text = optarg; break;
    case 1022: p.tts_lang = optarg; break;
    case 1023:
      if ((err = int_opt("--tts-rate", optarg, 8000, 192000, &p.tts_rate))) return fc_cli_fail(err);
      break;
    case 1024:
      if ((err = int_opt("--tts-timeout", optarg, 1, 600, &p.tts_timeout_s))) return fc_cli_fail(err);
      break;
    case 1025: p.tts_edge_version = optarg; break;
    case 1026: p.asr = optarg; break;
    case 1027: p.asr_url = optarg; break;
    case 1028: p.asr_model = optarg; break;
    case 1029: p.asr_lang = optarg; break;
    case 1030:
      if ((err = int_opt("--asr-timeout", optarg, 1, 600, &p.asr_timeout_s))) return fc_cli_fail(err);
      break;
    case 1031:
      if (strcmp(optarg, "on") && strcmp(optarg, "off"))
        return fc_cli_fail(fc_error_set(FC_EINVAL, "--barge-in '%s': expected on or off", optarg));
      p.barge_in = !strcmp(optarg, "on");
      break;
    case 1032:
      if ((err = int_opt("--vad-hangover-ms", optarg, 100, 5000, &p.vad_hangover_ms)))
        return fc_cli_fail(err);
      break;
    case 1033: setenv("FACECAST_DATA_DIR", optarg, 1); break;
    case 1034: env_file = optarg; break;
    case 1044: p.cors_origins = optarg; break;
    case 1035: ref_file = optarg; break;
    case 1045: tts_server = optarg; break;
    case 1036:
      if ((err = int_opt("--batch_size", optarg, 1, 1024, &ignored))) return fc_cli_fail(err);
      unused = 1;
      break;
    case 1037:
      if (strcmp(optarg, "25") != 0)
        return fc_cli_fail(fc_error_set(FC_EINVAL, "--fps '%s': facecast runs at 25 fps", optarg));
      break;
    case 1038: case 1039: case 1040: case 1041: case 1043:
      if ((err = int_opt(opts[option_index_of(opts, c)].name, optarg, -1000000, 1000000, &ignored)))
        return fc_cli_fail(err);
      unused = 1;
      break;
    case 1042:
      return fc_cli_fail(fc_error_set(FC_EUNSUPPORTED,
                                      "--customvideo_config %s: LiveTalking's custom action videos "
                                      "are not supported (facecast's avatars take clips: avatar "
                                      "create --clip NAME=VIDEO)", optarg));
    case 1046: p.transport = optarg; break; /* checked by the server (push.c) */
    case 1047: p.push_url = optarg; break;
    case 1200:
      if ((err = fc_cli_parse_port_range("--ice-ports", optarg, &p.ice_port_min, &p.ice_port_max)))
        return fc_cli_fail(err);
      break;
    case 1201:
      if (strcmp(optarg, "on") && strcmp(optarg, "off"))
        return fc_cli_fail(fc_error_set(FC_EINVAL, "--ice-tcp '%s': expected on or off", optarg));
      p.ice_no_tcp = !strcmp(optarg, "off");
      break;
    case 1202: webhook_secret_file = optarg; break;
    case 1203:
      if ((err = int_opt("--render-slots", optarg, 0, 1024, &p.render_slots))) return fc_cli_fail(err);
      if (!p.render_slots) p.render_slots = -1; /* 0: none here (the server's 0 is "the cores") */
      slots_given = 1;
      break;
    case 1204: p.shared_dir = optarg; break;
    case 1205:
      if ((err = int_opt("--video-retention", optarg, 1, 365 * 86400, &p.video_retention_s)))
        return fc_cli_fail(err);
      break;
    case 1206:
      if ((err = int_opt("--video-max-active", optarg, 1, 1000000, &p.video_max_active)))
        return fc_cli_fail(err);
      break;
    case 1207: { /* N/min (or N) */
      char num[24];
      size_t k = strcspn(optarg, "/");
      if (k >= sizeof num || (optarg[k] && strcmp(optarg + k, "/min")))
        return fc_cli_fail(fc_error_set(FC_EINVAL, "--rate-limit '%s': expected N/min", optarg));
      memcpy(num, optarg, k);
      num[k] = 0;
      if ((err = int_opt("--rate-limit", num, 0, 1000000000, &p.rate_limit_per_min)))
        return fc_cli_fail(err);
      if (!p.rate_limit_per_min) p.rate_limit_per_min = -1; /* 0: no limit */
      break;
    }
    case 1300: p.redis_url = optarg; break;
    case 1301: /* above the runner's 2 s between touches, with room for a slow Redis */
      if ((err = int_opt("--claim-idle", optarg, 5, 3600, &p.claim_idle_s))) return fc_cli_fail(err);
      break;
    case 1320: p.node_url = optarg; break; /* fleet (src/server/fleet.h) */
    case 1321: p.fleet_redirect = 1; break;
    case 'h':
      if (worker) fc_cli_worker_usage(stdout);
      else serve_usage(stdout);
      return FC_EXIT_OK;
    default:
      fprintf(stderr, "facecast: error: %s: unknown or incomplete option '%s'\n",
              worker ? "worker" : "serve", argv[optind - 1]);
      return FC_EXIT_INPUT;
    }
  }
  if (unused)
    fprintf(stderr, "facecast: LiveTalking's -l/-m/-r, --batch_size, --modelres and "
                    "--audio_output_device have no effect here (facecast sizes its mel windows "
                    "and batches itself)\n");
  if ((err = env_file ? fc_cli_load_dotenv(env_file, 1) : fc_cli_load_dotenv(".env", 0)))
    return fc_cli_fail(err);
  lt_settings(&p, ref_file, tts_server);
  /* The ecosystem's variables (OpenAI's SDKs, LiveTalking's setups) where no flag says */
  const char *env_url = getenv("OPENAI_BASE_URL"), *env_key = getenv("OPENAI_API_KEY");
  if (!p.llm_url && env_url && *env_url) p.llm_url = env_url;
  if (!p.llm_url && env_key && *env_key) p.llm_url = "https://api.openai.com/v1";
  if (env_key && *env_key) p.llm_key = env_key;
  if (!p.llm_model && getenv("LLM_MODEL") && *getenv("LLM_MODEL")) p.llm_model = getenv("LLM_MODEL");
  const char *asr_key = getenv("ASR_API_KEY");
  if (asr_key && *asr_key) p.asr_key = asr_key;
  else if (p.asr && !g_ascii_strcasecmp(p.asr, "openai")) p.asr_key = env_key;
  /* coturn's shared secret: time-limited TURN credentials per client (never a flag) */
  if (getenv("TURN_SECRET") && *getenv("TURN_SECRET")) p.turn_secret = getenv("TURN_SECRET");
  /* Webhooks' signing secret: a file (its first line) or $FACECAST_WEBHOOK_SECRET; never printed */
  if (webhook_secret_file) {
    static char *secret; /* the server's whole life */
    GError *e = NULL;
    if (!g_file_get_contents(webhook_secret_file, &secret, NULL, &e)) {
      err = fc_error_set(FC_EIO, "--webhook-secret-file: %s", e->message);
      g_error_free(e);
      return fc_cli_fail(err);
    }
    secret[strcspn(secret, "\r\n")] = 0;
    if (!*secret)
      return fc_cli_fail(fc_error_set(FC_EINVAL, "--webhook-secret-file %s: empty", webhook_secret_file));
    p.webhook_secret = secret;
  } else if (getenv("FACECAST_WEBHOOK_SECRET") && *getenv("FACECAST_WEBHOOK_SECRET")) {
    p.webhook_secret = getenv("FACECAST_WEBHOOK_SECRET");
  }
  if ((err = worker ? fc_cli_worker_check(&p) : 0)) return fc_cli_fail(err);
  /* an API node on Redis submits; it renders only when asked to (--render-slots K) */
  if (!worker && p.redis_url && !slots_given) p.render_slots = -1;
  const char *tts_key = getenv("TTS_API_KEY");
  if (tts_key && *tts_key) p.tts_key = tts_key;
  else if (p.tts && !g_ascii_strcasecmp(p.tts, "openai")) p.tts_key = env_key;
  /* Each WebRTC session brings a dozen GStreamer threads, and glibc gives busy threads
   * arenas of their own (up to 8 per core), which then hold freed memory: resident memory
   * would creep up with every session opened and closed. A few arenas per core are plenty. */
  mallopt(M_ARENA_MAX, 2 * (int)sysconf(_SC_NPROCESSORS_ONLN));
  raise_fd_limit();
  if ((err = fc_cli_lt_avatar(&p.avatar))) return fc_cli_fail(err); /* a LiveTalking folder */
  fc_server *srv = fc_server_create(&p, &err);
  if (!srv) return fc_cli_fail(err);
  if (worker)
    fc_cli_worker_started(&p, fc_server_port(srv));
  else
    fprintf(stderr, "facecast: serving on %s://%s:%d/ (%d sessions max)\n",
            p.tls_cert ? "https" : "http", p.host ? p.host : "0.0.0.0", fc_server_port(srv),
            p.max_sessions);
  fflush(stderr);
  fc_server_run(srv, 1);
  fprintf(stderr, "facecast: stopping\n");
  fc_server_destroy(srv);
  return FC_EXIT_OK;
}

int fc_cmd_serve(int argc, char **argv) { return fc_cli_serve(argc, argv, 0); }
