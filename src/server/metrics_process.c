/* The process' own figures in /metrics, under the names Prometheus' client libraries use
 * (process_cpu_seconds_total, process_resident_memory_bytes, ...), so that dashboards and alerts
 * written for any exporter read facecast's too: CPU in use beside the frames made, the kernel's
 * resident size beside malloc's heap (facecast_heap_bytes), descriptors beside their limit
 * (serve raises it at start; running out refuses connections). Read from /proc at each scrape,
 * never on a frame's path; a figure /proc does not give is left out, not made up. */
#include "server/internal.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* /proc/self/stat's fields after the command's closing parenthesis (which may itself hold
 * spaces and parentheses): utime, stime, starttime (clock ticks), vsize (bytes), rss (pages). */
static int self_stat(unsigned long long *utime, unsigned long long *stime,
                     unsigned long long *start, unsigned long long *vsize, long long *rss) {
  char buf[1024];
  FILE *f = fopen("/proc/self/stat", "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char *p = strrchr(buf, ')');
  if (!p) return -1;
  /* fields 3..24: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime
   * stime cutime cstime priority nice threads itrealvalue starttime vsize rss */
  int got = sscanf(p + 1,
                   " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d"
                   " %*d %llu %llu %lld",
                   utime, stime, start, vsize, rss);
  return got == 5 ? 0 : -1;
}

/* The boot time (seconds since the epoch) from /proc/stat's btime; 0 when absent. */
static long long boot_time(void) {
  char line[256];
  long long bt = 0;
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "btime %lld", &bt) == 1) break;
  fclose(f);
  return bt;
}

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n - 1; /* the descriptor of the listing itself */
}

static void sample(GString *o, const char *name, const char *type, const char *help, double v) {
  g_string_append_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.15g\n", name, help, name, type,
                         name, v);
}

void fc_metrics_process(GString *o) {
  unsigned long long ut, st, start, vsize;
  long long rss;
  const long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  if (self_stat(&ut, &st, &start, &vsize, &rss) == 0 && tick > 0 && page > 0) {
    sample(o, "process_cpu_seconds_total", "counter", "User and system CPU time, in seconds.",
          (double)(ut + st) / tick);
    sample(o, "process_resident_memory_bytes", "gauge", "Resident memory size, in bytes.",
          (double)rss * page);
    sample(o, "process_virtual_memory_bytes", "gauge", "Virtual memory size, in bytes.",
          (double)vsize);
    const long long bt = boot_time();
    if (bt)
      sample(o, "process_start_time_seconds", "gauge",
             "Start time of the process since the epoch, in seconds.", bt + (double)start / tick);
  }
  const int fds = open_fds();
  if (fds >= 0) sample(o, "process_open_fds", "gauge", "Open file descriptors.", fds);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
    sample(o, "process_max_fds", "gauge", "The limit on open file descriptors.",
          (double)rl.rlim_cur);
}
