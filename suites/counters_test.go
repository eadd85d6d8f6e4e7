package suites

import (
	"testing"
)

const histSample = `# event histogram
#
# trigger info: hist:keys=stacktrace:vals=hitcount:sort=hitcount:size=16384 [active]
#

{ stacktrace:
         try_to_wake_up+0x2e7/0x540
         __wake_up_common+0x73/0x140
         __wake_up_common_lock+0x7c/0xc0
         squashfs_readahead+0x3f1/0x8a0
         read_pages+0x59/0x240
} hitcount:        700
{ stacktrace:
         try_to_wake_up+0x2e7/0x540
         autoremove_wake_function+0x11/0x40
         squashfs_cache_wake_function+0x2a/0x50
         __wake_up_common+0x73/0x140
         __wake_up_common_lock+0x7c/0xc0
         squashfs_cache_put+0x5b/0x70
         squashfs_readahead+0x3f1/0x8a0
} hitcount:         20
{ stacktrace:
         try_to_wake_up+0x2e7/0x540
         __wake_up_common+0x73/0x140
         __wake_up_common_lock+0x7c/0xc0
         squashfs_cache_get+0x1a1/0x3a0
         squashfs_read_metadata+0x5b/0x120
} hitcount:          5
{ stacktrace:
         try_to_wake_up+0x2e7/0x540
         wake_up_process+0x15/0x20
         kthread_worker_fn+0x98/0x1e0
} hitcount:          3

Totals:
    Hits: 728
    Entries: 4
    Dropped: 0
`

func TestParseHistAndAttribute(t *testing.T) {
	h, err := parseHist(histSample)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.entries) != 4 || h.hits != 728 || h.dropped != 0 {
		t.Fatalf("parsed %d entries, hits %d, dropped %d", len(h.entries), h.hits, h.dropped)
	}
	want := []struct {
		site    string
		release bool
	}{
		// the tail calls: put's and __wake_up's frames are both missing,
		// __wake_up_common_lock shows under put's caller.
		{"squashfs_readahead", true},
		{"squashfs_cache_put", true},
		{"squashfs_cache_get", false},
		{"kthread_worker_fn", false},
	}
	for i, e := range h.entries {
		site, rel := releaseSite(e.frames)
		if site != want[i].site || rel != want[i].release {
			t.Errorf("entry %d: site %q release %v, want %q %v", i, site, rel, want[i].site, want[i].release)
		}
	}
}

func TestParseProcFiles(t *testing.T) {
	n, err := parseCtxt("cpu  1 2 3\nintr 5\nctxt 123456\nbtime 1\n")
	if err != nil || n != 123456 {
		t.Errorf("parseCtxt = %d, %v", n, err)
	}
	if _, err := parseCtxt("cpu 1\n"); err == nil {
		t.Error("parseCtxt without ctxt: no error")
	}
	schedstat := "version 15\ntimestamp 4295\ncpu0 0 0 100 40 7 3 555 666 9\ndomain0 3 1 2 3\ncpu1 0 0 100 40 11 3 555 666 9\n"
	n, err = parseTTWU(schedstat)
	if err != nil || n != 18 {
		t.Errorf("parseTTWU = %d, %v; want 18", n, err)
	}
	if _, err := parseTTWU("version 15\n"); err == nil {
		t.Error("parseTTWU without cpu lines: no error")
	}
	prof := "  patchbot/sqfs_cache_put                      451500               0\n  patchbot/wake_up  9 0\n"
	n, err = parseKprobeHits(prof, putEvent)
	if err != nil || n != 451500 {
		t.Errorf("parseKprobeHits = %d, %v", n, err)
	}
	cpus, err := parseCPUList("0-3,6")
	if err != nil || len(cpus) != 5 || cpus[4] != 6 {
		t.Errorf("parseCPUList = %v, %v", cpus, err)
	}
}

func TestLatencies(t *testing.T) {
	l := latencies{5, 1, 4, 2, 3, 100, 6, 7, 8, 9}
	if got := l.mean(); got != 14 {
		t.Errorf("mean = %v", got)
	}
	if got := l.quantile(0.5); got != 5 {
		t.Errorf("p50 = %v", got)
	}
	if got := l.quantile(0.99); got != 100 {
		t.Errorf("p99 = %v", got)
	}
	if got := l.max(); got != 100 {
		t.Errorf("max = %v", got)
	}
}
