// Starts the ranks of a local job and supervises them until every one is gone.
#pragma once

#include "launch_options.h"

namespace ddlrun {

// Runs the job and returns ddlrun's exit status: 0 when every rank exited 0; else the first
// failing rank's exit code (128+signal if it was killed), 124 after --timeout, 128+signal
// when ddlrun itself was told to stop, 1 when the job could not be started.
int run_job(const LaunchOptions &options);

}  // namespace ddlrun
