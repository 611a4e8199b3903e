# Runs inside gdb, not on its own:
#   PATH_TRACE_ADDRESSES=FILE gdb -batch -nx -x gdb_functions.py OBJECT
# For each function entry address in FILE (hex, one a line, as addresses in OBJECT), prints
#   fn<TAB>ADDRESS<TAB>DEFINING FILE<TAB>NAME
# The defining file is the function's DW_AT_decl_file (gdb's Symbol.symtab), read by gdb's own
# DWARF reader. Not addr2line's: that of binutils 2.40 (Debian 12's; sourceware bug 30783)
# starts each sequence of a DWARF 5 line table at file 0, the unit's .cc, where the standard
# says file 1; GCC leaves the file unset in a sequence whose file is 1, so a function from the
# header GCC numbered 1 in the kept object (ddl::valid_datatype: datatype.h in datatype.cc's
# object) came out as the .cc. A function whose DIE has no decl_file (a lambda's operator(),
# which gdb then gives the unit's .cc and line 0), or that has no DIE at all (the TLS wrapper
# GCC makes for a thread_local), takes the file of the line table's row at its entry.
# The name is the demangled symbol's (as nm -C or addr2line -C print it).
import os

import gdb


def defining_file(address):
    try:
        block = gdb.block_for_pc(address)
    except RuntimeError:
        block = None
    while block is not None and block.function is None:
        block = block.superblock
    function = block.function if block is not None else None
    if function is not None and function.line > 0 and function.symtab is not None:
        return function.symtab.fullname()
    row = gdb.find_pc_line(address)
    return row.symtab.fullname() if row.symtab is not None else '??'


def symbol_name(address):
    text = gdb.execute('info symbol %#x' % address, to_string=True).strip()
    if text.startswith('No symbol matches'):
        return '??'
    return text.split(' in section ')[0]


for line in open(os.environ['PATH_TRACE_ADDRESSES']):
    address = int(line, 16)
    print('fn\t%x\t%s\t%s' % (address, defining_file(address), symbol_name(address)))
