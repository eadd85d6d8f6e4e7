#!/bin/bash
# aa.sh: measure A/A runs of each suite (the default base kernel on both
# sides, two VMs, rounds interleaved as the pipeline runs them) and print
# what the pipeline's rule makes of them: false positives, rounds a side,
# each primary metric's reach, and where the spread comes from.
#
#   scripts/aa.sh OUTDIR [N [PROFILE [SUITES]]]
#
# N runs of each suite (default 10), PROFILE (default standard, the
# pipeline's), SUITES a comma-separated list (default all four). Each run
# measures FIRST rounds a side (default 5) into OUTDIR/SUITE-K.json; while
# the rule would have taken it further (patchbot suite reach: "measured
# rounds ran out") it is measured on a round at a time, up to the rule's
# maximum (patchbot suite run --continue, a fresh boot a side each time),
# so that each is judged as the pipeline would have stopped it. A run is
# whole before the next in its job starts. Runs measured already are kept. Guests with instruction-counted time measure the same
# whatever else the host runs, so JOBS runs (default 2) go at once. CLOCK
# (e.g. icount:0) is given to every run as --clock.
# PATCHBOT is the binary (default: go run ./cmd/patchbot, this tree as it
# is at each step). For a campaign of hours build one in a clean export of
# the commit (git archive) and give it here: its guests' agent is built
# from the tree the binary was built in, which edits elsewhere cannot
# reach (a binary from a clean checkout refuses a tree moved since).
set -euo pipefail
out=${1:?usage: aa.sh OUTDIR [N [PROFILE [SUITES]]]} n=${2:-10} profile=${3:-standard}
suites=${4:-cache-contention,locks,fuse-waitq,readahead}
jobs=${JOBS:-2}
first=${FIRST:-5}
max=6 # stats.DefaultRule.Max
pb=${PATCHBOT:-go run ./cmd/patchbot}
mkdir -p "$out"

# The base kernel, built (or found cached) as the pipeline builds it.
if [ ! -s "$out/build.json" ]; then
	$pb build --mbox testdata/mbox/squashfs-thundering-herd.mbox --json < /dev/null > "$out/build.json.tmp"
	mv "$out/build.json.tmp" "$out/build.json"
fi
base=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["base"]["BzImage"])' "$out/build.json")

# run NAME SUITE ROUNDS [--continue FILE]
run() {
	local name=$1 suite=$2 rounds=$3
	shift 3
	echo "$(date -u +%T) $name: $rounds rounds a side $* (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	$pb suite run --suites "$suite" --profile "$profile" --kernel "$base" --vs "$base" \
		--runs "$rounds" ${CLOCK:+--clock "$CLOCK"} "$@" --json < /dev/null > "$out/$name.json.tmp" 2> "$out/$name.log"
	mv "$out/$name.json.tmp" "$out/$name.json"
	echo "$(date -u +%T) $name: done" >&2
}

# Each run's file; NAME.first.json keeps a continued run's first rounds.
measured() {
	local f
	for f in "$out/$1"-[0-9]*.json; do
		[[ $f == *.first.json || $f == *.before.json ]] || echo "$f"
	done
}

# one NAME SUITE: FIRST rounds, then on a round at a time while the rule
# would have gone on, to its maximum.
one() {
	local name=$1 suite=$2 f=$out/$1.json rounds
	[ -s "$f" ] || run "$name" "$suite" "$first" || return
	rounds=$(python3 -c 'import json,sys; print(max(s["round"] for r in json.load(open(sys.argv[1]))["results"] for s in r["samples"]))' "$f")
	while ((rounds < max)) && [[ $($pb suite reach --aa "$f") == *'measured rounds ran out'* ]]; do
		[ -s "$out/$name.first.json" ] || cp "$f" "$out/$name.first.json"
		cp "$f" "$out/$name.before.json"
		run "$name" "$suite" 1 --continue "$out/$name.before.json" || return
		rm "$out/$name.before.json"
		rounds=$((rounds + 1))
	done
}

todo=()
for suite in ${suites//,/ }; do
	for k in $(seq 1 "$n"); do
		todo+=("$suite-$k:$suite")
	done
done
running=0
for t in "${todo[@]}"; do
	one "${t%%:*}" "${t#*:}" &
	running=$((running + 1))
	if ((running >= jobs)); then
		wait -n || true # a failed measurement is judged below, not the end of the rest
		running=$((running - 1))
	fi
done
wait

for suite in ${suites//,/ }; do
	$pb suite reach --aa $(measured "$suite")
	$pb suite variance $(measured "$suite")
done
