#!/bin/bash
# panel-harness.sh: the independent measurement behind the panel's
# expectations (testdata/panel/panel.yaml). It uses none of patchbot's
# suite code: a busybox initramfs (scripts/panel-harness/init), tracefs, a
# squashfs image made by mksquashfs with its default options (gzip, 128 KiB
# blocks, fragments; the kernel's 3 fragment and 8 metadata cache
# entries), and QEMU started here by hand, as the seeds' authors did
# (seed 000: a packaged image, caches dropped each iteration; seed 003:
# find | xargs -P N cat).
#
#   scripts/panel-harness.sh OUTDIR SRC BOOTS NAME=BZIMAGE [NAME=BZIMAGE...]
#
# SRC is the tree the image is made of (a directory; /usr/include of the
# host by default elsewhere). Each kernel boots BOOTS times, the kernels in
# turn (A B C A B C ...), each boot ITER (3) iterations of each workload.
# OUTDIR gets image.sqsh, one console log per boot and results.tsv:
#   kernel boot workload iter secs wakings squashfs_wakings release_wakings
# Needs qemu-system-x86_64, mksquashfs, cpio and a static busybox.
set -euo pipefail
[ $# -ge 4 ] || { sed -n '2,18p' "$0" >&2; exit 2; }
out=$1 src=$2 boots=$3; shift 3
here=$(cd "$(dirname "$0")" && pwd)
busybox=${BUSYBOX:-/bin/busybox}
iter=${ITER:-3} par=${PAR:-64} cpus=${CPUS:-2} mem=${MEM:-1024}
mkdir -p "$out"
if [ ! -s "$out/image.sqsh" ]; then
	mksquashfs "$src" "$out/image.sqsh" -noappend -quiet -no-progress >/dev/null
fi
unsquashfs -s "$out/image.sqsh" > "$out/image.txt"
if [ ! -s "$out/harness.cpio" ]; then
	d=$(mktemp -d)
	mkdir -p "$d/bin" "$d/proc" "$d/sys" "$d/dev" "$d/mnt"
	cp "$busybox" "$d/bin/busybox"
	cp "$here/panel-harness/init" "$d/init"
	chmod 755 "$d/init" "$d/bin/busybox"
	(cd "$d" && find . | cpio -o -H newc --quiet) > "$out/harness.cpio"
	rm -rf "$d"
fi
tsv=$out/results.tsv
[ -s "$tsv" ] || printf 'kernel\tboot\tworkload\titer\tsecs\twakings\tsquashfs_wakings\trelease_wakings\n' > "$tsv"
for b in $(seq 1 "$boots"); do
	for kv in "$@"; do
		name=${kv%%=*} bz=${kv#*=}
		log=$out/$name-$b.log
		if grep -q HARNESS-END "$log" 2>/dev/null; then continue; fi
		echo "$(date -u +%T) boot $b/$boots $name" >&2
		timeout 1800 qemu-system-x86_64 -machine pc -nodefaults -no-user-config \
			-display none -vga none -no-reboot -smp "$cpus" -m "$mem" \
			-accel tcg,thread=multi -cpu max \
			-kernel "$bz" -initrd "$out/harness.cpio" \
			-append "console=ttyS0 panic=-1 quiet rdinit=/init harness.iter=$iter harness.par=$par" \
			-drive "file=$out/image.sqsh,format=raw,if=none,id=vd0,readonly=on" \
			-device virtio-blk-pci,drive=vd0 \
			-serial stdio -nic none < /dev/null > "$log" 2>&1 || true
		grep -q HARNESS-END "$log" || { echo "boot $b of $name did not finish: $log" >&2; continue; }
		sed -n 's/\r$//; s/^RESULT //p' "$log" | awk -v k="$name" -v b="$b" '{
			split($0, f, " "); row=k "\t" b
			for (i = 1; i <= 6; i++) { split(f[i], kv, "="); row = row "\t" kv[2] }
			print row }' >> "$tsv"
	done
done
# medians per kernel and workload
awk -F'\t' 'NR > 1 { k=$1 "\t" $3; n[k]++; s[k, n[k]]=$5; w[k, n[k]]=$7; r[k, n[k]]=$8; keys[k]=1 }
function med(a, k, m,   i, j, t, v) { for (i = 1; i <= m; i++) v[i]=a[k, i]
	for (i = 1; i <= m; i++) for (j = i+1; j <= m; j++) if (v[j] < v[i]) { t=v[i]; v[i]=v[j]; v[j]=t }
	return m % 2 ? v[(m+1)/2] : (v[m/2] + v[m/2+1]) / 2 }
END { print "kernel\tworkload\truns\tsecs_median\tsquashfs_wakings_median\trelease_wakings_median"
	for (k in keys) printf "%s\t%d\t%.2f\t%d\t%d\n", k, n[k], med(s, k, n[k]), med(w, k, n[k]), med(r, k, n[k]) }' "$tsv" | sort > "$out/summary.tsv"
cat "$out/summary.tsv"
