#include "lib/core/agreement_wire.h"

#include <algorithm>
#include <cstring>

namespace ddl {
namespace {

constexpr uint32_t kMagic = 0x64646c42;  // "ddlB": the tree's messages (the chain's were "ddlA")
constexpr size_t kMaxRendezvousBytes = 1024;

// On the wire: this header, then two bitmaps of nranks bits (the ranks covered, the
// decision's failed ranks), then the decision's rendezvous text.
struct WireHeader {
  uint32_t magic = kMagic;
  uint32_t epoch = 0;
  uint32_t kind = 0;
  int32_t from = -1;
  int32_t ballot = -1;
  int32_t nranks = 0;
  uint64_t value = 0;
  int32_t has_decision = 0;
  int32_t report_ballot = -1;
  int32_t proposer = -1;
  uint32_t rendezvous_bytes = 0;
  uint64_t decision_value = 0;
};

size_t bitmap_bytes(int nranks) {
  return (static_cast<size_t>(nranks) + 7) / 8;
}

void put_bits(std::string *bytes, size_t at, int rank) {
  (*bytes)[at + static_cast<size_t>(rank) / 8] |= static_cast<char>(1 << (rank % 8));
}

bool bit(const char *bytes, int rank) {
  return (bytes[static_cast<size_t>(rank) / 8] >> (rank % 8)) & 1;
}

}  // namespace

bool Decision::excludes(int rank) const {
  return std::binary_search(failed.begin(), failed.end(), rank);
}

bool Decision::operator==(const Decision &other) const {
  return value == other.value && failed == other.failed && proposer == other.proposer &&
         rendezvous == other.rendezvous;
}

size_t max_agreement_message_bytes(int nranks) {
  return sizeof(WireHeader) + 2 * bitmap_bytes(nranks) + kMaxRendezvousBytes;
}

std::string encode(const AgreementMessage &m, int nranks) {
  WireHeader h;
  h.epoch = m.epoch;
  h.kind = static_cast<uint32_t>(m.kind);
  h.from = m.from;
  h.ballot = m.ballot;
  h.nranks = nranks;
  h.value = m.value;
  h.has_decision = m.has_decision ? 1 : 0;
  h.report_ballot = m.report_ballot;
  h.proposer = m.decision.proposer;
  h.rendezvous_bytes = static_cast<uint32_t>(m.decision.rendezvous.size());
  h.decision_value = m.decision.value;
  const size_t bits = bitmap_bytes(nranks);
  std::string bytes(sizeof h + 2 * bits, '\0');
  std::memcpy(&bytes[0], &h, sizeof h);
  for (int r = 0; r < nranks && r < static_cast<int>(m.covered.size()); ++r)
    if (m.covered[r]) put_bits(&bytes, sizeof h, r);
  for (int r : m.decision.failed) put_bits(&bytes, sizeof h + bits, r);
  return bytes + m.decision.rendezvous;
}

bool decode(const char *bytes, size_t size, int nranks, AgreementMessage *m) {
  WireHeader h;
  const size_t bits = bitmap_bytes(nranks);
  if (size < sizeof h + 2 * bits) return false;
  std::memcpy(&h, bytes, sizeof h);
  if (h.magic != kMagic || h.nranks != nranks || h.from < 0 || h.from >= nranks ||
      h.kind < static_cast<uint32_t>(AgreementKind::kPull) ||
      h.kind > static_cast<uint32_t>(AgreementKind::kDown) || h.ballot < 0 || h.ballot >= nranks ||
      h.rendezvous_bytes > kMaxRendezvousBytes || size != sizeof h + 2 * bits + h.rendezvous_bytes)
    return false;
  *m = AgreementMessage();
  m->kind = static_cast<AgreementKind>(h.kind);
  m->epoch = h.epoch;
  m->from = h.from;
  m->ballot = h.ballot;
  m->value = h.value;
  m->has_decision = h.has_decision != 0;
  m->report_ballot = h.report_ballot;
  m->covered.assign(static_cast<size_t>(nranks), false);
  for (int r = 0; r < nranks; ++r) m->covered[r] = bit(bytes + sizeof h, r);
  if (m->has_decision) {
    if (h.proposer < 0 || h.proposer >= nranks) return false;
    m->decision.proposer = h.proposer;
    m->decision.value = h.decision_value;
    for (int r = 0; r < nranks; ++r)
      if (bit(bytes + sizeof h + bits, r)) m->decision.failed.push_back(r);
    m->decision.rendezvous.assign(bytes + sizeof h + 2 * bits, h.rendezvous_bytes);
    // The proposer never declares itself failed: it is the new communicator's rank 0.
    if (m->decision.excludes(m->decision.proposer)) return false;
  }
  return m->kind != AgreementKind::kDown || m->has_decision;
}

AgreementTree::AgreementTree(int nranks, std::function<bool(int)> failed)
    : n_(nranks), failed_(std::move(failed)) {}

int AgreementTree::root() const {
  for (int r = 0; r < n_; ++r)
    if (!failed_(r)) return r;
  return -1;
}

int AgreementTree::parent(int rank) const {
  for (int a = rank; a != 0;) {
    a &= a - 1;  // the binomial parent: the lowest set bit cleared
    if (!failed_(a)) return a;
  }
  const int top = root();
  return top == rank ? -1 : top;
}

void AgreementTree::binomial_children(int rank, const std::function<void(int)> &visit) const {
  // Rank r's binomial children are r + 2^k for 2^k below r's lowest set bit (every 2^k < n for
  // rank 0); the child r + 2^k heads a subtree of up to 2^k ranks.
  const int below = rank == 0 ? n_ : (rank & -rank);
  int top_bit = 1;
  while (top_bit * 2 < below) top_bit *= 2;
  for (int bit = top_bit; bit >= 1; bit /= 2)
    if (bit < below && rank + bit < n_) visit(rank + bit);
}

void AgreementTree::cover(int x, const std::function<void(int)> &visit,
                          const std::function<bool(int)> &known) const {
  if ((known && known(x)) || !failed_(x)) {
    visit(x);
    return;
  }
  binomial_children(x, [&](int c) { cover(c, visit, known); });
}

void AgreementTree::children(int rank, const std::function<void(int)> &visit,
                             const std::function<bool(int)> &known) const {
  binomial_children(rank, [&](int c) { cover(c, visit, known); });
  // A root other than rank 0 also holds what hangs below the failed ranks above it.
  if (rank != 0 && root() == rank)
    cover(
        0,
        [&](int x) {
          if (x != rank) visit(x);
        },
        known);
}

}  // namespace ddl
