// What an agreement's messages carry, and the tree they travel (lib/core/agreement.h says
// how the agreement uses both).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ddl {

struct Decision {
  uint64_t value = 0;
  std::vector<int> failed;  // ascending
  int proposer = -1;        // the rank that made it: the lowest rank it does not declare failed
  std::string rendezvous;   // "host:port token", when opened
  bool excludes(int rank) const;
  bool operator==(const Decision &other) const;
};

// The three kinds of message (agreement.h): a gatherer asking a rank for its subtree (pull),
// a subtree's values going up (up), a decision going down (down).
enum class AgreementKind : uint32_t { kPull = 1, kUp = 2, kDown = 3 };

struct AgreementMessage {
  AgreementKind kind = AgreementKind::kPull;
  uint32_t epoch = 0;
  int from = -1;    // the sender (messages are received from any rank)
  int ballot = -1;  // pull, up: the root the sender gathers for; down: the root that sent it
  // Up: the AND/OR of the values of the ranks in `covered` (bit r: rank r's value is in).
  uint64_t value = 0;
  std::vector<bool> covered;
  // Up: a decision some rank of the subtree had accepted (its ballot in report_ballot), which
  // the root must propose again. Down: the decision itself.
  bool has_decision = false;
  int report_ballot = -1;
  Decision decision;
};

// Room for the largest message among nranks ranks.
size_t max_agreement_message_bytes(int nranks);
std::string encode(const AgreementMessage &message, int nranks);
// False for anything that is not a well-formed message among nranks ranks (it comes from the
// network).
bool decode(const char *bytes, size_t size, int nranks, AgreementMessage *message);

// The binomial tree over ranks 0..n-1 rooted at rank 0 (depth ceil(log2 n)), as one rank sees
// it: ranks it finds failed are skipped. Its root is the lowest rank not failed; a rank's
// parent is its nearest ancestor not failed, else the root; a failed rank's children belong to
// its parent. Every rank that finds the same ranks failed builds the same tree.
class AgreementTree {
 public:
  AgreementTree(int nranks, std::function<bool(int)> failed);
  int root() const;  // -1 when every rank is failed
  // -1 for the root.
  int parent(int rank) const;
  // Calls visit(child) for each child of `rank`, largest subtree first. known(x), if given,
  // says that x's message came already: x then stands for its subtree even if it failed
  // since.
  void children(int rank, const std::function<void(int)> &visit,
                const std::function<bool(int)> &known = nullptr) const;

 private:
  // The children rank has in the binomial tree, failed or not, largest subtree first.
  void binomial_children(int rank, const std::function<void(int)> &visit) const;
  // Visits x, or where x failed (and is not known), the children x would have had.
  void cover(int x, const std::function<void(int)> &visit,
             const std::function<bool(int)> &known) const;
  int n_;
  std::function<bool(int)> failed_;
};

}  // namespace ddl
