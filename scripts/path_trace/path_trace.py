#!/usr/bin/env python3
"""The path of one traced call through ddl's source files (README.md says what and why).

  path_trace.py symbolize TRACE SRC > SYM   a trace of tracer.c's as "E|X DEPTH FILE FUNCTION"
                                            lines (FILE relative to the source tree SRC), from
                                            the traced call's entry to the payload (STOP_AT)
  path_trace.py analyze SYM [--fold-headers] [--tree]
                                            one symbolized path's counts, or its call tree
  path_trace.py report DIR OLD NEW          the table over DIR's {old,new}_COUNT_RUN.sym and
                                            .log files (measure.sh's); OLD, NEW: the revisions
"""
import collections
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

# The path ends at the entry of the first function that moves the payload: from there on the
# calls are the data's (a copy, a reduction loop), not the way to it. That entry is counted,
# the function's callees are not.
STOP_AT = [
    'ddl::FlatSlots::publish(',       # flat: the input copied into this rank's shared slot
    'ddl::PeerBuffers::read(',        # direct: a peer's input read (process_vm_readv)
    'ddl::PeerBuffers::write(',       # direct: this rank's part written into a peer's output
    'ddl::reduce(',                   # any way: the reduction kernels' entry
    'ddl::ShmTransport::post_send(',  # a schedule over shared memory: its first send
    'ddl::UcxTransport::post_send(',  # a schedule over UCX: its first send
]
# The direct way first exchanges buffer addresses through the transport: a send under this is
# a message of addresses, not payload, and does not end the path.
NOT_PAYLOAD_UNDER = ['ddl::PeerBuffers::publish(']
# Where a rank waits for its peer. prog.c's rank 0 arrives last, so its path should have none.
WAIT = 'ddl::idle_pause('
HEADER_SUFFIXES = ('.h', '.hh', '.hpp', '.inl')


# ---- symbolize: addresses to functions and their files ---------------------------------------

def read_trace(path):
    """The trace's mappings [(low, high, object path)] and events [('E'|'X', address)]."""
    mappings, events = [], []
    with open(path) as trace:
        for line in trace:
            kind, rest = line[0], line[2:].rstrip('\n')
            if kind == 'M':  # a /proc/self/maps line: low-high perms offset dev inode [path]
                fields = rest.split(None, 5)
                low, high = (int(x, 16) for x in fields[0].split('-'))
                mappings.append((low, high, fields[5] if len(fields) > 5 else ''))
            elif kind in 'EX':
                events.append((kind, int(rest, 16)))
            elif kind == 'D' and int(rest) > 0:
                sys.exit('%s: %s events dropped (tracer.c MAX_EVENTS)' % (path, rest))
    return mappings, events


def functions_in(object_path, addresses):
    """{address in the object: (defining file, name)}, from gdb (gdb_functions.py says why)."""
    with tempfile.NamedTemporaryFile('w', suffix='.addresses') as listing:
        listing.write(''.join('%x\n' % a for a in addresses))
        listing.flush()
        out = subprocess.run(
            ['gdb', '-batch', '-nx', '-x', os.path.join(HERE, 'gdb_functions.py'), object_path],
            env=dict(os.environ, PATH_TRACE_ADDRESSES=listing.name),
            capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        if line.startswith('fn\t'):
            _, address, file, name = line.split('\t', 3)
            found[int(address, 16)] = (file, name)
    if len(found) != len(addresses):
        sys.exit('gdb named %d of %d functions in %s' % (len(found), len(addresses), object_path))
    return found


def symbolize(trace_path, source_root):
    mappings, events = read_trace(trace_path)
    # An object's addresses count from its lowest mapping (a shared library, or a
    # position-independent executable, is linked at 0).
    load_base = {}
    for low, _, path in mappings:
        if path and low < load_base.get(path, low + 1):
            load_base[path] = low

    def locate(address):
        for low, high, path in mappings:
            if low <= address < high and path:
                return path, address - load_base[path]
        return None, address

    where = {a: locate(a) for a in {a for _, a in events}}
    by_object = collections.defaultdict(set)
    for path, offset in where.values():
        by_object[path].add(offset)
    root = os.path.realpath(source_root) + os.sep
    named = {}  # (object, offset) -> (file, function)
    for path, offsets in by_object.items():
        found = functions_in(path, sorted(offsets)) if path else {o: ('??', '??') for o in offsets}
        for offset, (file, name) in found.items():
            file = os.path.realpath(file) if file != '??' else file
            named[(path, offset)] = (file[len(root):] if file.startswith(root) else file, name)
    path = until_payload(((kind,) + named[where[a]] for kind, a in events), trace_path)
    for kind, depth, file, function in path:
        print('%s\t%d\t%s\t%s' % (kind, depth, file, function))


def until_payload(events, where):
    """(kind, depth, file, function) for each event (kind, file, function) from the traced
    call's entry to the entry of the first payload-moving function (STOP_AT), that entry
    included; the rest of the trace (the payload's own calls) is left out."""
    stack = []
    for kind, file, function in events:
        if kind == 'X':
            stack.pop()
        yield kind, len(stack), file, function
        if kind == 'E':
            stack.append(function)
            if any(function.startswith(s) for s in STOP_AT) and not any(
                    f.startswith(p) for f in stack for p in NOT_PAYLOAD_UNDER):
                return
    sys.exit('%s: no payload-moving function (STOP_AT) in the trace' % where)


# ---- analyze: the files the path goes through ------------------------------------------------

def read_path(sym_path):
    """A symbolized path's events [(kind, depth, file, function)]."""
    with open(sym_path) as sym:
        return [tuple(line.rstrip('\n').split('\t', 3)) for line in sym]


def file_runs(path, fold_headers):
    """The files the path is in, in order, repeats merged: after an entry the callee's file,
    after an exit the caller's. With fold_headers, a function defined in a header does not
    change the file: the innermost caller defined elsewhere (a .cc) stays current."""
    runs, stack = [], []
    for kind, _, file, _ in path:
        if kind == 'E':
            stack.append(file)
        else:
            stack.pop()
        current = next((f for f in reversed(stack)
                        if not (fold_headers and f.endswith(HEADER_SUFFIXES))), None)
        if current is not None and (not runs or runs[-1] != current):
            runs.append(current)
    return runs


def counts(path, fold_headers):
    runs = file_runs(path, fold_headers)
    seen, reentered = set(), collections.Counter()
    for file in runs:
        if file in seen:
            reentered[file] += 1  # a re-entry: back in a file the path had already left
        seen.add(file)
    return {
        'calls': sum(1 for event in path if event[0] == 'E'),
        'waits': sum(1 for event in path if event[0] == 'E' and event[3].startswith(WAIT)),
        'switches': len(runs) - 1,
        'reentries': sum(reentered.values()),
        'distinct': len(seen),
        'reentered': reentered,
        'runs': runs,
        'first_entries': list(dict.fromkeys(runs)),
    }


def most_reentered(c, n=5):
    return ', '.join('%s %d' % fc for fc in c['reentered'].most_common(n)) or '-'


def analyze(sym_path, fold_headers, tree):
    path = read_path(sym_path)
    if tree:
        for kind, depth, file, function in path:
            if kind == 'E':
                print('%s%s  [%s]' % ('  ' * int(depth), function, file))
        return
    c = counts(path, fold_headers)
    print('stop: %s [%s]' % (path[-1][3], path[-1][2]))
    print('calls %(calls)d  waits %(waits)d  switches %(switches)d  reentries %(reentries)d  '
          'distinct %(distinct)d' % c)
    print('re-entered most: ' + most_reentered(c))
    print('first entries: ' + ' > '.join(c['first_entries']))
    print('runs: ' + ' > '.join(c['runs']))


# ---- report: both revisions, both sizes, both modes ------------------------------------------

def report(out_dir, old_label, new_label):
    cases = collections.defaultdict(list)  # (rev, count) -> [(run, sym path)]
    for name in os.listdir(out_dir):
        m = re.fullmatch(r'(old|new)_(\d+)_(\d+)\.sym', name)
        if m:
            cases[(m[1], int(m[2]))].append((int(m[3]), os.path.join(out_dir, name)))
    print('old = %s\nnew = %s\n' % (old_label, new_label))
    row = '%-4s %-6s %-7s %6s   %8s %9s %8s   %8s %9s %8s   %-20s %s'
    print('%-26s   %-27s   %s' % ('', 'A: every file', 'B: headers folded'))
    print(row % ('rev', 'size', 'way', 'calls', 'switches', 'reentries', 'distinct',
                 'switches', 'reentries', 'distinct', 'stop', 'runs'))
    details = []
    for rev, count in sorted(cases, key=lambda rc: (rc[1], rc[0] != 'old')):
        runs = sorted(cases[(rev, count)])
        paths = [read_path(sym) for _, sym in runs]
        same = sum(1 for p in paths if p == paths[0])  # whole paths, call by call
        way = way_of(runs[0][1][:-len('.sym')] + '.log')
        a, b = counts(paths[0], False), counts(paths[0], True)
        print(row % (rev, size_text(4 * count), way.split(' ')[0], a['calls'],
                     a['switches'], a['reentries'], a['distinct'],
                     b['switches'], b['reentries'], b['distinct'],
                     paths[0][-1][3].split('(')[0].replace('ddl::', ''),
                     '%d of %d the same' % (same, len(paths))))
        details.append((rev, count, way, paths[0], a, b))
    for rev, count, way, path, a, b in details:
        print('\n== %s, %s (%d floats): %s' % (rev, size_text(4 * count), count, way))
        print('stop: %s [%s]; waits on the path: %d' % (path[-1][3], path[-1][2], a['waits']))
        print('A re-entered most: ' + most_reentered(a))
        print('B re-entered most: ' + most_reentered(b))
        print('B first entries: ' + ' > '.join(b['first_entries']))
        print('B runs: ' + ' > '.join(b['runs']))


def way_of(log_path):
    """The way rank 0's library chose, from its line 'ddl[0] info: allreduce of N B: WAY'."""
    with open(log_path) as log:
        for line in log:
            m = re.match(r'ddl\[0\] \w+: allreduce of \d+ B: (.*)', line)
            if m:
                return m[1]
    return '? (no "allreduce of" line in %s)' % log_path


def size_text(size):
    for unit, scale in (('MB', 1 << 20), ('KB', 1 << 10)):
        if size >= scale and size % scale == 0:
            return '%d %s' % (size // scale, unit)
    return '%d B' % size


def main(argv):
    flags = {a for a in argv if a.startswith('--')}
    args = [a for a in argv if not a.startswith('--')]
    if args[:1] == ['symbolize'] and len(args) == 3:
        symbolize(args[1], args[2])
    elif args[:1] == ['analyze'] and len(args) == 2:
        analyze(args[1], '--fold-headers' in flags, '--tree' in flags)
    elif args[:1] == ['report'] and len(args) == 4:
        report(*args[1:])
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main(sys.argv[1:])
