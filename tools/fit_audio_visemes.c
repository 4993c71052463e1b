/* Fits the audio viseme classifier (src/lipsync/audio_visemes.c) and writes its coefficient
 * table: build/fit_audio_visemes > src/lipsync/audio_visemes_model.h (the report goes to stderr).
 *
 * Data: speech the project makes itself. espeak-ng (fc_tts_speak) synthesises the sentences
 * below in two English voices at three rates, each utterance at a random gain with a little
 * white noise (a microphone is never silent) between 0.4 s of leading and trailing quiet. The
 * label of a frame is what the TTS path would ask for: fc_viseme_target of espeak's own phoneme
 * timing (closed where the frame is silent). Features are fc_avis_features run over the audio
 * frame by frame exactly as the tracker runs it. Silent frames are closed by the classifier's
 * gate, so they are left out of the fit.
 *
 * Model: per output (open, wide, round) a ridge regression on standardised features (normal
 * equations in double, Cholesky), its weights then scaled so predictions spread like the labels.
 * The held-out sentences (never in the fit) give the reported
 * correlations: raw per-frame predictions against labels, and the viseme tracker's smoothed
 * output from audio against its output from the phonemes, as a render would show them.
 * Deterministic: a fixed seed, no input files, nothing written but stdout. */
#include "lipsync/audio_visemes.h"
#include "facecast/error.h"
#include "facecast/tts.h"
#include "lipsync/visemes.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *train[] = {
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "Six spoons of fresh snow peas, five thick slabs of blue cheese, and maybe a snack.",
    "We also need a small plastic snake and a big toy frog for the kids.",
    "She can scoop these things into three red bags, and we will go meet her Wednesday.",
    "When the sunlight strikes raindrops in the air, they act as a prism and form a rainbow.",
    "The rainbow is a division of white light into many beautiful colors.",
    "These take the shape of a long round arch, with its path high above.",
    "How much wood would a woodchuck chuck if a woodchuck could chuck wood?",
    "Peter Piper picked a peck of pickled peppers.",
    "Good morning, how are you doing today?",
    "I would like a cup of coffee with milk, please.",
    "Would you open the window? It is very warm in here.",
    "My mother bought a new umbrella because it rained all week.",
    "Who knew the moon would loom so huge over the pool?",
    "You should choose blue shoes for the school music show.",
    "Each evening we eat cheese, beans and green peas.",
    "The boy put the book on the wooden table in the room.",
    "Father and mother are in the garden with their daughter.",
    "Our neighbour owns a boat that floats on the cold ocean.",
    "Many people think that it is easy to learn a new language.",
    "Video calls let us see the faces of the people we love.",
    "Thank you very much for your patience and your kind help.",
    "Open your mouth wide and say ah, said the doctor.",
    "Oh no, the old oak tree fell over in the storm.",
    "Why would anyone wait outside in such awful weather?",
    "Bob and Mabel baked a big batch of brown bread.",
    "Vivid violet flowers filled the valley every February.",
    "Think about the three things that matter the most.",
    "A large jar of jam and a cheap chair were left in the hall.",
    "Zebras and lions live together in the wide open plains.",
    "Measure twice and cut once, the carpenter always says.",
    "Her shoes were wet after she walked through the shallow water.",
    "The kitchen smells of cinnamon, butter and warm apples.",
    "Every morning at seven he runs along the river with his dog.",
    "Can you hear me now? Yes, I can hear you very well.",
    "The meeting has been moved to Thursday afternoon at four.",
    "Computers process information faster than any human can.",
    "Welcome to the show, we are happy to have you here tonight.",
    "Numbers like one, two, three, four and five are easy to say.",
    "The weather forecast promises sunshine for the whole weekend.",
    "Please remember to switch off the lights when you leave.",
    "Music, movies and books help us to understand each other.",
    "I am looking forward to our trip to the mountains in June.",
    "Few foolish youths rule the huge new zoo.",
    "The cat sat on the mat and looked at the bat.",
    "I see three green trees in the field near the sea.",
    "Go slowly over the old stone road to the coast.",
    "Hello, my name is Anna and I work as an engineer.",
    "Could you tell me where the nearest train station is?",
    "After lunch we walked to the park and fed the ducks.",
    "A warm wind blew over the wet wheat fields.",
    "Mum made more muffins for the Monday morning meeting.",
    "The teacher asked the pupils to read the first chapter.",
    "Fresh fish and chips are sold at the little shop by the pier.",
    "Yesterday I bought a yellow yacht and sailed away.",
    "Quiet quails quickly quit the quarry.",
    "This is the end of the news, thank you for listening.",
    "Big pots and pans were stacked up by the back door.",
    "Awful autumn storms brought down all the tall poles.",
};

static const char *held_out[] = {
    "Hello, I am the default avatar of facecast.",
    "Tomorrow we will visit the museum and then have dinner by the harbour.",
    "Please put the blue bowl back on the top shelf.",
    "Would you like to hear a short story about a brave little mouse?",
    "The old man opened the heavy wooden door very slowly.",
    "Five friendly farmers feed fifty fat sheep.",
    "I wonder why the sky is so bright this evening.",
    "Our team won the match after a long and difficult season.",
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct set {
  float *x, *y; /* rows of FC_AVIS_NFEAT features and 3 labels */
  size_t n, cap;
} set;

static int add_row(set *s, const float *f, fc_mouth m) {
  if (s->n == s->cap) {
    size_t c = s->cap ? 2 * s->cap : 4096;
    float *x = realloc(s->x, c * FC_AVIS_NFEAT * sizeof(float)), *y = x ? realloc(s->y, c * 3 * sizeof(float)) : NULL;
    if (x) s->x = x;
    if (!x || !y) return -1;
    s->y = y, s->cap = c;
  }
  memcpy(s->x + s->n * FC_AVIS_NFEAT, f, FC_AVIS_NFEAT * sizeof(float));
  s->y[s->n * 3] = m.open, s->y[s->n * 3 + 1] = m.wide, s->y[s->n * 3 + 2] = m.round;
  s->n++;
  return 0;
}

/* One utterance with leading/trailing quiet, gain and noise; frames → rows (non-silent). */
static int synth(const char *text, const char *voice, int rate, set *s) {
  fc_tts_params tp = {.voice = voice, .rate_wpm = rate};
  fc_speech sp;
  int err = fc_tts_speak(text, &tp, &sp);
  if (err) return err;
  const int spf = FC_SAMPLES_PER_FRAME, lead = 6400;
  size_t n = ((lead + sp.audio.n + lead) / spf + 1) * spf;
  float *pcm = calloc(n, sizeof(float));
  if (!pcm) return fc_speech_free(&sp), FC_ENOMEM;
  float gain = (float)(0.15 + 0.85 * urand()), noise = (float)(0.004 * urand());
  for (size_t i = 0; i < n; i++) {
    float v = i >= lead && i - lead < sp.audio.n ? sp.audio.samples[i - lead] : 0;
    pcm[i] = gain * v + noise * (float)(urand() * 2 - 1) * 1.732f;
  }
  fc_avis a;
  fc_avis_init(&a);
  for (size_t f = 0; f + spf <= n; f += spf) {
    float feat[FC_AVIS_NFEAT];
    int silent;
    fc_avis_features(&a, pcm + f, feat, &silent);
    if (silent) continue;
    int64_t start = (int64_t)f - lead;
    fc_mouth m = fc_viseme_target(sp.ph, sp.n_ph, start, start + spf);
    if (add_row(s, feat, m)) return free(pcm), fc_speech_free(&sp), FC_ENOMEM;
  }
  free(pcm);
  fc_speech_free(&sp);
  return 0;
}

#define NP (FC_AVIS_NFEAT + 1)

/* Solves (A + λI) w = b for a symmetric positive definite NP×NP system (Cholesky). */
static int solve(double A[NP][NP], double b[NP], double w[NP]) {
  double L[NP][NP] = {{0}};
  for (int i = 0; i < NP; i++)
    for (int j = 0; j <= i; j++) {
      double s = A[i][j];
      for (int k = 0; k < j; k++) s -= L[i][k] * L[j][k];
      if (i == j) {
        if (s <= 0) return -1;
        L[i][i] = sqrt(s);
      } else {
        L[i][j] = s / L[j][j];
      }
    }
  double z[NP];
  for (int i = 0; i < NP; i++) {
    double s = b[i];
    for (int k = 0; k < i; k++) s -= L[i][k] * z[k];
    z[i] = s / L[i][i];
  }
  for (int i = NP - 1; i >= 0; i--) {
    double s = z[i];
    for (int k = i + 1; k < NP; k++) s -= L[k][i] * w[k];
    w[i] = s / L[i][i];
  }
  return 0;
}

static double corr(const double *a, const double *b, size_t n) {
  double ma = 0, mb = 0, sab = 0, saa = 0, sbb = 0;
  for (size_t i = 0; i < n; i++) ma += a[i] / n, mb += b[i] / n;
  for (size_t i = 0; i < n; i++) {
    sab += (a[i] - ma) * (b[i] - mb);
    saa += (a[i] - ma) * (a[i] - ma), sbb += (b[i] - mb) * (b[i] - mb);
  }
  return saa > 0 && sbb > 0 ? sab / sqrt(saa * sbb) : 0;
}

/* The held-out report: the tracker from audio against the tracker from phonemes. */
static void report_tracker(void) {
  static double ao[3][20000], po[3][20000];
  size_t n = 0;
  for (size_t s = 0; s < sizeof held_out / sizeof *held_out; s++) {
    fc_speech sp;
    if (fc_tts_speak(held_out[s], NULL, &sp)) continue;
    fc_viseme_tracker ta, tp;
    fc_viseme_tracker_init(&ta);
    fc_viseme_tracker_init(&tp);
    for (size_t f = 0; f + FC_SAMPLES_PER_FRAME <= sp.audio.n && n < 20000; f += FC_SAMPLES_PER_FRAME, n++) {
      fc_mouth a = fc_viseme_tracker_push(&ta, sp.audio.samples + f, (int64_t)f, NULL, 0);
      fc_mouth p = fc_viseme_tracker_push(&tp, sp.audio.samples + f, (int64_t)f, sp.ph, sp.n_ph);
      ao[0][n] = a.open, ao[1][n] = a.wide, ao[2][n] = a.round;
      po[0][n] = p.open, po[1][n] = p.wide, po[2][n] = p.round;
    }
    fc_speech_free(&sp);
  }
  fprintf(stderr, "held-out, tracker from audio vs from phonemes (%zu frames): open %.3f wide %.3f round %.3f\n",
          n, corr(ao[0], po[0], n), corr(ao[1], po[1], n), corr(ao[2], po[2], n));
}

int main(int argc, char **argv) {
  double lambda = argc > 1 ? atof(argv[1]) : 10.0;
  set tr = {0}, te = {0};
  static const char *voices[] = {"en", "en-us"};
  static const int rates[] = {150, 175, 210};
  for (size_t s = 0; s < sizeof train / sizeof *train; s++)
    for (int v = 0; v < 2; v++)
      for (int r = 0; r < 3; r++)
        if (synth(train[s], voices[v], rates[r], &tr)) {
          fprintf(stderr, "synthesis failed: %s\n", fc_error_detail(-1));
          return 1;
        }
  for (size_t s = 0; s < sizeof held_out / sizeof *held_out; s++)
    if (synth(held_out[s], "en", 175, &te)) return 1;

  /* standardise on the training set */
  double mean[FC_AVIS_NFEAT] = {0}, sd[FC_AVIS_NFEAT] = {0};
  for (size_t i = 0; i < tr.n; i++)
    for (int k = 0; k < FC_AVIS_NFEAT; k++) mean[k] += tr.x[i * FC_AVIS_NFEAT + k] / tr.n;
  for (size_t i = 0; i < tr.n; i++)
    for (int k = 0; k < FC_AVIS_NFEAT; k++) {
      double d = tr.x[i * FC_AVIS_NFEAT + k] - mean[k];
      sd[k] += d * d / tr.n;
    }
  for (int k = 0; k < FC_AVIS_NFEAT; k++) sd[k] = sd[k] > 1e-12 ? sqrt(sd[k]) : 1;

  static double A[NP][NP], b[3][NP], w[3][NP];
  for (size_t i = 0; i < tr.n; i++) {
    double z[NP];
    for (int k = 0; k < FC_AVIS_NFEAT; k++) z[k] = (tr.x[i * FC_AVIS_NFEAT + k] - mean[k]) / sd[k];
    z[FC_AVIS_NFEAT] = 1;
    for (int j = 0; j < NP; j++) {
      for (int k = 0; k < NP; k++) A[j][k] += z[j] * z[k];
      for (int o = 0; o < 3; o++) b[o][j] += z[j] * tr.y[i * 3 + o];
    }
  }
  for (int j = 0; j < FC_AVIS_NFEAT; j++) A[j][j] += lambda; /* the bias is not shrunk */
  for (int o = 0; o < 3; o++)
    if (solve(A, b[o], w[o])) {
      fprintf(stderr, "singular system\n");
      return 1;
    }

  /* A ridge fit under uncertainty shrinks towards the mean: the mouth would mumble. Scale each
   * output's weights so its training predictions spread as far as the labels do (the bias is
   * the mean of both, features being centred); correlation is unchanged. */
  for (int o = 0; o < 3; o++) {
    double vp = 0, ml = 0, vl = 0;
    for (size_t i = 0; i < tr.n; i++) ml += tr.y[i * 3 + o] / tr.n;
    for (size_t i = 0; i < tr.n; i++) {
      double y = 0;
      for (int k = 0; k < FC_AVIS_NFEAT; k++) y += w[o][k] * (tr.x[i * FC_AVIS_NFEAT + k] - mean[k]) / sd[k];
      vp += y * y / tr.n;
      vl += (tr.y[i * 3 + o] - ml) * (tr.y[i * 3 + o] - ml) / tr.n;
    }
    double g = vp > 0 ? sqrt(vl / vp) : 1;
    for (int k = 0; k < FC_AVIS_NFEAT; k++) w[o][k] *= g;
    fprintf(stderr, "output %d: spread gain %.3f\n", o, g);
  }

  printf("/* Generated by tools/fit_audio_visemes.c (ridge lambda %g, %zu training frames of\n"
         " * espeak-ng speech): do not edit. */\n"
         "#ifndef FC_AUDIO_VISEMES_MODEL_H\n#define FC_AUDIO_VISEMES_MODEL_H\n\n"
         "#include \"lipsync/audio_visemes.h\"\n\n",
         lambda, tr.n);
  printf("static const float avis_mean[FC_AVIS_NFEAT] = {");
  for (int k = 0; k < FC_AVIS_NFEAT; k++) printf("%s%.6gf", k ? ", " : "", mean[k]);
  printf("};\nstatic const float avis_scale[FC_AVIS_NFEAT] = {");
  for (int k = 0; k < FC_AVIS_NFEAT; k++) printf("%s%.6gf", k ? ", " : "", 1 / sd[k]);
  printf("};\nstatic const float avis_w[3][FC_AVIS_NFEAT + 1] = {\n");
  for (int o = 0; o < 3; o++) {
    printf("    {");
    for (int k = 0; k < NP; k++) printf("%s%.6gf", k ? ", " : "", w[o][k]);
    printf("},\n");
  }
  printf("};\n\n#endif\n");

  /* per-frame correlation of the fitted model on both sets (non-silent frames) */
  set *sets[2] = {&tr, &te};
  for (int si = 0; si < 2; si++) {
    set *s = sets[si];
    double *p = malloc(s->n * sizeof(double)), *l = malloc(s->n * sizeof(double));
    if (!p || !l) return 1;
    fprintf(stderr, "%s (%zu frames), per frame:", si ? "held-out" : "training", s->n);
    for (int o = 0; o < 3; o++) {
      for (size_t i = 0; i < s->n; i++) {
        double y = w[o][FC_AVIS_NFEAT];
        for (int k = 0; k < FC_AVIS_NFEAT; k++) y += w[o][k] * (s->x[i * FC_AVIS_NFEAT + k] - mean[k]) / sd[k];
        p[i] = y < 0 ? 0 : y > 1 ? 1 : y;
        l[i] = s->y[i * 3 + o];
      }
      fprintf(stderr, " %s %.3f", o == 0 ? "open" : o == 1 ? "wide" : "round", corr(p, l, s->n));
    }
    fprintf(stderr, "\n");
    free(p), free(l);
  }
  report_tracker(); /* meaningful once the library carries this table */
  free(tr.x), free(tr.y), free(te.x), free(te.y);
  return 0;
}
