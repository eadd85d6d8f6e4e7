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
# measures 5 rounds a side into OUTDIR/SUITE-K.json; a run the rule would
# have taken further (patchbot suite reach: "measured rounds ran out") is
# measured on to the rule's maximum (patchbot suite run --continue), so
# that each is judged as the pipeline would have stopped it. Runs measured
# already are kept. Guests with instruction-counted time measure the same
# whatever else the host runs, so JOBS runs (default 2) go at once. CLOCK
# (e.g. icount:0) is given to every run as --clock.
set -euo pipefail
out=${1:?usage: aa.sh OUTDIR [N [PROFILE [SUITES]]]} n=${2:-10} profile=${3:-standard}
suites=${4:-cache-contention,locks,fuse-waitq,readahead}
jobs=${JOBS:-2}
first=5
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

todo=()
for suite in ${suites//,/ }; do
	for k in $(seq 1 "$n"); do
		[ -s "$out/$suite-$k.json" ] || todo+=("$suite-$k:$suite")
	done
done
running=0
for t in "${todo[@]}"; do
	run "${t%%:*}" "${t#*:}" "$first" &
	running=$((running + 1))
	if ((running >= jobs)); then
		wait -n || true # a failed measurement is judged below, not the end of the rest
		running=$((running - 1))
	fi
done
wait

# Each run's file; NAME.first.json keeps a continued run's first rounds.
measured() {
	local f
	for f in "$out/$1"-[0-9]*.json; do
		[[ $f == *.first.json ]] || echo "$f"
	done
}

# On to the rule's maximum, where it would have gone on.
for f in $(for suite in ${suites//,/ }; do measured "$suite"; done); do
	name=$(basename "$f" .json)
	suite=${name%-*}
	if $pb suite reach --aa "$f" | grep -q 'measured rounds ran out'; then
		cp "$f" "$out/$name.first.json"
		run "$name" "$suite" $((max - first)) --continue "$out/$name.first.json"
	fi
done

for suite in ${suites//,/ }; do
	$pb suite reach --aa $(measured "$suite")
	$pb suite variance $(measured "$suite")
done
