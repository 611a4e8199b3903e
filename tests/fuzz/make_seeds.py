#!/usr/bin/env python3
"""Writes the seed corpora in tests/fuzz/corpus/<target>/ (a few small files each).

Run from anywhere: python3 tests/fuzz/make_seeds.py. The files are checked in; this script
says how they were made and remakes them after a wire-format change.
"""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC = 0x44444C42
VERSION = 2  # lib/bootstrap/wire.h, kVersion
TOKEN = b"fuzz-token"


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def hello(rank, nranks, token=TOKEN, magic=MAGIC, version=VERSION):
    return struct.pack(">IHHII", magic, version, len(token), rank, nranks) + token


def frame(op, seq, n):
    return struct.pack(">IIII", MAGIC, op, seq, n)


def ack(code, nranks):
    return struct.pack(">IHHI", MAGIC, VERSION, code, nranks)


def main():
    for i, s in enumerate(["4096", "64K", "2mb", "1G", "-17", " 42", "18446744073709551615"]):
        write("fuzz_params", "s%d" % i, s)
    write("fuzz_params", "bounds", b"#" + struct.pack("<qq", -5, 100) + b"77")

    for i, s in enumerate(["float32", "BF16", "half", "sum", "avg", "int8\0junk"]):
        write("fuzz_datatype", "s%d" % i, s)

    for i, s in enumerate(["127.0.0.1:29500", "[::1]:80", "[fe80::1%eth0]:1", "node-3.cluster:0",
                           "host"]):
        write("fuzz_host_port", "s%d" % i, s)

    p1 = "ddl-placement/1 host=n1 id=boot:abc socket=0 numa=1 switch=0000:02:00.0 gpu=-"
    p2 = "ddl-placement/1 host=n2 id=boot:def socket=-1 numa=-1 switch=- gpu=0:3b:00.0"
    write("fuzz_placement", "one", p1)
    write("fuzz_placement", "padded", p1.encode() + b"\0" * 40)
    write("fuzz_placement", "three", p1.encode() + b"\xff" + p2.encode() + b"\xff" + p1.encode())

    # launch env: records of (index into kVars, value, NUL); see fuzz_launch_env.cc.
    V = ["DDL_RANK", "DDL_WORLD_SIZE", "DDL_ROOT", "DDL_JOB_TOKEN", "DDL_LOCAL_RANK",
         "DDL_LOCAL_SIZE", "DDL_RENDEZVOUS_DIR", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
         "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_MCA_ess_base_jobid",
         "PMIX_NAMESPACE", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK",
         "LOCAL_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_LOCALID",
         "SLURM_NODEID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_JOB_ID",
         "SLURM_STEP_ID", "HOME", "PMI_RANK", "PMIX_RANK", "PMIX_SERVER_URI2",
         "PMIX_SERVER_URI41", "DDL_PMIX", "DDL_ROOT_HOST"]

    def env(**kv):
        return b"".join(bytes([V.index(k)]) + v.encode() + b"\0" for k, v in kv.items())

    write("fuzz_launch_env", "ddl", env(DDL_RANK="1", DDL_WORLD_SIZE="4", DDL_ROOT="127.0.0.1:29500",
                                        DDL_JOB_TOKEN="t"))
    write("fuzz_launch_env", "mpirun", env(OMPI_COMM_WORLD_RANK="0", OMPI_COMM_WORLD_SIZE="2",
                                           OMPI_COMM_WORLD_LOCAL_RANK="0",
                                           OMPI_COMM_WORLD_LOCAL_SIZE="2",
                                           OMPI_MCA_ess_base_jobid="prterun-vm-1@1"))
    write("fuzz_launch_env", "mpirun_pmix", env(OMPI_COMM_WORLD_RANK="1", OMPI_COMM_WORLD_SIZE="4",
                                                OMPI_MCA_ess_base_jobid="562954241",
                                                PMIX_NAMESPACE="562954241", PMIX_RANK="1",
                                                PMIX_SERVER_URI41="562954240.0;tcp4://127.0.0.1:1",
                                                DDL_ROOT_HOST="eth0", DDL_PMIX="1"))
    write("fuzz_launch_env", "torchrun", env(RANK="3", WORLD_SIZE="8", MASTER_ADDR="node0",
                                             MASTER_PORT="29500", LOCAL_RANK="3",
                                             LOCAL_WORLD_SIZE="4"))
    write("fuzz_launch_env", "slurm", env(SLURM_PROCID="5", SLURM_NTASKS="6", SLURM_LOCALID="1",
                                          SLURM_NODEID="2", SLURM_TASKS_PER_NODE="2(x3)",
                                          SLURM_JOB_ID="77", SLURM_STEP_ID="0"))

    # config: flags, size, version u16, timeout u32, chunk u64, log_level, then 5 strings.
    def config(flags, size, version, timeout, chunk, level, *strings):
        return (bytes([flags, size]) + struct.pack("<HIQb", version, timeout, chunk, level) +
                b"".join(s.encode() + b"\0" for s in strings))

    write("fuzz_config", "defaults", config(32 | 64, 0, 1, 0, 0, -1, "", "", "", ""))
    write("fuzz_config", "env", config(1 | 2 | 4 | 8, 0, 1, 0, 0, -1, "60000", "1M", "secret", ""))
    write("fuzz_config", "fields", config(16 | 32, 0, 1, 1500, 65536, 2, "", "", "", "tok"))
    write("fuzz_config", "short", config(0, 20, 1, 1500, 65536, 2, "", "", "", ""))
    write("fuzz_config", "algo", config(128 | 32 | 64, 0, 1, 0, 0, -1, "", "", "", "", "rd"))
    write("fuzz_config", "bad_algo", config(128 | 1, 0, 1, 0, 0, -1, "", "", "", "", "RING"))

    write("fuzz_wire_hello", "valid", hello(1, 2))
    write("fuzz_wire_hello", "wrong_token", hello(1, 2, b"nope"))
    write("fuzz_wire_hello", "wrong_nranks", hello(1, 3))
    write("fuzz_wire_hello", "bad_magic", b"GET / HTTP/1.0\r\n\r\n")

    # root frames: pick byte (bits 0-1: op count - 1, mod 3; bit 2+i: op i is an allgather).
    write("fuzz_wire_root_frames", "allgather", bytes([0 | 4]) + frame(1, 1, 3) + b"xyz")
    write("fuzz_wire_root_frames", "ag_barrier_ag", bytes([2 | 4 | 16]) + frame(1, 1, 2) + b"hi" +
          frame(2, 2, 0) + frame(1, 3, 0))
    write("fuzz_wire_root_frames", "mismatch", bytes([0]) + frame(1, 1, 0))

    # peer: nranks-2, ops, mode (1: genuine ack first), then what rank 0 sends.
    def reply(seq, blobs):  # the lengths, then the blobs end to end
        return (frame(1, seq, len(blobs)) + b"".join(struct.pack(">I", len(b)) for b in blobs) +
                b"".join(blobs))

    write("fuzz_wire_peer", "allgather", bytes([0, 4, 1]) + reply(1, [b"r0", b"pp"]))
    write("fuzz_wire_peer", "barrier_then_ag", bytes([1, 1 | 8, 1]) + frame(2, 1, 0) +
          reply(2, [b"a", b"bb", b"ccc"]))
    write("fuzz_wire_peer", "error_frame", bytes([0, 4, 1]) + frame(3, 1, 9) + b"rank 2 ..")
    write("fuzz_wire_peer", "refused", bytes([0, 4, 0]) + ack(2, 2))
    write("fuzz_wire_peer", "raw_ack", bytes([0, 0, 0]) + ack(0, 2) + frame(2, 1, 0))

    # The wire decoders called directly (no sockets). hello: byte 0 = token index (0:
    # "fuzz-token", 1: "", 2: "x", 3: 256 x "T") | (nranks - 1) << 2; byte 1 = bytes per read.
    write("fuzz_hello", "valid", bytes([4, 0]) + hello(1, 2))
    write("fuzz_hello", "split", bytes([4, 3]) + hello(1, 2))
    write("fuzz_hello", "empty_token", bytes([1 | 4, 1]) + hello(1, 2, b""))
    write("fuzz_hello", "long_token", bytes([3 | 12, 7]) + hello(2, 4, b"T" * 256))
    write("fuzz_hello", "wrong_token", bytes([4, 0]) + hello(1, 2, b"nope"))
    write("fuzz_hello", "wrong_nranks", bytes([4, 0]) + hello(1, 3))
    write("fuzz_hello", "bad_rank", bytes([4, 0]) + hello(0, 2))
    write("fuzz_hello", "bad_magic", bytes([4, 0]) + b"GET / HTTP/1.0\r\n\r\n")
    # root frames: as fuzz_wire_root_frames, bits 5-7 of the pick byte: the peer's rank - 1.
    write("fuzz_root_frames", "allgather", bytes([0 | 4]) + frame(1, 1, 3) + b"xyz")
    write("fuzz_root_frames", "ag_barrier_ag", bytes([2 | 4 | 16 | 64]) + frame(1, 1, 2) + b"hi" +
          frame(2, 2, 0) + frame(1, 3, 0))
    write("fuzz_root_frames", "mismatch", bytes([0]) + frame(1, 1, 0))
    write("fuzz_root_frames", "too_long", bytes([4]) + frame(1, 1, 65537))
    # peer reply: as fuzz_wire_peer.
    write("fuzz_peer_reply", "allgather", bytes([0, 4, 1]) + reply(1, [b"r0", b"pp"]))
    write("fuzz_peer_reply", "barrier_then_ag", bytes([1, 1 | 8, 1]) + frame(2, 1, 0) +
          reply(2, [b"a", b"bb", b"ccc"]))
    write("fuzz_peer_reply", "error_frame", bytes([0, 4, 1]) + frame(3, 1, 9) + b"rank 2 ..")
    write("fuzz_peer_reply", "error_cut", bytes([0, 4, 1]) + frame(3, 1, 9) + b"ra")
    write("fuzz_peer_reply", "refused", bytes([0, 4, 0]) + ack(2, 2))
    write("fuzz_peer_reply", "raw_ack", bytes([0, 0, 0]) + ack(0, 2) + frame(2, 1, 0))

    # signature: received CallSignature, own CallSignature (24 bytes each, little-endian
    # struct layout), received length (u64), FailureNotice (512 bytes).
    def sig(collective, seq, count, dtype=8, op=0, root=0, magic=0x64646C53):
        return struct.pack("<IIBBBBiQ", magic, seq, collective, dtype, op, 0, root, count)

    def notice(text, length=None, magic=0x64646C4E):
        body = text.encode()
        return struct.pack("<IiIiI", magic, 2, 7, 5, len(body) if length is None else length) + \
            body.ljust(492, b"\0")

    n = notice("rank 2 called allreduce #7 (count 4, float32, sum)")
    write("fuzz_signature", "same", sig(0, 7, 4) + sig(0, 7, 4) + struct.pack("<Q", 512) + n)
    write("fuzz_signature", "differ", sig(1, 7, 4, root=1) + sig(1, 7, 4, root=0) +
          struct.pack("<Q", 512) + n)
    write("fuzz_signature", "short", sig(4, 1, 0) + sig(2, 1, 9) + struct.pack("<Q", 100) + n)
    write("fuzz_signature", "garbage", sig(9, 1, 0, dtype=200, op=99, magic=1) + sig(3, 1, 0) +
          struct.pack("<Q", 512) + notice("x", length=5000))

    # modes: collective (mod 5), nranks - 1 (mod 64), then the string.
    for name, data in [("ring", bytes([0, 3]) + b"ring"), ("rd", bytes([0, 7]) + b"rd"),
                       ("auto", bytes([2, 1])), ("chain", bytes([1, 4]) + b"chain"),
                       ("barrier", bytes([4, 5]) + b"dissemination"),
                       ("gdr", bytes([3, 2]) + b"pxb"), ("other", bytes([4, 2]) + b"RING")]:
        write("fuzz_modes", name, data)


if __name__ == "__main__":
    main()
