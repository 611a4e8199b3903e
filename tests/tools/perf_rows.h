// The table ddl_perf prints, as the tools' tests read it.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace ddltest {

// The table's rows: lines that are not comments, split into their 13 columns.
inline std::vector<std::vector<std::string>> perf_rows(const std::string &out) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::vector<std::string> row;
    for (std::string field; fields >> field;) row.push_back(field);
    rows.push_back(row);
  }
  return rows;
}

}  // namespace ddltest
