#!/usr/bin/env python3
# usage: scripts/panel-harness-suites-stat.py RESULTS.TXT [BASE]
# The table of scripts/panel-harness-suites.sh's results (lines of k=v, one
# measurement each): per workload, cell and kernel, the runs, the median
# and quartiles of each measure; against BASE (the kernel named base by
# default) the Hodges-Lehmann ratio (median of the pairwise ratios) and the
# two-sided Mann-Whitney p, as scripts/panel-harness-stat.py does for the
# cache-contention harness. Counting passes (workload *-count) print their
# medians per boot.
import collections
import math
import sys

CELLS = {"locks": ("kind", "n"), "fuse": ("threads",), "readahead": ("bucket", "readers"),
         "locks-count": ("kind", "n"), "fuse-count": ("threads",), "readahead-count": ("bucket",)}
MEASURES = {"locks": ("per_s",), "fuse": ("create", "read", "stat"), "readahead": ("secs",)}


def med(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def q(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * (len(v) - 1) + 0.5))]


def mw(x, y):
    allv = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    n = len(allv)
    r = [0.0] * n
    ties = 0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and allv[j + 1][0] == allv[i][0]:
            j += 1
        for k in range(i, j + 1):
            r[k] = (i + j) / 2 + 1
        t = j - i + 1
        ties += t ** 3 - t
        i = j + 1
    r1 = sum(r[k] for k in range(n) if allv[k][1] == 0)
    n1, n2 = len(x), len(y)
    u = r1 - n1 * (n1 + 1) / 2
    mu = n1 * n2 / 2
    sd = math.sqrt(n1 * n2 / 12 * ((n1 + n2 + 1) - ties / ((n1 + n2) * (n1 + n2 - 1))))
    if not sd:
        return 1.0
    z = (u - mu - math.copysign(0.5, u - mu)) / sd
    return math.erfc(abs(z) / math.sqrt(2))


def hl(x, y):
    return math.exp(med([math.log(b / a) for a in x for b in y if a > 0 and b > 0]))


def main():
    base = sys.argv[2] if len(sys.argv) > 2 else "base"
    rows = []
    for line in open(sys.argv[1]):
        kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "workload" in kv:
            rows.append(kv)
    kernels = []
    for r in rows:
        if r["kernel"] not in kernels:
            kernels.append(r["kernel"])
    data = collections.defaultdict(list)
    for r in rows:
        w = r["workload"]
        cell = " ".join(f"{k}={r.get(k, '')}" for k in CELLS.get(w, ()))
        data[(w, cell, r["kernel"])].append(r)
    for w in sorted({k[0] for k in data}):
        cells = sorted({k[1] for k in data if k[0] == w}, key=lambda c: [int(x) if x.isdigit() else x for x in c.replace("=", " ").split()])
        print(f"\n{w}")
        if w.endswith("-count"):
            keys = sorted({k for (ww, _, _), rs in data.items() if ww == w for r in rs for k in r}
                          - {"kernel", "boot", "workload", "iter", "accel", *CELLS[w]})
            print("\t".join(["cell", "kernel", "boots"] + keys))
            for c in cells:
                for k in kernels:
                    rs = data.get((w, c, k))
                    if not rs:
                        continue
                    vals = []
                    for key in keys:
                        xs = [float(r[key]) for r in rs if key in r]
                        vals.append(f"{med(xs):g}" if xs else "")
                    print("\t".join([c, k, str(len(rs))] + vals))
            continue
        for m in MEASURES.get(w, ()):
            print(f"{m}: cell\tkernel\tn\tmedian [q1, q3]\tratio to {base} (HL)\tp")
            for c in cells:
                b = [float(r[m]) for r in data.get((w, c, base), []) if m in r]
                for k in kernels:
                    xs = [float(r[m]) for r in data.get((w, c, k), []) if m in r]
                    if not xs:
                        continue
                    line = f"  {c}\t{k}\t{len(xs)}\t{med(xs):.4g} [{q(xs, .25):.4g}, {q(xs, .75):.4g}]"
                    if k != base and b:
                        line += f"\t{hl(b, xs):.3f}\t{mw(b, xs):.2g}"
                    print(line)


if __name__ == "__main__":
    main()
