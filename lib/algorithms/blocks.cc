#include "lib/algorithms/blocks.h"

#include <algorithm>

namespace ddl {

BlockSplit::BlockSplit(size_t count, int nblocks)
    : base_(count / static_cast<size_t>(nblocks)),
      remainder_(count % static_cast<size_t>(nblocks)) {}

Extent BlockSplit::block(int b) const {
  size_t ub = static_cast<size_t>(b);
  Extent e;
  e.offset = ub * base_ + std::min(ub, remainder_);
  e.count = base_ + (ub < remainder_ ? 1 : 0);
  return e;
}

ChunkSplit::ChunkSplit(size_t max_block, size_t chunk_elems) {
  if (chunk_elems == 0 || max_block <= chunk_elems) {
    chunks_ = 1;
    chunk_ = max_block;
    return;
  }
  size_t n = (max_block + chunk_elems - 1) / chunk_elems;
  chunks_ = static_cast<int>(n);
  chunk_ = (max_block + n - 1) / n;  // even out the chunks
}

Extent ChunkSplit::chunk(const Extent &block, int c) const {
  size_t begin = std::min(block.count, static_cast<size_t>(c) * chunk_);
  size_t end = std::min(block.count, begin + chunk_);
  return Extent{block.offset + begin, end - begin};
}

}  // namespace ddl
