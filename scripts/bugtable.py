#!/usr/bin/env python3
# scripts/bugtable.py VMLINUX [PREFIX...]: counts the entries of the kernel's
# __bug_table (BUG() and WARN() sites) by source file, for files under
# the prefixes. x86-64, GENERIC_BUG_RELATIVE_POINTERS, DEBUG_BUGVERBOSE:
# struct bug_entry { s32 bug_addr_disp; s32 file_disp; u16 line; u16 flags; }
import struct, subprocess, sys, collections
path = sys.argv[1]; prefixes = sys.argv[2:] or ['']
data = open(path, 'rb').read()
# section headers via readelf
out = subprocess.run(['readelf', '-SW', path], capture_output=True, text=True).stdout
secs = {}
for line in out.splitlines():
    line = line.replace('[ ', '[')
    f = line.split()
    if len(f) > 6 and f[0].startswith('[') and f[0] != '[Nr]':
        name, addr, off, size = f[1], int(f[3], 16), int(f[4], 16), int(f[5], 16)
        secs[name] = (addr, off, size)
if '__bug_table' not in secs:
    print('no __bug_table: CONFIG_BUG is off'); sys.exit(0)
def read_at(vaddr, n):
    for name, (addr, off, size) in secs.items():
        if addr <= vaddr < addr + size and off:
            o = off + (vaddr - addr)
            return data[o:o+n]
    return b''
addr, off, size = secs['__bug_table']
counts = collections.Counter(); warns = collections.Counter(); total = 0
for i in range(0, size, 12):
    a = addr + i
    bug_disp, file_disp, line, flags = struct.unpack_from('<iiHH', data, off + i)
    s = read_at(a + 4 + file_disp, 256).split(b'\0')[0].decode(errors='replace')
    total += 1
    for p in prefixes:
        if s.startswith(p):
            counts[s] += 1
            if flags & 1: warns[s] += 1  # BUGFLAG_WARNING
print('bug table entries in all:', total)
for f in sorted(counts):
    print(f'{f}: {counts[f]} ({warns[f]} WARN, {counts[f]-warns[f]} BUG)')
