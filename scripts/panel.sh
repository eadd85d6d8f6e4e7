#!/bin/bash
# panel.sh: measure the panel of known-effect patches (testdata/panel/
# panel.yaml) with a profile and print its table.
#
#   scripts/panel.sh OUTDIR [RUNS [PROFILE]]
#
# For each patch: build it on the cached default base (patchbot build),
# then run its suite, base against patched, RUNS fixed rounds a side
# (default 5) into OUTDIR/NAME.json; patches measured already are kept.
# Then each patch whose rounds ran out before the rule would have stopped
# (`patchbot panel --unfinished`) is measured on, a round at a time, to at
# most the rule's maximum of 6 (`patchbot suite run --continue`), so that
# the table is what the rule would give: it never looks past the round a
# patch stopped at. RUNS=3 (the rule's first look) costs each patch the
# rounds the pipeline's run would take. Last, `patchbot
# panel OUTDIR` judges every patch with the sequential rule, as the
# pipeline would have stopped it, and prints the table that docs/suites.md
# keeps. PROFILE (default: each suite's standard, the pipeline's) is given
# to every suite that has it, so that a candidate profile is measured on
# the same panel. Builds go one at a time; JOBS measurements (default 2)
# run at once, since guests with instruction-counted time measure the same
# whatever else the host runs (with real time, set JOBS=1). SUITES (a
# comma-separated list) measures only those suites' patches, NAMES only
# those patches, and the table is then of what OUTDIR holds (`patchbot
# panel --measured`). CLOCK (e.g. icount:0) is given to every run as
# --clock.
# PATCHBOT is the binary (default: go run ./cmd/patchbot, this tree as it
# is at each step). For a campaign of hours build one in a clean export of
# the commit (git archive) and give it here: its guests' agent is built
# from the tree the binary was built in, which edits elsewhere cannot
# reach (a binary from a clean checkout refuses a tree moved since).
set -euo pipefail
out=${1:?usage: panel.sh OUTDIR [RUNS [PROFILE]]} runs=${2:-5} profile=${3:-standard}
max=6 # stats.DefaultRule.Max
jobs=${JOBS:-2}
pb=${PATCHBOT:-go run ./cmd/patchbot}
mkdir -p "$out"
profiles=$($pb suite list)

# build NAME MBOX
build() {
	local name=$1 mbox=$2
	if [ ! -s "$out/$name.build.json" ]; then
		echo "$(date -u +%T) $name: building" >&2
		$pb build --mbox "$mbox" --json < /dev/null > "$out/$name.build.json.tmp"
		mv "$out/$name.build.json.tmp" "$out/$name.build.json"
	fi
}

# measure NAME SUITE ROUNDS [--continue FILE]
measure() {
	local name=$1 suite=$2 n=$3
	shift 3
	read -r base patched < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["base"]["BzImage"], d["patched"]["BzImage"])' "$out/$name.build.json")
	local p=quick
	if grep -q "^$suite .*\b$profile\b" <<< "$profiles"; then p=$profile; fi
	echo "$(date -u +%T) $name: $suite $p, $n rounds a side $* (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	$pb suite run --suites "$suite" --profile "$p" --kernel "$base" --vs "$patched" \
		--runs "$n" ${CLOCK:+--clock "$CLOCK"} "$@" --json < /dev/null > "$out/$name.json.tmp" 2> "$out/$name.log"
	mv "$out/$name.json.tmp" "$out/$name.json"
	echo "$(date -u +%T) $name: done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
}

running=0
# only SUITE NAME: whether SUITES and NAMES (comma-separated) let it in.
only() {
	{ [ -z "${SUITES:-}" ] || [[ ",$SUITES," == *",$1,"* ]]; } &&
		{ [ -z "${NAMES:-}" ] || [[ ",$NAMES," == *",$2,"* ]]; }
}
while read -r name suite mbox; do
	only "$suite" "$name" || continue
	[ -s "$out/$name.json" ] && continue
	build "$name" "$mbox"
	measure "$name" "$suite" "$runs" &
	running=$((running + 1))
	if ((running >= jobs)); then
		wait -n || true # a failed measurement is judged below, not the end of the rest
		running=$((running - 1))
	fi
done < <($pb panel --list)
wait
# One round at a time, so that a patch costs the rounds the rule takes.
for ((k = runs; k < max; k++)); do
	running=0
	while read -r name suite mbox; do
		only "$suite" "$name" || continue
		[ -s "$out/$name.first.json" ] || cp "$out/$name.json" "$out/$name.first.json"
		cp "$out/$name.json" "$out/$name.before.json"
		measure "$name" "$suite" 1 --continue "$out/$name.before.json" &
		running=$((running + 1))
		if ((running >= jobs)); then
			wait -n || true
			running=$((running - 1))
		fi
	done < <($pb panel --unfinished "$out")
	wait
done
if [ -n "${SUITES:-}${NAMES:-}" ]; then
	$pb panel --measured "$out"
else
	$pb panel "$out"
fi
