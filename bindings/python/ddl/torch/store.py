"""The job's torch.distributed store in a process of its own, for `ddlrun --torch-store`:

    python -m ddl.torch.store --port PORT [--host HOST] [--watch-pid PID]

hosts a TCPStore server (as torchrun's agent does) and prints "ddl.torch.store: ready on
HOST:PORT" once it listens; it serves until SIGTERM, SIGINT or SIGHUP, or until process PID
has ended (DDL_TORCH_STORE=process: the launcher's daemon of rank 0, ddl/_launch_env.py). The ranks connect to it
as clients (MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE=True), so it outlives any
rank, rank 0 included.
"""

import argparse
import datetime
import os
import signal
import sys
import threading

import torch.distributed as dist


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1", help="the address in the ready line")
    p.add_argument("--watch-pid", type=int, default=0, help="serve until this process ends")
    args = p.parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    store = dist.TCPStore(args.host, args.port, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=60))
    # One write for the whole line (print writes the text and its newline apart when Python
    # runs unbuffered), then nothing more on stdout: the launcher closes its end once it has
    # read the line, and a later write would kill the store with a broken pipe.
    sys.stdout.write(f"ddl.torch.store: ready on {args.host}:{args.port}\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    while not stop.wait(1.0):
        if args.watch_pid and not os.path.exists(f"/proc/{args.watch_pid}"):
            break
    del store


if __name__ == "__main__":
    main()
