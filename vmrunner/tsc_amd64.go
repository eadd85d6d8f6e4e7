package vmrunner

// rdtsc reads this CPU's time-stamp counter.
func rdtsc() uint64

const haveTSC = true
