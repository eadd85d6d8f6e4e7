#!/bin/bash
# panel-harness-suites.sh: the independent measurement behind the panel's
# lock, FUSE and readahead expectations (testdata/panel/panel.yaml), as
# scripts/panel-harness.sh is for cache contention. It uses none of
# patchbot's suite code: a busybox initramfs (scripts/panel-harness/
# init-suites), tracefs kprobes, the harness's own programs and QEMU
# started here by hand.
#
#   scripts/panel-harness-suites.sh OUTDIR WORKLOAD BOOTS NAME=BZIMAGE [NAME=BZIMAGE...]
#
# WORKLOAD is one of
#   locks      lockloop (scripts/panel-harness/lockloop.c, gcc -static): N
#              processes take and drop one whole-file lock in a loop, fcntl
#              or flock, N = 1, 2, 5, 10, MS (1000) ms each; then the calls
#              of posix_lock_inode/flock_lock_inode and __wake_up per
#              acquisition, counted with kprobes in a pass of their own
#   fuse       fuseserve (scripts/panel-harness/fuseserve, go-fuse's
#              passthrough over a tmpfs) with one and four threads; the
#              shell creates (echo >), reads (read <) and stats ([ -e ])
#              FILES (200) files; then the synchronous requests by opcode
#   readahead  dd bs=1M of every file of three size buckets of a squashfs
#              image of text (mksquashfs defaults: gzip, 128 KiB blocks,
#              fragments) on a virtio disk, one reader and four, caches
#              dropped; then squashfs_readahead, squashfs_read_folio and
#              zlib_uncompress calls per bucket
# Each kernel boots BOOTS times, the kernels in turn (A B C A B C ...), each
# boot ITER (3) iterations. With ICOUNT=N the guest's clock counts
# instructions (QEMU -icount shift=N,sleep=off, single-threaded TCG), so
# that times measure the work done rather than the host's load; without it
# multi-threaded TCG on the host's clock. Each boot takes the shared heavy
# lock (LOCK, /tmp/patchbot-heavy.lock) and runs under nice NICE (10).
# OUTDIR gets one console log per boot and results.txt, one line per
# measurement: kernel=NAME boot=B workload=W k=v...
# scripts/panel-harness-suites-stat.py prints the table. Needs
# qemu-system-x86_64, cpio, a static busybox (busybox-static), gcc with a
# static libc, go, and for readahead mksquashfs.
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,36p' "$0" >&2; exit 2; }
out=$1 workload=$2 boots=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
busybox=${BUSYBOX:-/bin/busybox}
iter=${ITER:-3} cpus=${CPUS:-2} mem=${MEM:-1024}
lock=${LOCK:-/tmp/patchbot-heavy.lock} nice=${NICE:-10}
accel=(-accel tcg,thread=multi)
if [ -n "${ICOUNT:-}" ]; then
	# guest time counted in instructions (2^ICOUNT ns each), idle time
	# skipped: what the host's load does to the vCPU threads is not seen
	accel=(-accel tcg,thread=single -icount "shift=$ICOUNT,sleep=off")
fi
extra="harness.workload=$workload harness.iter=$iter"
[ -z "${MS:-}" ] || extra="$extra harness.ms=$MS"
[ -z "${FILES:-}" ] || extra="$extra harness.files=$FILES"
mkdir -p "$out"
cpio=$out/harness-$workload.cpio
if [ ! -s "$cpio" ]; then
	d=$(mktemp -d)
	mkdir -p "$d/bin" "$d/proc" "$d/sys" "$d/dev" "$d/mnt" "$d/tmp"
	cp "$busybox" "$d/bin/busybox"
	cp "$here/panel-harness/init-suites" "$d/init"
	gcc -O2 -static -Wall -o "$d/bin/lockloop" "$here/panel-harness/lockloop.c"
	(cd "$here/.." && CGO_ENABLED=0 go build -o "$d/bin/fuseserve" ./scripts/panel-harness/fuseserve)
	chmod 755 "$d/init" "$d/bin/busybox"
	(cd "$d" && find . | cpio -o -H newc --quiet) > "$cpio"
	rm -rf "$d"
fi
disk=()
if [ "$workload" = readahead ]; then
	if [ ! -s "$out/readahead.sqsh" ]; then
		d=$(mktemp -d)
		# text files cut from the host's headers: 16 of 130-250 KiB (two
		# blocks, the second partial), 8 of 520-1000 KiB, 4 of 2-4.5 MiB
		find /usr/include -name '*.h' -type f | LC_ALL=C sort | xargs cat > "$d/text"
		python3 - "$d" <<-'EOF'
			import os, random, sys
			d = sys.argv[1]; text = open(os.path.join(d, "text"), "rb").read()
			rng = random.Random(39)
			for bucket, n, lo, hi in (("small", 16, 130 << 10, 250 << 10), ("mid", 8, 520 << 10, 1000 << 10), ("large", 4, 2 << 20, 9 << 19)):
			    os.makedirs(os.path.join(d, "tree", bucket))
			    for i in range(n):
			        size = rng.randrange(lo, hi)
			        off = rng.randrange(0, len(text) - size)
			        open(os.path.join(d, "tree", bucket, "f%02d" % i), "wb").write(text[off:off + size])
		EOF
		mksquashfs "$d/tree" "$out/readahead.sqsh" -noappend -quiet -no-progress >/dev/null
		unsquashfs -s "$out/readahead.sqsh" > "$out/readahead-image.txt"
		rm -rf "$d"
	fi
	disk=(-drive "file=$out/readahead.sqsh,format=raw,if=none,id=vd0,readonly=on" -device virtio-blk-pci,drive=vd0)
fi
res=$out/results.txt
for b in $(seq 1 "$boots"); do
	for kv in "$@"; do
		name=${kv%%=*} bz=${kv#*=}
		log=$out/$workload-$name-$b.log
		if grep -q HARNESS-END "$log" 2>/dev/null; then continue; fi
		echo "$(date -u +%T) $workload boot $b/$boots $name (load $(cut -d' ' -f1 /proc/loadavg))" >&2
		flock "$lock" nice -n "$nice" timeout 1800 qemu-system-x86_64 -machine pc -nodefaults -no-user-config \
			-display none -vga none -no-reboot -smp "$cpus" -m "$mem" \
			"${accel[@]}" -cpu max \
			-kernel "$bz" -initrd "$cpio" \
			-append "console=ttyS0 panic=-1 quiet rdinit=/init $extra" \
			"${disk[@]}" -serial stdio -nic none < /dev/null > "$log" 2>&1 || true
		grep -q HARNESS-END "$log" || { echo "boot $b of $name did not finish: $log" >&2; continue; }
		grep -a HARNESS-ERROR "$log" >&2 || true
		sed -n 's/\r$//; s/^RESULT //p' "$log" | sed "s/^/kernel=$name boot=$b /" >> "$res"
	done
done
python3 "$here/panel-harness-suites-stat.py" "$res"
