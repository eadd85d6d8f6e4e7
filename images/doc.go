// Package images makes everything a test VM boots: it imports the base
// tree (Debian's linux-source-6.1 by default, or an operator's git tree),
// applies a series to it with git am -3, configures the kernel (tinyconfig
// plus the fragments under configs/), and builds the base kernel once and
// the patched kernel incrementally from the base's objects, both cached
// by commit, config and compiler. Builds run in a sandbox: a patch is
// untrusted code at build time.
//
// Errors carry blame (package blame): ApplyError and BuildError are the
// patch's and hold the evidence to quote; InfraError and ConfigError are
// the machine's, but for a limit the base kept within (limits.go). A base
// is only ever a commit reachable from a tree's refs, and a series'
// commits live in its build's own repository; the cache is held to a size
// cap by evicting the least recently used entries (evict.go). Subpackages build the initramfs that runs the guest agent
// (initramfs) and the squashfs test images the suites read (fsimage).
package images
