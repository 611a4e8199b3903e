// Alltoall by pairwise exchange: at round k = 1..n-1 rank r sends its block for rank r+k and
// receives the block of rank r-k. Every round's receives are posted at once, and its sends
// too, except that sends to other hosts go to at most two of them at once
// (NetworkSendWindow, schedule.h); the rounds' order spreads the load, so that no rank is
// every other rank's first destination. Each pair exchanges exactly one message, even an empty one:
// a count that one side thinks is zero and the other does not is then a size error naming
// both ranks, not a wait until the deadline.
//
// The same schedule serves alltoallv (a count and displacement per peer, BlockLayout). In
// place (MPI_IN_PLACE) the blocks to send are read from a copy of the buffer taken first, as
// the receives overwrite it.
//
// Cost: n-1 messages in and out per rank, in flight together: the bytes leave through the
// rank's link at its rate; across hosts each host's link carries what its ranks send to other
// hosts, which no algorithm can lower (only the message count, by aggregating per host).
#pragma once

#include "lib/algorithms/schedule.h"

namespace ddl {

void build_pairwise_alltoall(const CollectiveArgs &args, Schedule *schedule);

// Allgatherv (MPI_Allgatherv, torch's all_gather of tensors of different sizes) the same
// way: at round k rank r sends its one block (CollectiveArgs::count elements) to rank r+k and
// receives rank r-k's (recv_counts[r-k] at recv_displs[r-k]); the same bytes per rank as a
// ring, in flight together (to at most two other hosts at a time). In place (MPI_IN_PLACE)
// the block is already at recv_displs[r] of the output, where no receive writes.
void build_pairwise_allgatherv(const CollectiveArgs &args, Schedule *schedule);

// Reduce_scatterv (MPI_Reduce_scatter, torch's reduce_scatter of blocks of different sizes):
// at round k rank r sends its block for rank r+k and adds rank r-k's operand of its own block
// into its output, the operands in rank r-1, r-2, ... order through a few staging slots. In
// place (the output is the input's own block) the other blocks are still read from the input,
// and only the own block is written.
void build_pairwise_reduce_scatterv(const CollectiveArgs &args, Schedule *schedule);

}  // namespace ddl
