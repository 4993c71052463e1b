/* facecast avatar: create, list and inspect avatar packs.
 *
 *   avatar create --from VIDEO|IMAGE --id NAME [--size 96|256] [--max-size WxH] [--seconds S]
 *                 [--out-dir DIR] [--clip NAME=VIDEO ...]
 *       runs the studio (studio.h) with a progress bar on stderr (a tty gets one updating line,
 *       a pipe one line per 10 %); a refusal by the quality gate prints each reason on its own
 *       line and exits 2.
 *   avatar import DIR [--id NAME] [--size 96|256] [--out-dir DIR]
 *       a LiveTalking wav2lip avatar folder (full_imgs/, face_imgs/, coords.pkl) as a pack,
 *       LiveTalking's boxes kept (studio/ltimport.h), with the same progress bar; a folder
 *       LiveTalking would mis-play is refused with one line and exit code 2.
 *   avatar list [--dir DIR] [--json]
 *   avatar show ID|FILE [--frame N] [--json]
 *       size, frames, crop sizes, clips, the creation report, and per frame the box and the 68
 *       landmarks (all frames with --json, else only --frame N). */
#include "cli/cli.h"
#include "core/stale.h"
#include "facecast/error.h"
#include "avatar/pack.h"
#include "studio/ltimport.h"
#include "studio/studio.h"

#include <dirent.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void avatar_usage(FILE *f) {
  fputs("usage: facecast avatar create --from VIDEO|IMAGE --id NAME [--size 96|256]\n"
        "                              [--max-size WxH] [--seconds S] [--out-dir DIR]\n"
        "                              [--clip NAME=VIDEO ...]\n"
        "       facecast avatar import LIVETALKING_DIR [--id NAME] [--size 96|256]\n"
        "                              [--out-dir DIR]\n"
        "       facecast avatar list [--dir DIR] [--json]\n"
        "       facecast avatar show ID|FILE [--frame N] [--json] [--dir DIR]\n",
        f);
}

/* The progress shown on stderr: what is being done, and whether stderr is a terminal. */
typedef struct bar_state {
  int tty;
  const char *doing;
} bar_state;

static void bar(void *user, int pct) {
  const bar_state *b_st = user;
  int tty = b_st->tty;
  if (tty) {
    char b[41];
    int n = pct * 40 / 100;
    memset(b, '#', (size_t)n);
    memset(b + n, ' ', (size_t)(40 - n));
    b[40] = 0;
    fprintf(stderr, "\r%s avatar [%s] %3d%%", b_st->doing, b, pct);
    if (pct == 100) fputc('\n', stderr);
  } else if (pct % 10 == 0) {
    fprintf(stderr, "%s avatar: %d%%\n", b_st->doing, pct);
  }
}

static int parse_crop_size(const char *s, int *out) {
  char *end;
  *out = (int)strtol(s, &end, 10);
  if (*end || (*out != 96 && *out != 256))
    return fc_error_set(FC_EINVAL, "--size '%s': expected 96 or 256", s);
  return FC_OK;
}

static int create(int argc, char **argv) {
  static const struct option opts[] = {
      {"from", required_argument, 0, 'f'},    {"id", required_argument, 0, 'i'},
      {"size", required_argument, 0, 's'},    {"max-size", required_argument, 0, 'm'},
      {"seconds", required_argument, 0, 'S'}, {"out-dir", required_argument, 0, 'o'},
      {"clip", required_argument, 0, 'c'},    {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  fc_studio_params p = {0};
  int c;
  bar_state tty = {isatty(2), "creating"};
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    char *end;
    switch (c) {
    case 'f': p.from = optarg; break;
    case 'i': p.id = optarg; break;
    case 's':
      if (parse_crop_size(optarg, &p.crop_size)) return fc_cli_fail(FC_EINVAL);
      break;
    case 'm':
      if (fc_cli_parse_size(optarg, &p.max_w, &p.max_h)) return fc_cli_fail(FC_EINVAL);
      break;
    case 'S':
      p.max_seconds = strtod(optarg, &end);
      if (*end || !(p.max_seconds > 0 && p.max_seconds <= 3600)) {
        fprintf(stderr, "facecast: error: --seconds '%s': expected 0..3600\n", optarg);
        return FC_EXIT_INPUT;
      }
      break;
    case 'o': p.out_dir = optarg; break;
    case 'c': {
      char *eq = strchr(optarg, '=');
      if (!eq || eq == optarg || !eq[1] || p.nclips >= FC_STUDIO_MAX_CLIPS) {
        fprintf(stderr, "facecast: error: --clip '%s': expected NAME=FILE (at most %d)\n", optarg,
                FC_STUDIO_MAX_CLIPS);
        return FC_EXIT_INPUT;
      }
      *eq = 0;
      p.clip_name[p.nclips] = optarg, p.clip_file[p.nclips++] = eq + 1;
      break;
    }
    case 'h': avatar_usage(stdout); return FC_EXIT_OK;
    default:
      fprintf(stderr, "facecast: error: avatar create: unknown or incomplete option '%s'\n",
              argv[optind - 1]);
      return FC_EXIT_INPUT;
    }
  }
  if (!p.from || !p.id) {
    fprintf(stderr, "facecast: error: avatar create: --from FILE and --id NAME are required\n");
    return FC_EXIT_INPUT;
  }
  p.progress = bar, p.user = &tty;
  fc_studio_result res;
  /* packs a killed run was writing (core/stale.h) */
  fc_stale_sweep(p.out_dir ? p.out_dir : fc_avatar_dir(), NULL, ".fcpack.tmp.", 0);
  int err = fc_studio_create(&p, &res);
  if (tty.tty && err) fputc('\n', stderr);
  if (err == FC_ENOFACE && fc_quality_failed(&res.quality)) {
    fprintf(stderr, "facecast: error: %s: the material is not usable:\n", p.from);
    for (int r = 0; r < FC_Q_COUNT; r++)
      if (res.quality.blocking[r])
        fprintf(stderr, "  %s: %s\n", fc_quality_key(r), res.quality.message[r]);
    return FC_EXIT_INPUT;
  }
  if (err) return fc_cli_fail(err);
  printf("avatar %s: %d frames %dx%d in %.1f s (%.1f frames/s) -> %s\n", p.id, res.frames,
         res.width, res.height, res.seconds_taken,
         res.seconds_taken > 0 ? res.frames / res.seconds_taken : 0, res.path);
  return FC_EXIT_OK;
}

static int import(int argc, char **argv) {
  static const struct option opts[] = {{"id", required_argument, 0, 'i'},
                                       {"size", required_argument, 0, 's'},
                                       {"out-dir", required_argument, 0, 'o'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  fc_lt_import_params p = {0};
  bar_state tty = {isatty(2), "importing"};
  int c, err;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
    switch (c) {
    case 'i': p.id = optarg; break;
    case 's':
      if ((err = parse_crop_size(optarg, &p.crop_size))) return fc_cli_fail(err);
      break;
    case 'o': p.out_dir = optarg; break;
    case 'h': avatar_usage(stdout); return FC_EXIT_OK;
    default: return fc_cli_bad_option("avatar import", argv);
    }
  }
  if (optind != argc - 1) {
    fprintf(stderr, "facecast: error: avatar import: give one LiveTalking avatar folder\n");
    return FC_EXIT_INPUT;
  }
  p.dir = argv[optind];
  p.progress = bar, p.user = &tty;
  fc_stale_sweep(p.out_dir ? p.out_dir : fc_avatar_dir(), NULL, ".fcpack.tmp.", 0);
  fc_lt_import_result res;
  err = fc_lt_import(&p, &res);
  if (tty.tty && err) fputc('\n', stderr);
  if (err) return fc_cli_fail(err);
  printf("avatar %s: %d frames %dx%d from %s (landmarks detected in %d, from the box in %d; "
         "played forward then backward, as LiveTalking plays it) in %.1f s -> %s\n",
         res.id, res.frames, res.width, res.height, p.dir, res.detected, res.frames - res.detected,
         res.seconds_taken, res.path);
  return FC_EXIT_OK;
}

int fc_cli_lt_avatar(const char **avatar) {
  static char id[64]; /* the server keeps pointing at it */
  bar_state tty = {isatty(2), "importing"};
  fc_lt_import_params how = {.progress = bar, .user = &tty};
  int imported = 0;
  if (!*avatar) return FC_OK;
  if (fc_lt_is_avatar_dir(*avatar) || fc_avatar_id_valid(*avatar))
    fc_stale_sweep(fc_avatar_dir(), NULL, ".fcpack.tmp.", 0);
  int r = fc_lt_avatar_resolve(*avatar, &how, id, sizeof id, &imported);
  if (r < 0 && tty.tty) fputc('\n', stderr);
  if (r < 0) return r;
  if (r == 1) {
    fprintf(stderr, "facecast: LiveTalking avatar %s %s as avatar %s\n", *avatar,
            imported ? "imported" : "already imported", id);
    *avatar = id;
  }
  return FC_OK;
}

static void print_clips(const fc_pack *pk, int json) {
  int nc = fc_pack_clip_count(pk);
  for (int k = 0; k < nc; k++) {
    fc_pack_clip cl;
    if (fc_pack_get_clip(pk, k, &cl)) continue;
    if (json)
      printf("%s{\"name\":\"%s\",\"first\":%d,\"frames\":%d,\"audio_seconds\":%.2f}", k ? "," : "",
             cl.name, cl.first, cl.count, cl.audio_rate ? (double)cl.audio_frames / cl.audio_rate : 0.0);
    else
      printf("  clip %-16s frames %d..%d%s\n", cl.name, cl.first, cl.first + cl.count - 1,
             cl.audio_rate ? " with audio" : "");
  }
}

static int list(int argc, char **argv) {
  const char *dir = fc_avatar_dir();
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) json = 1;
    else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) dir = argv[++i];
    else {
      fprintf(stderr, "facecast: error: avatar list: unexpected argument '%s'\n", argv[i]);
      return FC_EXIT_INPUT;
    }
  }
  DIR *d = opendir(dir);
  if (json) printf("[");
  int n = 0;
  for (struct dirent *e; d && (e = readdir(d));) {
    size_t len = strlen(e->d_name);
    if (len < 8 || strcmp(e->d_name + len - 7, ".fcpack") != 0) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    int err;
    fc_pack *pk = fc_pack_open(path, &err);
    if (json) {
      printf("%s{\"file\":\"%s\"", n++ ? "," : "", e->d_name);
      if (pk) {
        const fc_pack_info *in = fc_pack_get_info(pk);
        printf(",\"id\":\"%s\",\"width\":%d,\"height\":%d,\"frames\":%d,\"clips\":[", in->id,
               in->width, in->height, in->frames);
        print_clips(pk, 1);
        printf("]}");
      } else {
        printf(",\"error\":\"%s\"}", fc_strerror(err));
      }
    } else if (pk) {
      const fc_pack_info *in = fc_pack_get_info(pk);
      printf("%-24s %4dx%-4d %5d frames %2d clips\n", in->id, in->width, in->height, in->frames,
             fc_pack_clip_count(pk));
      n++;
    } else {
      printf("%-24s unusable: %s\n", e->d_name, fc_error_detail(err));
      n++;
    }
    fc_pack_close(pk);
  }
  if (d) closedir(d);
  if (json) printf("]\n");
  else if (!n) printf("no avatars in %s\n", dir);
  return FC_EXIT_OK;
}

static void print_points(const fc_pack_frame *f) {
  for (int k = 0; k < FC_LANDMARKS; k++)
    printf("%s[%.1f,%.1f]", k ? "," : "", f->landmarks[k].x, f->landmarks[k].y);
}

static int show(int argc, char **argv) {
  const char *dir = fc_avatar_dir(), *idf = NULL;
  int json = 0, frame = -1;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) json = 1;
    else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) dir = argv[++i];
    else if (strcmp(argv[i], "--frame") == 0 && i + 1 < argc) {
      char *end;
      long v = strtol(argv[++i], &end, 10);
      if (*end || v < 0 || v > 100000000) {
        fprintf(stderr, "facecast: error: --frame '%s': expected a frame number\n", argv[i]);
        return FC_EXIT_INPUT;
      }
      frame = (int)v;
    } else if (argv[i][0] != '-' && !idf) idf = argv[i];
    else {
      fprintf(stderr, "facecast: error: avatar show: unexpected argument '%s'\n", argv[i]);
      return FC_EXIT_INPUT;
    }
  }
  if (!idf) {
    fprintf(stderr, "facecast: error: avatar show: which avatar? (an id or a .fcpack file)\n");
    return FC_EXIT_INPUT;
  }
  char path[4096];
  int err = fc_avatar_pack_path(dir, idf, path, sizeof path);
  fc_pack *pk = err ? NULL : fc_pack_open(path, &err);
  if (!pk) return fc_cli_fail(err);
  const fc_pack_info *in = fc_pack_get_info(pk);
  if (frame >= in->frames) {
    fprintf(stderr, "facecast: error: --frame %d: the avatar has %d frames\n", frame, in->frames);
    fc_pack_close(pk);
    return FC_EXIT_INPUT;
  }
  if (json) {
    printf("{\"id\":\"%s\",\"width\":%d,\"height\":%d,\"fps\":%d,\"frames\":%d,\"crops\":[",
           in->id, in->width, in->height, in->fps_den ? in->fps_num / in->fps_den : 0, in->frames);
    for (int k = 0; k < in->ncrops; k++) printf("%s%d", k ? "," : "", in->crop_size[k]);
    printf("],\"clips\":[");
    print_clips(pk, 1);
    printf("],\"meta\":%s,\"per_frame\":[", fc_pack_meta_json(pk));
    for (int i = frame < 0 ? 0 : frame; i < (frame < 0 ? in->frames : frame + 1); i++) {
      fc_pack_frame f;
      if (fc_pack_get_frame(pk, i, &f)) continue;
      printf("%s{\"frame\":%d,\"box\":[%d,%d,%d,%d],\"landmarks\":[", i > (frame < 0 ? 0 : frame) ? "," : "",
             i, f.box.x, f.box.y, f.box.w, f.box.h);
      print_points(&f);
      printf("]}");
    }
    printf("]}\n");
  } else {
    printf("avatar %s: %dx%d, %d frames at %d/%d fps, crops", in->id, in->width, in->height,
           in->frames, in->fps_num, in->fps_den);
    for (int k = 0; k < in->ncrops; k++) printf(" %d", in->crop_size[k]);
    printf("\n  created: %s\n", fc_pack_meta_json(pk));
    print_clips(pk, 0);
    if (frame >= 0) {
      fc_pack_frame f;
      if (!fc_pack_get_frame(pk, frame, &f)) {
        printf("  frame %d: box %d,%d %dx%d\n  landmarks: ", frame, f.box.x, f.box.y, f.box.w, f.box.h);
        print_points(&f);
        printf("\n");
      }
    }
  }
  fc_pack_close(pk);
  return FC_EXIT_OK;
}

int fc_cmd_avatar(int argc, char **argv) {
  if (argc >= 2 && strcmp(argv[1], "create") == 0) return create(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "import") == 0) return import(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "list") == 0) return list(argc - 1, argv + 1);
  if (argc >= 2 && strcmp(argv[1], "show") == 0) return show(argc - 1, argv + 1);
  if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    avatar_usage(stdout);
    return FC_EXIT_OK;
  }
  if (argc >= 2) fprintf(stderr, "facecast: error: avatar: unknown subcommand '%s'\n", argv[1]);
  avatar_usage(stderr);
  return FC_EXIT_INPUT;
}
