// The PMIx exchange of the rendezvous address; see pmix.h.
#include "lib/bootstrap/pmix.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "lib/common/log.h"

#ifdef DDL_HAVE_PMIX
#include <pmix.h>
#endif

namespace ddl {
namespace bootstrap {

#ifndef DDL_HAVE_PMIX

bool pmix_built() {
  return false;
}

Status pmix_load() {
  return unsupported(
      "PMIx: this libddl was built without PMIx (libpmix-dev's header was missing at build "
      "time)");
}

Status pmix_exchange(int rank, const Deadline &, std::string *) {
  return unsupported("rank %d: PMIx: this libddl was built without PMIx", rank);
}

#else  // DDL_HAVE_PMIX

namespace {

// The soname of PMIx 2 to 5 (its ABI has kept this name since 2.0).
constexpr const char *kLibrary = "libpmix.so.2";

// The functions we call, resolved with dlsym. decltype of the header's declarations keeps the
// signatures exact without linking against libpmix.
struct PmixApi {
  decltype(&PMIx_Init) init = nullptr;
  decltype(&PMIx_Finalize) finalize = nullptr;
  decltype(&PMIx_Put) put = nullptr;
  decltype(&PMIx_Commit) commit = nullptr;
  decltype(&PMIx_Fence) fence = nullptr;
  decltype(&PMIx_Get) get = nullptr;
  decltype(&PMIx_Error_string) error_string = nullptr;
  decltype(&PMIx_Value_destruct) value_destruct = nullptr;
};

PmixApi g_api;
std::once_flag g_load_once;
Status g_load_status;
// One exchange at a time per process: PMIx_Init/Finalize count per process, and the key
// counter below must follow the order in which every process makes its exchanges.
// A helper thread that overstayed its deadline may still hold the mutex: the counter is apart.
std::mutex g_exchange_mu;
std::atomic<unsigned> g_exchanges{0};

template <typename F>
bool resolve(void *handle, const char *symbol, F *fn) {
  *fn = reinterpret_cast<F>(dlsym(handle, symbol));
  return *fn != nullptr;
}

void load_once() {
  // Kept loaded for the life of the process: its progress thread may outlive an exchange.
  void *handle = dlopen(kLibrary, RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char *why = dlerror();
    g_load_status = unsupported("PMIx: cannot load %s: %s", kLibrary, why ? why : "?");
    return;
  }
  PmixApi api;
  const char *missing = nullptr;
  if (!resolve(handle, "PMIx_Init", &api.init)) missing = "PMIx_Init";
  if (!resolve(handle, "PMIx_Finalize", &api.finalize)) missing = "PMIx_Finalize";
  if (!resolve(handle, "PMIx_Put", &api.put)) missing = "PMIx_Put";
  if (!resolve(handle, "PMIx_Commit", &api.commit)) missing = "PMIx_Commit";
  if (!resolve(handle, "PMIx_Fence", &api.fence)) missing = "PMIx_Fence";
  if (!resolve(handle, "PMIx_Get", &api.get)) missing = "PMIx_Get";
  if (!resolve(handle, "PMIx_Error_string", &api.error_string)) missing = "PMIx_Error_string";
  if (!resolve(handle, "PMIx_Value_destruct", &api.value_destruct)) missing = "PMIx_Value_destruct";
  if (missing) {
    g_load_status = unsupported("PMIx: %s has no %s (PMIx older than 3?)", kLibrary, missing);
    return;
  }
  g_api = api;
  g_load_status = Status::Ok();
}

std::string status_text(pmix_status_t st) {
  const char *text = g_api.error_string ? g_api.error_string(st) : nullptr;
  return strprintf("%s (PMIx status %d)", text ? text : "?", static_cast<int>(st));
}

Status pmix_failed(int rank, const char *call, pmix_status_t st) {
  if (st == PMIX_ERR_TIMEOUT)
    return timeout_error("rank %d: PMIx: %s: %s", rank, call, status_text(st).c_str());
  return remote_error("rank %d: PMIx: %s: %s", rank, call, status_text(st).c_str());
}

void set_info(pmix_info_t *info, const char *key) {
  std::memset(info, 0, sizeof *info);
  std::strncpy(info->key, key, PMIX_MAX_KEYLEN);
}

// The exchange itself, on the helper thread: blocking PMIx calls, each also told the time left
// (PMIX_TIMEOUT, whole seconds), so that a server that honours it gives a PMIx timeout rather
// than our watchdog's.
Status run_exchange(int rank, const std::string &key, int timeout_s, std::string *value) {
  pmix_proc_t me;
  std::memset(&me, 0, sizeof me);
  pmix_status_t st = g_api.init(&me, nullptr, 0);
  if (st != PMIX_SUCCESS) return pmix_failed(rank, "PMIx_Init", st);
  Status result;
  pmix_info_t info[2];
  set_info(&info[0], PMIX_TIMEOUT);
  info[0].value.type = PMIX_INT;
  info[0].value.data.integer = timeout_s;
  set_info(&info[1], PMIX_COLLECT_DATA);
  info[1].value.type = PMIX_BOOL;
  info[1].value.data.flag = true;
  if (me.rank != static_cast<pmix_rank_t>(rank)) {
    // ddl's numbering (OMPI_COMM_WORLD_RANK, SLURM_PROCID) is not the PMIx namespace's: the
    // value would come from the wrong process.
    result = invalid_argument(
        "rank %d: PMIx: this process is rank %u of PMIx namespace %s, not rank %d: the "
        "launcher's ranks are not PMIx's (set DDL_ROOT, or DDL_PMIX=0 for the rendezvous file)",
        rank, static_cast<unsigned>(me.rank), me.nspace, rank);
  } else if (rank == 0) {
    pmix_value_t v;
    std::memset(&v, 0, sizeof v);
    v.type = PMIX_STRING;
    v.data.string = const_cast<char *>(value->c_str());  // PMIx_Put copies it
    st = g_api.put(PMIX_GLOBAL, key.c_str(), &v);
    if (st != PMIX_SUCCESS) result = pmix_failed(rank, "PMIx_Put", st);
    if (result.ok() && (st = g_api.commit()) != PMIX_SUCCESS)
      result = pmix_failed(rank, "PMIx_Commit", st);
  }
  // Rank 0 joins the fence even after a failure above: the others would wait for it.
  if (result.ok() || rank == 0) {
    st = g_api.fence(nullptr, 0, info, 2);
    if (st != PMIX_SUCCESS && result.ok()) result = pmix_failed(rank, "PMIx_Fence", st);
  }
  if (result.ok() && rank != 0) {
    pmix_proc_t root;
    std::memset(&root, 0, sizeof root);
    std::memcpy(root.nspace, me.nspace, sizeof root.nspace);
    root.rank = 0;
    pmix_value_t *got = nullptr;
    st = g_api.get(&root, key.c_str(), info, 1, &got);
    if (st != PMIX_SUCCESS) {
      result = pmix_failed(rank, "PMIx_Get of rank 0's rendezvous", st);
    } else if (!got || got->type != PMIX_STRING || !got->data.string) {
      result = remote_error("rank %d: PMIx: PMIx_Get of %s from rank 0 gave no string (type %d)",
                            rank, key.c_str(), got ? static_cast<int>(got->type) : -1);
    } else {
      *value = got->data.string;
    }
    if (got) {
      g_api.value_destruct(got);
      std::free(got);  // PMIX_VALUE_RELEASE's second half; the value came from PMIx's malloc
    }
  }
  st = g_api.finalize(nullptr, 0);
  if (st != PMIX_SUCCESS && result.ok()) result = pmix_failed(rank, "PMIx_Finalize", st);
  return result;
}

// What the helper thread and the waiting caller share; whoever finishes last frees it.
struct Exchange {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Status result;
  std::string value;
};

}  // namespace

bool pmix_built() {
  return true;
}

Status pmix_load() {
  std::call_once(g_load_once, load_once);
  return g_load_status;
}

Status pmix_exchange(int rank, const Deadline &deadline, std::string *value) {
  DDL_RETURN_IF_ERROR(pmix_load());
  const unsigned seq = ++g_exchanges;
  const std::string key = strprintf("ddl.bootstrap.root.%u", seq);
  const int timeout_s = std::max(1, (deadline.remaining_ms() + 999) / 1000);
  auto shared = std::make_shared<Exchange>();
  std::thread([shared, rank, key, timeout_s, mine = *value] {
    std::string v = mine;
    Status st;
    {
      std::lock_guard<std::mutex> serial(g_exchange_mu);
      st = run_exchange(rank, key, timeout_s, &v);
    }
    std::lock_guard<std::mutex> lock(shared->mu);
    shared->result = st;
    shared->value = v;
    shared->done = true;
    shared->cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(shared->mu);
  const bool done = shared->cv.wait_for(lock, std::chrono::milliseconds(deadline.remaining_ms()),
                                        [&] { return shared->done; });
  if (!done)
    return timeout_error(
        "rank %d: PMIx: the exchange of rank 0's rendezvous (key %s) did not finish within the "
        "deadline (%lld ms): a rank of the job has not reached ddl's initialization, or the "
        "launcher's PMIx server does not answer",
        rank, key.c_str(), static_cast<long long>(deadline.elapsed_ms()));
  if (!shared->result.ok()) return shared->result;
  *value = shared->value;
  return Status::Ok();
}

#endif  // DDL_HAVE_PMIX

}  // namespace bootstrap
}  // namespace ddl
