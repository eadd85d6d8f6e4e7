//go:build !amd64

package vmrunner

func rdtsc() uint64 { return 0 }

const haveTSC = false
