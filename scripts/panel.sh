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
# (`patchbot panel --unfinished`) is measured on to the rule's maximum of
# 10 (`patchbot suite run --continue`), so that the table is what 10
# fixed rounds would give at a fraction of the time: the rule never looks
# past the round a patch stopped at. Last, `patchbot panel OUTDIR` judges
# every patch with the sequential rule, as the pipeline would have stopped
# it, and prints the table that docs/suites.md keeps. PROFILE (default:
# each suite's quick, the pipeline's) is given to every suite that has it,
# so that a candidate profile is measured on the same panel. VM runs take
# the shared heavy lock (/tmp/patchbot-heavy.lock) one at a time.
set -euo pipefail
out=${1:?usage: panel.sh OUTDIR [RUNS [PROFILE]]} runs=${2:-5} profile=${3:-quick}
max=10 # stats.DefaultRule.Max
pb=${PATCHBOT:-go run ./cmd/patchbot}
mkdir -p "$out"
profiles=$($pb suite list)

# measure NAME SUITE MBOX ROUNDS [--continue FILE]
measure() {
	local name=$1 suite=$2 mbox=$3 n=$4
	shift 4
	if [ ! -s "$out/$name.build.json" ]; then
		echo "$(date -u +%T) $name: building" >&2
		$pb build --mbox "$mbox" --json < /dev/null > "$out/$name.build.json.tmp"
		mv "$out/$name.build.json.tmp" "$out/$name.build.json"
	fi
	read -r base patched < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["base"]["BzImage"], d["patched"]["BzImage"])' "$out/$name.build.json")
	local p=quick
	if grep -q "^$suite .*\b$profile\b" <<< "$profiles"; then p=$profile; fi
	echo "$(date -u +%T) $name: $suite $p, $n rounds a side $* (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	flock /tmp/patchbot-heavy.lock $pb suite run --suites "$suite" --profile "$p" --kernel "$base" --vs "$patched" \
		--runs "$n" "$@" --json < /dev/null > "$out/$name.json.tmp"
	echo "$(date -u +%T) $name: done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
}

$pb panel --list | while read -r name suite mbox; do
	[ -s "$out/$name.json" ] && continue
	measure "$name" "$suite" "$mbox" "$runs"
	mv "$out/$name.json.tmp" "$out/$name.json"
done
if ((runs < max)); then
	$pb panel --unfinished "$out" | while read -r name suite mbox; do
		cp "$out/$name.json" "$out/$name.first.json"
		measure "$name" "$suite" "$mbox" $((max - runs)) --continue "$out/$name.first.json"
		mv "$out/$name.json.tmp" "$out/$name.json"
	done
fi
$pb panel "$out"
