// Package refcache is a reference model of the squashfs cache
// (fs/squashfs/cache.c): its entries, reference counts, pending reads and
// wait queues, with the wake-up policy as a parameter — wake-all (mainline
// 6.1), exclusive, and keyed (the thundering-herd patch). It answers what a
// patch claims about the cache's semantics in two ways: Simulate counts
// releases, wake-ups, spurious wake-ups and hand-offs over a workload, and
// Check explores every interleaving of a small shape for deadlocks, lost
// wake-ups and waiters left asleep beside a free entry, with the shortest
// trace to each. docs/refcache.md says what is modelled and what is not.
package refcache
