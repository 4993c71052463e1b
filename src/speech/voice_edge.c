/* The Edge read-aloud provider (voice.h): one WebSocket per utterance, as Edge itself does.
 *
 *   → upgrade to {url}&ConnectionId=…&Sec-MS-GEC=…&Sec-MS-GEC-Version=…, with the headers of
 *     Edge's extension (Origin, User-Agent, a random muid cookie)
 *   → text "speech.config" (MP3 24 kHz 48 kbit/s: the one format the service still serves)
 *   → text "ssml" (the utterance)
 *   ← text turn.start / response / audio.metadata (ignored), binary audio frames (2-byte
 *     header length, headers, MP3 bytes), text turn.end: done
 *
 * The exchange runs synchronously on converse/wsc.h (bounded waits, cancellable at once). MP3
 * frames are pushed into a GStreamer decoder as they come and what it has decoded goes on at
 * once. */
#include "converse/wsc.h"
#include "facecast/error.h"
#include "speech/voice_internal.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

typedef struct edge_call {
  const fc_voice *v;
  voice_out *o;
} edge_call;

static int fail(const fc_voice *v, const char *what) {
  return fc_error_set(FC_EREMOTE, "edge TTS at %s: %s", v->shown, what);
}

/* An error of ours as the service's failure, naming it. */
static int as_fail(const fc_voice *v, int err) {
  if (err == FC_ECANCELED) return err;
  char *why = g_strdup(fc_error_detail(err));
  err = fail(v, why);
  g_free(why);
  return err;
}

/* "Thu Jan 01 2026 00:00:00 GMT+0000 (Coordinated Universal Time)" */
static void js_date(char *out, size_t cap) {
  time_t now = time(NULL);
  struct tm tm;
  gmtime_r(&now, &tm);
  static const char *const wd[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char *const mo[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                   "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  snprintf(out, cap, "%s %s %02d %04d %02d:%02d:%02d GMT+0000 (Coordinated Universal Time)",
           wd[tm.tm_wday], mo[tm.tm_mon], tm.tm_mday, tm.tm_year + 1900, tm.tm_hour, tm.tm_min,
           tm.tm_sec);
}

static void hex_id(char *out, int upper) { /* 32 hex digits of 16 random bytes */
  for (int i = 0; i < 16; i++)
    snprintf(out + 2 * i, 3, upper ? "%02X" : "%02x", (unsigned)g_random_int_range(0, 256));
}

static int on_message(void *user, int binary, const uint8_t *d, size_t n) {
  edge_call *c = user;
  int err;
  if (binary) {
    const uint8_t *mp3;
    size_t k;
    if ((err = fc_edge_binary(d, n, &mp3, &k)) || (k && (err = voice_out_mp3(c->o, mp3, k))))
      return as_fail(c->v, err);
    return 0;
  }
  char path[64];
  if ((err = fc_edge_text_path((const char *)d, n, path, sizeof path))) return as_fail(c->v, err);
  if (!strcmp(path, "turn.end")) return 1;
  if (strcmp(path, "turn.start") && strcmp(path, "response") && strcmp(path, "audio.metadata")) {
    char what[128];
    snprintf(what, sizeof what, "an unknown message '%s'", path);
    return fail(c->v, what);
  }
  return 0;
}

static void send_text(fc_wsc *w, const char *path, const char *type, const char *body) {
  char date[96], id[33];
  js_date(date, sizeof date);
  hex_id(id, 0);
  /* the ssml message's timestamp ends in a 'Z', as Edge sends it */
  char *m = !strcmp(path, "ssml")
                ? g_strdup_printf("X-RequestId:%s\r\nContent-Type:%s\r\nX-Timestamp:%sZ\r\n"
                                  "Path:%s\r\n\r\n%s",
                                  id, type, date, path, body)
                : g_strdup_printf("X-Timestamp:%s\r\nContent-Type:%s\r\nPath:%s\r\n\r\n%s\r\n",
                                  date, type, path, body);
  fc_wsc_send_text(w, m);
  g_free(m);
}

int voice_edge_speak(const fc_voice *v, const char *voice, const char *text, voice_out *o) {
  char gec[65], conn_id[33], muid[33], cookie[48], who[512];
  fc_edge_gec((int64_t)time(NULL), gec);
  hex_id(conn_id, 0);
  hex_id(muid, 1);
  snprintf(cookie, sizeof cookie, "muid=%s;", muid);
  snprintf(who, sizeof who, "edge TTS at %s", v->shown);
  char *url = g_strdup_printf("%s%cConnectionId=%s&Sec-MS-GEC=%s&Sec-MS-GEC-Version=%s", v->url,
                              strchr(v->url, '?') ? '&' : '?', conn_id, gec, v->edge_version);
  SoupMessage *m = soup_message_new("GET", url);
  g_free(url);
  if (!m) return fail(v, "bad URL");
  SoupMessageHeaders *h = soup_message_get_request_headers(m);
  soup_message_headers_replace(h, "Pragma", "no-cache");
  soup_message_headers_replace(h, "Cache-Control", "no-cache");
  soup_message_headers_replace(h, "User-Agent",
                               "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 "
                               "(KHTML, like Gecko) Chrome/143.0.0.0 Safari/537.36 Edg/143.0.0.0");
  soup_message_headers_replace(h, "Accept-Language", "en-US,en;q=0.9");
  soup_message_headers_replace(h, "Cookie", cookie);
  int err;
  fc_wsc *w = fc_wsc_connect(m, "chrome-extension://jdiccldimpdaibmpdkjnbmckianbfold", NULL,
                             v->timeout_s, o->cancel, who, &err);
  g_object_unref(m);
  if (w) {
    send_text(w, "speech.config", "application/json; charset=utf-8",
              "{\"context\":{\"synthesis\":{\"audio\":{\"metadataoptions\":{"
              "\"sentenceBoundaryEnabled\":\"false\",\"wordBoundaryEnabled\":\"true\"},"
              "\"outputFormat\":\"audio-24khz-48kbitrate-mono-mp3\"}}}}");
    char *ssml = fc_edge_ssml(text, voice);
    send_text(w, "ssml", "application/ssml+xml", ssml);
    g_free(ssml);
    edge_call c = {v, o};
    err = fc_wsc_run(w, on_message, &c);
    fc_wsc_close(w);
  }
  /* what came before a failure is still spoken: the decoder gives up what it holds */
  if (err != FC_ECANCELED) {
    char *why = err ? g_strdup(fc_error_detail(err)) : NULL;
    int ferr = voice_out_finish(o);
    if (err)
      err = fc_error_set(err, "%s", why); /* the first failure is the one to tell */
    else if (ferr)
      err = as_fail(v, ferr);
    g_free(why);
  }
  return err;
}
