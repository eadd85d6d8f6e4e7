package top

import (
	"example.com/m/low"
	"example.com/m/mid"
)

// Req is a request.
type Req struct{ N int }

// Start walks: low, mid (which enters low again), then its own helper.
func Start(req *Req, unused int) int {
	x := low.Double(req.N)
	low.Ignored(unused)
	y := mid.Work(x)
	return helper(y)
}
