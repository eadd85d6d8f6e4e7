package mid

import "example.com/m/low"

// Work enters low again.
func Work(v int) int { return low.Inc(v) }
