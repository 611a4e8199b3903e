// The order in which ring and chain schedules visit the ranks: each host's ranks together
// (and, with more tiers, each rack's hosts together), so that a ring crosses every host
// boundary exactly once whatever the placement. Rank order is that order only when ranks are
// numbered host by host (ddlrun -H, mpirun by slot); srun's cyclic distribution or a
// communicator split by key numbers hosts round-robin, and a ring in rank order would then
// cross the network at every hop, sending each block over each host link several times.
#pragma once

#include <vector>

#include "lib/algorithms/schedule.h"

namespace ddl {

class RingOrder {
 public:
  // `first` leads the order, its groups first at every tier (a broadcast's root; -1: the
  // order of the groups' lowest ranks). On one host (no tiers, or args.hosts 1): rank order
  // rotated to start at `first`, exactly as before.
  RingOrder(const CollectiveArgs &args, int first = -1);
  int position_of(int rank) const { return position_[rank]; }
  int rank_at(int position) const { return rank_[ring_index(position, n_)]; }
  // This rank's neighbours along the order.
  int next(int rank) const { return rank_at(position_[rank] + 1); }
  int prev(int rank) const { return rank_at(position_[rank] - 1); }

 private:
  int n_;
  std::vector<int> rank_;      // by position
  std::vector<int> position_;  // by rank
};

}  // namespace ddl
