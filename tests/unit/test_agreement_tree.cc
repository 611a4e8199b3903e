// The agreement's tree and messages (lib/core/agreement_wire.h): with any ranks failed, every
// live rank but the root has a live parent that counts it among its children, and no other
// rank does; the depth stays within ceil(log2 n) + 1 (ceil(log2 n) without failures); a rank
// whose part is known stands for its subtree even after it failed. Messages survive their
// encoding, and what is not a message is refused.
#include <criterion/criterion.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "lib/core/agreement_wire.h"

using namespace ddl;

namespace {

int ceil_log2(int n) {
  int d = 0;
  while ((1 << d) < n) ++d;
  return d;
}

// Checks the tree of n ranks with `failed` dead; returns its depth.
int check_tree(int n, const std::vector<bool> &failed) {
  AgreementTree tree(n, [&](int r) { return failed[r]; });
  const int root = tree.root();
  std::vector<int> parent_of(n, -2);
  for (int r = 0; r < n; ++r) {
    if (failed[r]) continue;
    tree.children(r, [&](int c) {
      cr_assert(!failed[c], "n %d: rank %d lists failed rank %d as a child", n, r, c);
      cr_assert_eq(parent_of[c], -2, "n %d: rank %d is a child of %d and of %d", n, c, parent_of[c],
                   r);
      parent_of[c] = r;
    });
  }
  int depth = 0;
  for (int r = 0; r < n; ++r) {
    if (failed[r]) continue;
    if (r == root) {
      cr_assert_eq(tree.parent(r), -1);
      cr_assert_eq(parent_of[r], -2, "n %d: the root %d is someone's child", n, r);
      continue;
    }
    cr_assert_eq(tree.parent(r), parent_of[r], "n %d: rank %d's parent %d, listed by %d", n, r,
                 tree.parent(r), parent_of[r]);
    int d = 0;
    for (int a = r; a != root; a = tree.parent(a)) ++d;
    depth = std::max(depth, d);
  }
  return depth;
}

}  // namespace

Test(agreement_tree, without_failures_it_is_the_binomial_tree) {
  for (int n = 1; n <= 70; ++n) {
    const int depth = check_tree(n, std::vector<bool>(n, false));
    // Rank r sits as deep as it has bits set: at most ceil(log2 n), exactly that for n a
    // power of two.
    int deepest = 0;
    for (int r = 0; r < n; ++r) deepest = std::max(deepest, __builtin_popcount(r));
    cr_assert_eq(depth, deepest, "n %d: depth %d", n, depth);
    cr_assert(depth <= ceil_log2(n));
  }
  // Rank 0 of 8: children 4, 2, 1 (largest subtree first); rank 4: 6, 5.
  AgreementTree tree(8, [](int) { return false; });
  std::vector<int> children;
  tree.children(0, [&](int c) { children.push_back(c); });
  cr_assert(children == std::vector<int>({4, 2, 1}));
  children.clear();
  tree.children(4, [&](int c) { children.push_back(c); });
  cr_assert(children == std::vector<int>({6, 5}));
}

Test(agreement_tree, any_ranks_failed_leave_a_tree_of_the_others) {
  std::mt19937 random(7);
  for (int n = 2; n <= 70; ++n) {
    for (int trial = 0; trial < 40; ++trial) {
      std::vector<bool> failed(n, false);
      const int dead = static_cast<int>(random() % static_cast<unsigned>(n));  // fewer than n
      for (int i = 0; i < dead; ++i) failed[random() % static_cast<unsigned>(n)] = true;
      if (std::all_of(failed.begin(), failed.end(), [](bool f) { return f; })) continue;
      const int depth = check_tree(n, failed);
      cr_assert(depth <= ceil_log2(n) + 1, "n %d: depth %d", n, depth);
    }
  }
}

Test(agreement_tree, a_known_rank_stands_for_its_subtree_after_it_failed) {
  std::vector<bool> failed(8, false);
  failed[4] = true;
  AgreementTree tree(8, [&](int r) { return failed[r]; });
  std::vector<int> children;
  tree.children(0, [&](int c) { children.push_back(c); });
  cr_assert(children == std::vector<int>({6, 5, 2, 1}), "4's children move up to 0");
  children.clear();
  tree.children(
      0, [&](int c) { children.push_back(c); }, [](int r) { return r == 4; });
  cr_assert(children == std::vector<int>({4, 2, 1}), "4's values came before it died");
  // Rank 0 failed: rank 1 is the root and holds what rank 0 held.
  failed[0] = true;
  cr_assert_eq(tree.root(), 1);
  cr_assert_eq(tree.parent(2), 1);
  cr_assert_eq(tree.parent(7), 6);
}

Test(agreement_tree, messages_survive_their_encoding_and_garbage_is_refused) {
  AgreementMessage m;
  m.kind = AgreementKind::kUp;
  m.epoch = 3;
  m.from = 5;
  m.ballot = 1;
  m.value = 0xF0F0;
  m.covered = std::vector<bool>(12, false);
  m.covered[5] = m.covered[7] = true;
  m.has_decision = true;
  m.report_ballot = 0;
  m.decision.proposer = 0;
  m.decision.value = 9;
  m.decision.failed = {2, 11};
  m.decision.rendezvous = "10.0.0.1:4000 secret";
  const std::string bytes = encode(m, 12);
  cr_assert_leq(bytes.size(), max_agreement_message_bytes(12));
  AgreementMessage back;
  cr_assert(decode(bytes.data(), bytes.size(), 12, &back));
  cr_assert(back.kind == m.kind && back.epoch == 3 && back.from == 5 && back.ballot == 1 &&
            back.value == 0xF0F0 && back.covered == m.covered && back.has_decision &&
            back.report_ballot == 0 && back.decision == m.decision);
  cr_assert_not(decode(bytes.data(), bytes.size(), 13, &back), "another rank count");
  cr_assert_not(decode(bytes.data(), bytes.size() - 1, 12, &back), "cut short");
  std::string garbage = bytes;
  garbage[0] ^= 1;
  cr_assert_not(decode(garbage.data(), garbage.size(), 12, &back), "no magic");
  // A decision that declares its own proposer failed is no decision.
  m.decision.failed = {0};
  const std::string self_failed = encode(m, 12);
  cr_assert_not(decode(self_failed.data(), self_failed.size(), 12, &back));
}
