#!/usr/bin/env python3
# usage: scripts/panel-harness-stat.py RESULTS.TSV [MINBOOT] (testdata/panel/harness-*.tsv: the harness runs behind panel.yaml)
# per kernel and workload: n, median secs, quartiles, median squashfs wakings; vs base:
# Mann-Whitney U (normal approx with tie correction, two-sided) on secs and on squashfs wakings,
# and the Hodges-Lehmann ratio estimate of secs (median of pairwise log ratios).
import sys, math, collections
rows = [l.rstrip('\n').split('\t') for l in open(sys.argv[1])][1:]
minboot = int(sys.argv[2]) if len(sys.argv) > 2 else 1
d = collections.defaultdict(list)
for k, b, w, i, s, wk, sq, rel in rows:
    if int(b) < minboot: continue
    d[(k, w)].append((float(s), int(sq), int(rel)))
def med(v):
    v = sorted(v); n = len(v)
    return v[n//2] if n % 2 else (v[n//2-1] + v[n//2]) / 2
def q(v, p):
    v = sorted(v); return v[min(len(v)-1, int(p*(len(v)-1)+0.5))]
def mw(x, y):
    allv = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    ranks = {}; i = 0; n = len(allv); ties = 0
    r = [0.0]*n
    while i < n:
        j = i
        while j+1 < n and allv[j+1][0] == allv[i][0]: j += 1
        for k in range(i, j+1): r[k] = (i+j)/2 + 1
        t = j-i+1; ties += t**3 - t
        i = j+1
    r1 = sum(r[k] for k in range(n) if allv[k][1] == 0)
    n1, n2 = len(x), len(y)
    u = r1 - n1*(n1+1)/2
    mu = n1*n2/2
    sd = math.sqrt(n1*n2/12*((n1+n2+1) - ties/((n1+n2)*(n1+n2-1))))
    z = (u - mu - math.copysign(0.5, u-mu)) / sd if sd else 0
    p = math.erfc(abs(z)/math.sqrt(2))
    return p
def hl(x, y):
    return math.exp(med([math.log(b/a) for a in x for b in y if a > 0 and b > 0]))
print("kernel\tworkload\tn\tsecs median [q1,q3]\tsq wakings median\tsecs ratio (HL) vs base\tp secs\tp wakings")
for (k, w) in sorted(d):
    v = d[(k, w)]; s = [a for a, _, _ in v]; sq = [b for _, b, _ in v]
    line = f"{k}\t{w}\t{len(v)}\t{med(s):.2f} [{q(s,.25):.2f},{q(s,.75):.2f}]\t{med(sq):.0f}"
    if k != 'base' and ('base', w) in d:
        bv = d[('base', w)]; bs = [a for a, _, _ in bv]; bsq = [b for _, b, _ in bv]
        line += f"\t{hl(bs, s):.2f}\t{mw(bs, s):.3g}\t{mw(bsq, sq):.3g}"
    print(line)
