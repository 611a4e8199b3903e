#include "tools/ddl_sim/trace.h"

#include <algorithm>
#include <map>
#include <vector>

#include "lib/common/status.h"

namespace ddl_sim {

void write_chrome_trace(const SimResult &result, std::ostream &out) {
  std::vector<TracedStep> steps = result.trace;
  std::sort(steps.begin(), steps.end(), [](const TracedStep &a, const TracedStep &b) {
    return a.rank != b.rank ? a.rank < b.rank : a.ready < b.ready;
  });
  out << "{\"displayTimeUnit\": \"ns\", \"traceEvents\": [\n";
  std::map<int, std::vector<double>> rows_free_at;  // per rank: when each row's last step ends
  const char *separator = "";
  for (const TracedStep &s : steps) {
    std::vector<double> &rows = rows_free_at[s.rank];
    if (rows.empty())
      out << separator
          << ddl::strprintf(
                 "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": %d, "
                 "\"args\": {\"name\": \"rank %d\"}}",
                 s.rank, s.rank);
    separator = ",\n";
    size_t row = 0;
    while (row < rows.size() && rows[row] > s.ready) ++row;
    if (row == rows.size()) rows.push_back(0);
    rows[row] = s.done;
    std::string name = ddl::step_kind_text(s.kind);
    if (s.peer >= 0) name += ddl::strprintf(" %d", s.peer);
    out << separator
        << ddl::strprintf(
               "{\"ph\": \"X\", \"name\": \"%s\", \"pid\": %d, \"tid\": %zu, "
               "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"bytes\": %.0f, \"step\": %u}}",
               name.c_str(), s.rank, row, s.ready * 1e6, (s.done - s.ready) * 1e6, s.bytes, s.step);
  }
  out << "\n]}\n";
}

}  // namespace ddl_sim
