// Trace export: the traced ranks' steps (SimResult::trace) as a Chrome trace (the JSON of
// chrome://tracing and ui.perfetto.dev), to see where a schedule's time goes: one process per
// rank, each step a slice from when its dependencies were done to when it was, named by kind
// and peer ("send to 12"), its bytes and step index as arguments. Steps that overlap go on
// separate rows (threads) of their rank, each step on the first row free at its start.
#pragma once

#include <ostream>

#include "tools/ddl_sim/simulator.h"

namespace ddl_sim {

void write_chrome_trace(const SimResult &result, std::ostream &out);

}  // namespace ddl_sim
