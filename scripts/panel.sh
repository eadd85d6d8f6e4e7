#!/bin/bash
# panel.sh: measure the panel of known-effect patches (testdata/panel/
# panel.yaml) with the default profile and print its table.
#
#   scripts/panel.sh OUTDIR [RUNS [PROFILE]]
#
# For each patch: build it on the cached default base (patchbot build),
# then run its suite, base against patched, RUNS fixed rounds a side (10:
# the rule's maximum, so that `patchbot panel` can replay the rule at
# every look), into OUTDIR/NAME.json; patches measured already are kept.
# Then `patchbot panel OUTDIR` judges them with the sequential rule, as
# the pipeline would have stopped each, and prints the table that
# docs/suites.md keeps. PROFILE (default: each suite's quick, the
# pipeline's) is given to every suite that has it, so that a candidate
# profile (cache-contention's seeds) is measured on the same panel. VM
# runs take the shared heavy lock
# (/tmp/patchbot-heavy.lock) one at a time.
set -euo pipefail
out=${1:?usage: panel.sh OUTDIR [RUNS [PROFILE]]} runs=${2:-10} profile=${3:-quick}
pb=${PATCHBOT:-go run ./cmd/patchbot}
mkdir -p "$out"
profiles=$($pb suite list)
$pb panel --list | while read -r name suite mbox; do
	[ -s "$out/$name.json" ] && continue
	echo "$(date -u +%T) $name: building" >&2
	$pb build --mbox "$mbox" --json < /dev/null > "$out/$name.build.json"
	read -r base patched < <(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["base"]["BzImage"], d["patched"]["BzImage"])' "$out/$name.build.json")
	echo "$(date -u +%T) $name: $suite, $runs rounds a side (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
	p=quick
	grep -q "^$suite .*\b$profile\b" <<< "$profiles" && p=$profile
	flock /tmp/patchbot-heavy.lock $pb suite run --suites "$suite" --profile "$p" --kernel "$base" --vs "$patched" \
		--runs "$runs" --json < /dev/null > "$out/$name.json.tmp"
	mv "$out/$name.json.tmp" "$out/$name.json"
	echo "$(date -u +%T) $name: done (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done
$pb panel "$out"
