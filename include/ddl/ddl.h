/*
 * ddl — collectives for distributed deep learning. The only public C header.
 *
 * ABI rules (see tests/unit/test_abi_layout.c, which pins them):
 *  - enum values are never renumbered; new values are appended before the *_COUNT sentinels;
 *  - ddl_config_t opens with `size` and `version`; fields are only ever appended, and the
 *    library reads a field only when `size` says the caller's struct contains it;
 *  - every exported symbol starts with ddl_; the SONAME carries the major version.
 *
 * Every call returns a ddl_result_t. On failure, ddl_comm_last_error(comm) (or
 * ddl_comm_last_error(NULL) for calls that had no communicator yet) says what went wrong:
 * the rank, the peer, the collective and its sequence number, and the underlying cause.
 */
#ifndef DDL_DDL_H
#define DDL_DDL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DDL_VERSION_MAJOR 0
#define DDL_VERSION_MINOR 1
#define DDL_VERSION_PATCH 0

#if defined(__GNUC__)
#define DDL_API __attribute__((visibility("default")))
#else
#define DDL_API
#endif

typedef struct ddl_comm *ddl_comm_t;

typedef enum {
  DDL_SUCCESS = 0,
  DDL_ERR_INVALID_ARGUMENT = 1, /* a bad pointer, count, enum value or rank */
  DDL_ERR_INVALID_USAGE = 2,    /* a valid call at the wrong time (destroyed comm, ...) */
  DDL_ERR_SYSTEM = 3,           /* the OS or a library said no (errno / UCX status in text) */
  DDL_ERR_INTERNAL = 4,         /* a bug in ddl: please report it with the message */
  DDL_ERR_REMOTE = 5,           /* a peer failed, disconnected or sent something wrong */
  DDL_ERR_TIMEOUT = 6,          /* a deadline passed (DDL_TIMEOUT_MS / config.timeout_ms) */
  DDL_ERR_UNSUPPORTED = 7,      /* valid, but not implemented on this build or machine */
  DDL_RESULT_COUNT
} ddl_result_t;

typedef enum {
  DDL_INT8 = 0,
  DDL_UINT8 = 1,
  DDL_INT32 = 2,
  DDL_UINT32 = 3,
  DDL_INT64 = 4,
  DDL_UINT64 = 5,
  DDL_FLOAT16 = 6,  /* IEEE binary16; reduced in float32, rounded once per step */
  DDL_BFLOAT16 = 7, /* reduced in float32, rounded once per step */
  DDL_FLOAT32 = 8,
  DDL_FLOAT64 = 9,
  DDL_DATATYPE_COUNT
} ddl_datatype_t;

typedef enum {
  DDL_SUM = 0,
  DDL_PROD = 1,
  DDL_MIN = 2,
  DDL_MAX = 3,
  DDL_AVG = 4, /* sum divided by the number of ranks (integer division for integer types) */
  DDL_OP_COUNT
} ddl_op_t;

/* Communicator options. Initialise with DDL_CONFIG_INITIALIZER, then set what you need:
 *     ddl_config_t cfg = DDL_CONFIG_INITIALIZER;
 *     cfg.timeout_ms = 60000;
 * A zero / NULL field means "use the environment variable, else the default". */
typedef struct {
  size_t size;           /* sizeof(ddl_config_t) as the caller compiled it */
  uint32_t version;      /* DDL_CONFIG_VERSION as the caller compiled it */
  int32_t timeout_ms;    /* deadline of every blocking wait; DDL_TIMEOUT_MS, default 300000 */
  const char *job_token; /* shared secret checked by the rendezvous; DDL_JOB_TOKEN */
  size_t chunk_bytes;    /* pipelining granularity of large collectives; DDL_CHUNK_BYTES */
  int32_t log_level;     /* 0 error, 1 warn, 2 info, 3 debug; DDL_LOG_LEVEL (-1: from env) */
} ddl_config_t;

#define DDL_CONFIG_VERSION 1u
#define DDL_CONFIG_INITIALIZER \
  { sizeof(ddl_config_t), DDL_CONFIG_VERSION, 0, NULL, 0, -1 }

DDL_API ddl_result_t ddl_get_version(int *major, int *minor, int *patch);

/* Creates a communicator from the environment: DDL_RANK, DDL_WORLD_SIZE, DDL_ROOT (host:port
 * of the rendezvous that rank 0 serves), optional DDL_JOB_TOKEN; else Open MPI's mpirun
 * (OMPI_COMM_WORLD_RANK/SIZE), Slurm (SLURM_PROCID/NTASKS) or torchrun (RANK, WORLD_SIZE,
 * MASTER_ADDR, MASTER_PORT). Collective: every rank of the job must call it. */
DDL_API ddl_result_t ddl_comm_init_from_env(ddl_comm_t *comm);

/* Creates a communicator of nranks processes; rank 0 serves the rendezvous at root_addr
 * ("host:port"). config may be NULL. Collective. */
DDL_API ddl_result_t ddl_comm_init(ddl_comm_t *comm, int nranks, int rank, const char *root_addr,
                                   const ddl_config_t *config);

/* Frees the communicator. Not collective; pending peers see this rank disconnect. */
DDL_API ddl_result_t ddl_comm_destroy(ddl_comm_t comm);

/* Marks the communicator failed: every later call on it returns an error, so that it can
 * only be destroyed. Safe to call from any thread. */
DDL_API ddl_result_t ddl_comm_abort(ddl_comm_t comm);

DDL_API ddl_result_t ddl_comm_rank(ddl_comm_t comm, int *rank);
DDL_API ddl_result_t ddl_comm_size(ddl_comm_t comm, int *size);

/* Sums (or op) count elements across ranks; in place when sendbuf == recvbuf. */
DDL_API ddl_result_t ddl_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                   ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm);

/* Copies count elements of root's buf into every rank's buf. */
DDL_API ddl_result_t ddl_broadcast(void *buf, size_t count, ddl_datatype_t dtype, int root,
                                   ddl_comm_t comm);

/* recvbuf (sendcount * nranks elements) receives every rank's sendbuf, in rank order. */
DDL_API ddl_result_t ddl_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                   ddl_datatype_t dtype, ddl_comm_t comm);

/* sendbuf holds recvcount * nranks elements; rank r receives block r of the reduction. */
DDL_API ddl_result_t ddl_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                        ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm);

/* Returns once every rank has entered the barrier. */
DDL_API ddl_result_t ddl_barrier(ddl_comm_t comm);

/* Memory for collective buffers that the ranks of a host can map from each other: when
 * every rank's allreduce buffers come from here, a single-host job reads and writes its
 * peers' data in place instead of copying it through the kernel. Any memory works with every call;
 * this is only faster. Not tied to a communicator; free with ddl_mem_free. bytes may be 0. */
DDL_API ddl_result_t ddl_mem_alloc(void **ptr, size_t bytes);
DDL_API ddl_result_t ddl_mem_free(void *ptr);

/* The color that leaves a rank out of every group of ddl_comm_split (MPI_UNDEFINED). */
#define DDL_SPLIT_NOCOLOR (-1)

/* Splits comm into groups: the ranks that pass the same color (>= 0) form a new
 * communicator in *newcomm, ranked by key, ties broken by their rank in comm. A rank that
 * passes DDL_SPLIT_NOCOLOR joins no group and gets *newcomm = NULL. Collective over comm
 * (every rank calls it, in the same order as its other calls on comm). The new communicator
 * is independent of comm: it has its own sequence numbers, mismatch and failure detection,
 * may run collectives in turn with comm and is destroyed separately (before or after comm). */
DDL_API ddl_result_t ddl_comm_split(ddl_comm_t comm, int color, int key, ddl_comm_t *newcomm);

/* ---- Nonblocking collectives ------------------------------------------------------------
 *
 * ddl_i<collective> checks its arguments, queues the collective on the communicator and
 * returns at once with a request; a progress thread of the communicator runs queued
 * collectives one after another, in call order, while the caller goes on. Every rank must
 * issue the same collectives on a communicator in the same order, blocking and nonblocking
 * alike (a blocking call waits for the ones queued before it). The buffers belong to ddl until
 * the request completes: do not read the output or write the input before then.
 *
 * An invalid argument fails the call itself (no request is made). A failure while running
 * (a dead peer, mismatched calls, the deadline) is returned by ddl_test/ddl_wait of that
 * request, and every later collective on the communicator fails too, as for blocking calls.
 * The words of a failure of ddl_test or ddl_wait are in ddl_comm_last_error(NULL) of the
 * thread that called it (a request may outlive its communicator). */
typedef struct ddl_request *ddl_request_t;

DDL_API ddl_result_t ddl_iallreduce(const void *sendbuf, void *recvbuf, size_t count,
                                    ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm,
                                    ddl_request_t *request);
DDL_API ddl_result_t ddl_ibroadcast(void *buf, size_t count, ddl_datatype_t dtype, int root,
                                    ddl_comm_t comm, ddl_request_t *request);
DDL_API ddl_result_t ddl_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                    ddl_datatype_t dtype, ddl_comm_t comm, ddl_request_t *request);
DDL_API ddl_result_t ddl_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                         ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm,
                                         ddl_request_t *request);
DDL_API ddl_result_t ddl_ibarrier(ddl_comm_t comm, ddl_request_t *request);

/* *done = 1 and the collective's result once it has finished, else *done = 0 and
 * DDL_SUCCESS. Never blocks. The request stays valid until ddl_request_free. */
DDL_API ddl_result_t ddl_test(ddl_request_t request, int *done);

/* Blocks until the collective has finished and returns its result. It cannot wait forever:
 * each queued collective has the communicator's deadline from the moment it starts. */
DDL_API ddl_result_t ddl_wait(ddl_request_t request);

/* Releases the request. One not yet finished still runs to its end (as MPI_Request_free);
 * its buffers stay in use until then. NULL is accepted and ignored. */
DDL_API ddl_result_t ddl_request_free(ddl_request_t request);

/* ---- Groups (NCCL semantics) -----------------------------------------------------------
 *
 * Between ddl_group_start() and ddl_group_end() on one thread, collectives (blocking or not,
 * on any communicators) are only recorded: blocking calls return DDL_SUCCESS at once after
 * checking their arguments, nonblocking ones return their request. ddl_group_end() issues
 * them together, in order; consecutive allreduces on one communicator with the same datatype
 * and op, each at most DDL_FUSION_BYTES (default 64 KiB), are fused into allreduces of one
 * buffer each, of at most DDL_FUSION_BYTES. ddl_group_end() returns once the blocking calls of the
 * group have finished, with the first failure among them (its words in ddl_comm_last_error(NULL) of
 * this thread); the requests of nonblocking ones complete on their own. Groups nest: only the
 * outermost end issues. Every rank must group the same calls. */
DDL_API ddl_result_t ddl_group_start(void);
DDL_API ddl_result_t ddl_group_end(void);

/* Static text for a result code ("DDL_ERR_TIMEOUT: ..."); never NULL. */
DDL_API const char *ddl_result_string(ddl_result_t result);

/* The last error of this communicator in words, or "" when there was none. With NULL, the
 * last error of the calling thread: ddl_comm_init* failures, and calls refused because of the
 * handle itself (NULL, destroyed, in use by another thread). Valid until the next call on the
 * same communicator / thread. */
DDL_API const char *ddl_comm_last_error(ddl_comm_t comm);

/* Bytes per element of dtype, or 0 for an invalid value. */
DDL_API size_t ddl_datatype_size(ddl_datatype_t dtype);

/* Short lower-case names ("float32", "sum"); "invalid" for an out-of-range value. */
DDL_API const char *ddl_datatype_name(ddl_datatype_t dtype);
DDL_API const char *ddl_op_name(ddl_op_t op);

/* ---- Alltoall, reduce, gather, scatter ------------------------------------------------
 *
 * Collective over the communicator, like the calls above: every rank calls them in the same
 * order as its other collectives, with the same datatype, root and (for the calls without v)
 * count. Blocking, nonblocking (ddl_i*, a request as above) and inside ddl_group_start/end.
 * Counts and displacements are in elements. Arrays of counts and displacements are read at
 * the call (they may be freed at once, also for the nonblocking forms); the data buffers
 * belong to ddl until the call or its request completes. A rank whose counts disagree with
 * its peers' (what rank i sends to rank j is not what rank j expects from rank i) gets
 * DDL_ERR_INVALID_USAGE naming both ranks, on both. */

/* Rank r sends block j of sendbuf (count elements at j * count) to rank j and receives
 * rank j's block r at j * count of recvbuf; both hold count * nranks elements. In place when
 * sendbuf == recvbuf. */
DDL_API ddl_result_t ddl_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                  ddl_datatype_t dtype, ddl_comm_t comm);

/* As ddl_alltoall with a count and displacement per peer (MPI_Alltoallv): sendcounts[j]
 * elements at sdispls[j] of sendbuf go to rank j, which receives them as recvcounts[r] at
 * rdispls[r] of its recvbuf. Each array has nranks entries. In place when sendbuf ==
 * recvbuf: the data to send is read from recvbuf at rdispls/recvcounts (MPI_IN_PLACE), and
 * sendcounts/sdispls may be NULL. */
DDL_API ddl_result_t ddl_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                   const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                   const size_t *rdispls, ddl_datatype_t dtype, ddl_comm_t comm);

/* Reduces count elements of every rank's sendbuf into root's recvbuf (recvbuf is only read
 * on the root and may be NULL elsewhere). In place on the root when sendbuf == recvbuf. */
DDL_API ddl_result_t ddl_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                ddl_datatype_t dtype, ddl_op_t op, int root, ddl_comm_t comm);

/* root's recvbuf (sendcount * nranks elements) receives every rank's sendbuf, in rank order;
 * recvbuf is ignored (may be NULL) on other ranks. In place on the root when sendbuf ==
 * recvbuf + root * sendcount. */
DDL_API ddl_result_t ddl_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                ddl_datatype_t dtype, int root, ddl_comm_t comm);

/* As ddl_gather with a count per rank: rank i sends sendcount elements; the root receives
 * recvcounts[i] (== rank i's sendcount) at displs[i] of recvbuf. recvcounts and displs are read
 * on the root only (NULL elsewhere). In place on the root when sendbuf == recvbuf +
 * displs[root]. */
DDL_API ddl_result_t ddl_gatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                 const size_t *recvcounts, const size_t *displs,
                                 ddl_datatype_t dtype, int root, ddl_comm_t comm);

/* Block i of root's sendbuf (recvcount elements at i * recvcount) goes to rank i's recvbuf;
 * sendbuf is ignored (may be NULL) on other ranks. In place on the root when recvbuf ==
 * sendbuf + root * recvcount. */
DDL_API ddl_result_t ddl_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                 ddl_datatype_t dtype, int root, ddl_comm_t comm);

/* As ddl_scatter with a count per rank: sendcounts[i] elements at displs[i] of root's sendbuf
 * go to rank i, which receives recvcount (== sendcounts[i]) elements. sendcounts and displs
 * are read on the root only. In place on the root when recvbuf == sendbuf + displs[root]. */
DDL_API ddl_result_t ddl_scatterv(const void *sendbuf, const size_t *sendcounts,
                                  const size_t *displs, void *recvbuf, size_t recvcount,
                                  ddl_datatype_t dtype, int root, ddl_comm_t comm);

/* As ddl_allgather with a count per rank (MPI_Allgatherv): rank i sends sendcount elements;
 * every rank receives recvcounts[i] (== rank i's sendcount) of them at displs[i] of recvbuf.
 * recvcounts and displs are read on every rank (each its own copy, the same values). In place
 * when sendbuf == recvbuf + displs[rank]. */
DDL_API ddl_result_t ddl_allgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                    const size_t *recvcounts, const size_t *displs,
                                    ddl_datatype_t dtype, ddl_comm_t comm);

/* As ddl_reduce_scatter with a count per rank (MPI_Reduce_scatter): sendbuf holds the sum of
 * recvcounts elements, block j (recvcounts[j] elements, packed in rank order) of which is
 * reduced across the ranks into rank j's recvbuf. recvcounts is read on every rank (the same
 * values). In place when recvbuf == sendbuf + this rank's block. */
DDL_API ddl_result_t ddl_reduce_scatterv(const void *sendbuf, void *recvbuf,
                                         const size_t *recvcounts, ddl_datatype_t dtype,
                                         ddl_op_t op, ddl_comm_t comm);

DDL_API ddl_result_t ddl_ialltoall(const void *sendbuf, void *recvbuf, size_t count,
                                   ddl_datatype_t dtype, ddl_comm_t comm, ddl_request_t *request);
DDL_API ddl_result_t ddl_ialltoallv(const void *sendbuf, const size_t *sendcounts,
                                    const size_t *sdispls, void *recvbuf, const size_t *recvcounts,
                                    const size_t *rdispls, ddl_datatype_t dtype, ddl_comm_t comm,
                                    ddl_request_t *request);
DDL_API ddl_result_t ddl_ireduce(const void *sendbuf, void *recvbuf, size_t count,
                                 ddl_datatype_t dtype, ddl_op_t op, int root, ddl_comm_t comm,
                                 ddl_request_t *request);
DDL_API ddl_result_t ddl_igather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                 ddl_datatype_t dtype, int root, ddl_comm_t comm,
                                 ddl_request_t *request);
DDL_API ddl_result_t ddl_igatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                  const size_t *recvcounts, const size_t *displs,
                                  ddl_datatype_t dtype, int root, ddl_comm_t comm,
                                  ddl_request_t *request);
DDL_API ddl_result_t ddl_iscatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                  ddl_datatype_t dtype, int root, ddl_comm_t comm,
                                  ddl_request_t *request);
DDL_API ddl_result_t ddl_iscatterv(const void *sendbuf, const size_t *sendcounts,
                                   const size_t *displs, void *recvbuf, size_t recvcount,
                                   ddl_datatype_t dtype, int root, ddl_comm_t comm,
                                   ddl_request_t *request);
DDL_API ddl_result_t ddl_iallgatherv(const void *sendbuf, size_t sendcount, void *recvbuf,
                                     const size_t *recvcounts, const size_t *displs,
                                     ddl_datatype_t dtype, ddl_comm_t comm, ddl_request_t *request);
DDL_API ddl_result_t ddl_ireduce_scatterv(const void *sendbuf, void *recvbuf,
                                          const size_t *recvcounts, ddl_datatype_t dtype,
                                          ddl_op_t op, ddl_comm_t comm, ddl_request_t *request);

/* Prefix reductions (MPI_Scan, MPI_Exscan): rank r's recvbuf receives the reduction of the
 * count elements of ranks 0..r's sendbuf (ddl_scan) or of ranks 0..r-1's (ddl_exscan, whose
 * rank 0 recvbuf is left as it was). In place when sendbuf == recvbuf. The ops are those of
 * ddl_allreduce but DDL_AVG (DDL_ERR_INVALID_ARGUMENT). */
DDL_API ddl_result_t ddl_scan(const void *sendbuf, void *recvbuf, size_t count,
                              ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm);
DDL_API ddl_result_t ddl_exscan(const void *sendbuf, void *recvbuf, size_t count,
                                ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm);
DDL_API ddl_result_t ddl_iscan(const void *sendbuf, void *recvbuf, size_t count,
                               ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm,
                               ddl_request_t *request);
DDL_API ddl_result_t ddl_iexscan(const void *sendbuf, void *recvbuf, size_t count,
                                 ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm,
                                 ddl_request_t *request);

/* ---- Point to point -------------------------------------------------------------------
 *
 * ddl_send and ddl_recv are not collective: only the two ranks take part, and they do not
 * count among the collectives whose order ranks must agree on. Messages between two ranks are
 * matched in the order they were posted (NCCL's rule): the k-th send from rank a to rank b
 * meets the k-th receive of rank b from rank a, and their counts and datatypes must be equal
 * (else DDL_ERR_INVALID_USAGE on the receiver, naming the sender and both sizes). Tags and
 * receives from any source: ddl_send_tag/ddl_recv_tag below. Large messages go straight from
 * the sender's buffer over the transport.
 *
 * A blocking ddl_send may wait until the peer receives (as MPI_Send), so two ranks that both
 * send first can wait for each other until the deadline. Put such exchanges in a group: the
 * sends and receives between ddl_group_start and ddl_group_end on one communicator are all
 * posted at once when the group ends, in any order, and never wait for each other (NCCL's
 * grouped send/recv). ddl_isend/ddl_irecv queue the transfer like the other nonblocking
 * calls; consecutive ones on a communicator run together. A dead peer or the deadline fails
 * the call with DDL_ERR_REMOTE or DDL_ERR_TIMEOUT naming the peer, and the communicator, as
 * after a failed collective. */
DDL_API ddl_result_t ddl_send(const void *buf, size_t count, ddl_datatype_t dtype, int peer,
                              ddl_comm_t comm);
DDL_API ddl_result_t ddl_recv(void *buf, size_t count, ddl_datatype_t dtype, int peer,
                              ddl_comm_t comm);
DDL_API ddl_result_t ddl_isend(const void *buf, size_t count, ddl_datatype_t dtype, int peer,
                               ddl_comm_t comm, ddl_request_t *request);
DDL_API ddl_result_t ddl_irecv(void *buf, size_t count, ddl_datatype_t dtype, int peer,
                               ddl_comm_t comm, ddl_request_t *request);

/* Tagged messages and receives from any source (MPI's and torch.distributed's form).
 * ddl_send/ddl_recv are these with tag 0. Messages are matched per (sender, receiver, tag) in
 * the order they were posted; tags are 0..DDL_TAG_UB and each tag is its own order, so a
 * receive with tag 3 never takes a message sent with tag 4 (it waits, up to the deadline).
 *
 * peer DDL_ANY_SOURCE (receives only) takes the first message with that tag to arrive from
 * any rank; *source (may be NULL) is set to the sender when the receive is done (for
 * ddl_irecv_tag, once ddl_test/ddl_wait report it done). Receives are matched in the order
 * they were posted, as in MPI: a receive from rank r posted while a DDL_ANY_SOURCE receive of
 * the same tag is pending waits until that one has taken its message (r's first, if r's came
 * first). A message longer than an any-source receive fails on the receiver,
 * naming the sender and both sizes, as for any receive; so does a shorter one. */
#define DDL_ANY_SOURCE (-1)
#define DDL_TAG_UB ((1 << 22) - 1)
DDL_API ddl_result_t ddl_send_tag(const void *buf, size_t count, ddl_datatype_t dtype, int peer,
                                  int tag, ddl_comm_t comm);
DDL_API ddl_result_t ddl_recv_tag(void *buf, size_t count, ddl_datatype_t dtype, int peer, int tag,
                                  ddl_comm_t comm, int *source);
DDL_API ddl_result_t ddl_isend_tag(const void *buf, size_t count, ddl_datatype_t dtype, int peer,
                                   int tag, ddl_comm_t comm, ddl_request_t *request);
DDL_API ddl_result_t ddl_irecv_tag(void *buf, size_t count, ddl_datatype_t dtype, int peer, int tag,
                                   ddl_comm_t comm, int *source, ddl_request_t *request);

/* ---- Device buffers and stream-ordered collectives (CUDA) -------------------------------
 *
 * Every collective, send and receive takes CUDA device memory (cudaMalloc, also managed memory)
 * as well as host memory: ddl finds where each buffer is on every call (the CUDA driver,
 * libcuda.so.1, is opened with dlopen at the first collective; without it every buffer is host
 * memory, and DDL_CUDA=0 makes that so; DDL_CUDA_LIBRARY names another driver library). The buffers
 * of one call must be of one kind: host and device buffers mixed fail with DDL_ERR_INVALID_ARGUMENT
 * naming the buffers; every rank of a call must pass the same kind. Device buffers are staged
 * through pinned host memory in chunks of DDL_CUDA_STAGE_BYTES (default 4 MiB, the same on every
 * rank), the device copies of one chunk overlapping the host collective of the next (the forms
 * with counts per rank in one chunk, the whole call); an allreduce
 * whose ranks all share one host reads its peers' device memory through CUDA IPC instead; there is
 * no GPUDirect RDMA path yet. A send's or receive's device buffer goes through host memory of
 * its own (the send's bytes copied out at the call, after the legacy default stream's work; the
 * receive's copied in once its message has arrived, by the thread that completes it), and the
 * two ranks of a message may each pass either kind. Blocking calls return when the result is in the
 * device buffer; nonblocking ones when their request is done. The calling thread must have made
 * CUDA current (the buffers' context is used).
 *
 * The _stream forms order the collective on a CUDA stream (a CUstream / cudaStream_t; NULL is
 * the default stream): the collective starts after the work queued on the stream before the
 * call, and the work queued after it comes after the collective. On a communicator inside one
 * host the call is host-synchronous by default: it waits for the stream's earlier work (within
 * DDL_TIMEOUT_MS), runs the collective in call order with the other calls on the
 * communicator, and returns when it has ended, with its result (ranks must issue the same
 * calls in the same order). On a communicator that spans hosts (or with
 * DDL_CUDA_STREAM_ASYNC=1; =0 makes every call host-synchronous) it returns at once instead:
 * the call's copies are queued on the stream and its collective to the progress thread, and
 * the stream waits for it (at most 16 such calls in flight per communicator); the
 * stream's later work is released whatever happens: when the collective fails, passes its
 * deadline or is aborted (ddl_comm_abort), the stream goes on, the buffers hold no defined
 * result, and the next call on the communicator fails with the words of that failure. The
 * arguments are checked at the call (DDL_ERR_INVALID_ARGUMENT as for blocking
 * calls). Buffers may be device or host memory. DDL_ERR_UNSUPPORTED without a CUDA driver;
 * DDL_ERR_INVALID_USAGE between ddl_group_start and ddl_group_end. The buffers must stay valid
 * until the stream has passed the call. */
DDL_API ddl_result_t ddl_allreduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                          ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm,
                                          void *cuda_stream);
DDL_API ddl_result_t ddl_broadcast_stream(void *buf, size_t count, ddl_datatype_t dtype, int root,
                                          ddl_comm_t comm, void *cuda_stream);
DDL_API ddl_result_t ddl_allgather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                          ddl_datatype_t dtype, ddl_comm_t comm, void *cuda_stream);
DDL_API ddl_result_t ddl_reduce_scatter_stream(const void *sendbuf, void *recvbuf, size_t recvcount,
                                               ddl_datatype_t dtype, ddl_op_t op, ddl_comm_t comm,
                                               void *cuda_stream);

/* Alltoall(v), reduce, gather and scatter ordered on a stream, as the calls above but
 * host-synchronous in every mode (the asynchronous mode queues the four calls above only):
 * each waits for the stream's earlier work (within DDL_TIMEOUT_MS), runs as its blocking form
 * does (device buffers staged through pinned host memory), and returns when it has ended, so
 * that the work queued on the stream after it follows its result. What PyTorch's "ddl" backend
 * runs for CUDA tensors in these calls. */
DDL_API ddl_result_t ddl_alltoall_stream(const void *sendbuf, void *recvbuf, size_t count,
                                         ddl_datatype_t dtype, ddl_comm_t comm, void *cuda_stream);
DDL_API ddl_result_t ddl_alltoallv_stream(const void *sendbuf, const size_t *sendcounts,
                                          const size_t *sdispls, void *recvbuf,
                                          const size_t *recvcounts, const size_t *rdispls,
                                          ddl_datatype_t dtype, ddl_comm_t comm, void *cuda_stream);
DDL_API ddl_result_t ddl_reduce_stream(const void *sendbuf, void *recvbuf, size_t count,
                                       ddl_datatype_t dtype, ddl_op_t op, int root, ddl_comm_t comm,
                                       void *cuda_stream);
DDL_API ddl_result_t ddl_gather_stream(const void *sendbuf, void *recvbuf, size_t sendcount,
                                       ddl_datatype_t dtype, int root, ddl_comm_t comm,
                                       void *cuda_stream);
DDL_API ddl_result_t ddl_scatter_stream(const void *sendbuf, void *recvbuf, size_t recvcount,
                                        ddl_datatype_t dtype, int root, ddl_comm_t comm,
                                        void *cuda_stream);

/* ---- Fault tolerance: revoke, agree, shrink, grow --------------------------------------
 *
 * A failed call (a dead or unreachable peer: DDL_ERR_REMOTE naming it) leaves its
 * communicator failed on every rank: each rank that finds a failure tells the others (failure
 * notices), so their pending and later calls fail promptly too. The job can then go on
 * without a relaunch: every live rank calls ddl_comm_shrink, which agrees on which ranks are
 * alive and returns a new communicator of them; ddl_comm_grow later lets new processes join.
 * These calls are collective over the ranks still alive (each calls them in the same order as
 * its other calls on the communicator) and tolerate ranks that die while they run. Failed
 * means: the connection broke, the process is gone (this host), its host fell silent for
 * DDL_PEER_TIMEOUT_MS (default 5 s; heartbeats), or it has been stopped (SIGSTOP) on this host
 * for as long; a rank that is only slow to arrive (computing) is waited for, up to the
 * communicator's deadline. A rank the others declared failed that is still running gets an
 * error from the shrink (never a seat in the new communicator). */

/* Fails every later call on comm on every rank (through failure notices), so that nobody
 * waits out a deadline for ranks that went to a shrink. ddl_comm_shrink revokes by itself. */
DDL_API ddl_result_t ddl_comm_revoke(ddl_comm_t comm);

typedef enum { DDL_AGREE_AND = 0, DDL_AGREE_OR = 1 } ddl_agree_op_t;

/* Fault-tolerant agreement (MPIX_Comm_agree): *value becomes the bitwise AND (or OR) of the
 * values of the live ranks, the same on all of them, even if ranks die during the call; they
 * also agree on which ranks failed (ddl_comm_failed_ranks). When some did, comm is failed
 * from then on (shrink it). E.g. "did every rank write its checkpoint?". */
DDL_API ddl_result_t ddl_comm_agree(ddl_comm_t comm, ddl_agree_op_t op, uint64_t *value);

/* The ranks (of comm) that the last ddl_comm_agree or ddl_comm_shrink on comm agreed had
 * failed, ascending: up to capacity of them into ranks (may be NULL when capacity is 0), and
 * how many there are into *count. */
DDL_API ddl_result_t ddl_comm_failed_ranks(ddl_comm_t comm, int *ranks, int capacity, int *count);

/* A communicator of the live ranks of comm, ranked in their order in comm, in *newcomm; comm
 * is revoked and can only be destroyed (after the shrink; its rank numbers stay valid for
 * ddl_comm_failed_ranks). The ranks in exclude (nexclude of them, the same on every caller; NULL
 * and 0 for none) are left out as if they had failed and must not call. Every survivor ends
 * with the same members: a rank that dies during the shrink is agreed away too. A side of a
 * network partition that holds no majority of the ranks (exactly half with comm's lowest
 * rank counts) fails with DDL_ERR_REMOTE instead of making a second job; DDL_SHRINK_QUORUM=none
 * lets any survivors go on. The new communicator is independent of comm (its own sequence
 * numbers, shared memory and token, as after ddl_comm_split; nothing sent on comm reaches it),
 * but keeps the network connections comm had to its members, so that no endpoint is made in
 * the middle of a recovery (DDL_SHRINK_KEEP_CONNECTIONS=0 makes new ones); comm's destroy
 * leaves them to it. */
DDL_API ddl_result_t ddl_comm_shrink(ddl_comm_t comm, const int *exclude, int nexclude,
                                     ddl_comm_t *newcomm);

/* A communicator of new_size ranks: comm's ranks keep their rank, and new_size - nranks new
 * processes join as ranks nranks .. new_size-1 by calling ddl_comm_init (or
 * ddl_comm_init_from_env) with new_size, their rank, the same root_addr and the job's token
 * (DDL_JOB_TOKEN, or the config's, as comm's ranks were given at init). comm's rank 0 serves
 * the rendezvous at root_addr ("host:port"). Collective over comm's ranks and the new ones;
 * comm stays usable. A failed comm must be shrunk first. */
DDL_API ddl_result_t ddl_comm_grow(ddl_comm_t comm, int new_size, const char *root_addr,
                                   ddl_comm_t *newcomm);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DDL_DDL_H */
