/* The tracer behind -finstrument-functions: an instrumented function calls
 * __cyg_profile_func_enter on entry and __cyg_profile_func_exit on return, with its own address.
 * Between path_trace_begin() and path_trace_end(path), the calling thread's calls are kept in
 * memory, so that no I/O of the tracer's own runs inside the traced call; path_trace_end writes
 * them out: first /proc/self/maps as "M" lines (to turn run-time addresses into addresses in
 * each library), then one "E ADDRESS" or "X ADDRESS" line per entry or exit.
 * Other threads (a progress thread) are not recorded: the path is the caller's.
 * This file is compiled without -finstrument-functions, and every function here says so too. */
#include <stdio.h>
#include <stdlib.h>

#define NOT_TRACED __attribute__((no_instrument_function))
/* 8 M events: the path to the payload is hundreds of calls, but a trace runs on to
 * path_trace_end through the payload's own calls (an 8 MB reduction's), which are not needed. */
#define MAX_EVENTS (8u << 20)

struct event {
  char kind; /* 'E' entry, 'X' exit */
  void *function;
};
static struct event *events;
static size_t event_count, events_dropped;
static __thread int tracing;

NOT_TRACED static void record(char kind, void *function) {
  if (!tracing) return;
  if (event_count < MAX_EVENTS)
    events[event_count++] = (struct event){kind, function};
  else
    ++events_dropped;
}

NOT_TRACED void __cyg_profile_func_enter(void *function, void *call_site) {
  (void)call_site;
  record('E', function);
}

NOT_TRACED void __cyg_profile_func_exit(void *function, void *call_site) {
  (void)call_site;
  record('X', function);
}

NOT_TRACED void path_trace_begin(void) {
  if (!events) events = malloc(sizeof *events * MAX_EVENTS);
  if (!events) {
    perror("path_trace_begin");
    exit(1);
  }
  event_count = events_dropped = 0;
  tracing = 1;
}

NOT_TRACED void path_trace_end(const char *path) {
  tracing = 0;
  FILE *out = fopen(path, "w");
  if (!out) {
    perror(path);
    exit(1);
  }
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[4096];
  while (maps && fgets(line, sizeof line, maps)) fprintf(out, "M %s", line);
  if (maps) fclose(maps);
  for (size_t i = 0; i < event_count; ++i)
    fprintf(out, "%c %p\n", events[i].kind, events[i].function);
  fprintf(out, "D %zu\n", events_dropped); /* events past MAX_EVENTS, lost */
  fclose(out);
}
