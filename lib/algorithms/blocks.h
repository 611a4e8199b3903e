// How a buffer is cut into per-rank blocks and each block into pipeline chunks. Shared by
// the algorithms so that sender and receiver always agree on every range.
#pragma once

#include <cstddef>

namespace ddl {

struct Extent {
  size_t offset = 0;
  size_t count = 0;
};

// `count` elements cut into `nblocks` near-equal blocks; the first count % nblocks blocks
// hold one element more.
class BlockSplit {
 public:
  BlockSplit(size_t count, int nblocks);
  Extent block(int b) const;
  size_t max_block() const { return base_ + (remainder_ ? 1 : 0); }

 private:
  size_t base_;
  size_t remainder_;
};

// Every block cut into the same number of chunks of `chunk` elements (the last chunk of a
// block may be shorter, or empty for a short block), so chunk c of any block lies at the
// same offset within it.
class ChunkSplit {
 public:
  // max_block: the longest block; chunk_elems: wanted chunk size, 0 = a single chunk.
  ChunkSplit(size_t max_block, size_t chunk_elems);
  int chunks() const { return chunks_; }
  size_t chunk_elems() const { return chunk_; }
  // Chunk c of a block [block.offset, block.offset + block.count).
  Extent chunk(const Extent &block, int c) const;

 private:
  int chunks_;
  size_t chunk_;
};

}  // namespace ddl
