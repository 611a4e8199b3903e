// The write gates of the single-copy allreduce (lib/transports/shm/write_gates.h), in one
// process: a writer thread writes into an "owner's" buffer through the owner's gate while
// the owner closes it. Once the owner has closed the gate and seen no writer in flight,
// nothing may change its buffer any more.
#include <criterion/criterion.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "lib/transports/shm/write_gates.h"

using namespace ddl;

namespace {

constexpr int kOwner = 0, kWriter = 1;

std::vector<char> gate_region(int nranks) {
  return std::vector<char>(nranks * WriteGates::bytes_per_rank(nranks), 0);
}

}  // namespace

Test(write_gates, a_writer_gets_in_only_during_the_owners_call) {
  std::vector<char> region = gate_region(2);
  WriteGates owner(region.data(), 2, kOwner), writer(region.data(), 2, kWriter);
  cr_expect(!writer.begin_write(kOwner, 1), "a gate starts closed");
  owner.open(7);
  cr_expect(!writer.begin_write(kOwner, 6), "the gate is open for call 7, not 6");
  cr_expect(!owner.writing(kWriter, 6) && !owner.writing(kWriter, 7),
            "a refused writer leaves no announcement");
  cr_assert(writer.begin_write(kOwner, 7));
  cr_expect(owner.writing(kWriter, 7), "the owner sees the writer in flight");
  writer.end_write(kOwner);
  cr_expect(!owner.writing(kWriter, 7));
  owner.close();
  cr_expect(!writer.begin_write(kOwner, 7), "a closed gate refuses");
}

// The race the gates exist for, many times over: the writer hammers the owner's buffer
// while the owner leaves. After the owner's wait, the buffer must stay as it is.
Test(write_gates, no_write_lands_after_the_owner_left) {
  for (int round = 0; round < 200; ++round) {
    std::vector<char> region = gate_region(2);
    WriteGates owner(region.data(), 2, kOwner), writer(region.data(), 2, kWriter);
    const uint64_t call = round + 1;
    std::vector<std::atomic<uint64_t>> buffer(64);
    owner.open(call);
    std::atomic<bool> started{false};
    std::thread writing([&] {
      for (uint64_t n = 1;; ++n) {
        if (!writer.begin_write(kOwner, call)) return;
        for (auto &word : buffer) word.store(n, std::memory_order_relaxed);
        writer.end_write(kOwner);
        started.store(true);
      }
    });
    while (!started.load()) std::this_thread::yield();
    owner.close();
    while (owner.writing(kWriter, call)) std::this_thread::yield();
    std::vector<uint64_t> seen(buffer.size());
    for (size_t i = 0; i < buffer.size(); ++i) seen[i] = buffer[i].load();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    for (size_t i = 0; i < buffer.size(); ++i)
      cr_assert_eq(buffer[i].load(), seen[i], "round %d: word %zu changed after the owner left",
                   round, i);
    writing.join();
  }
}
