package store

import "time"

// Progress is how far a running job got: what its worker tells a
// dashboard in the same process while the store holds only its stage.
type Progress struct {
	Stage string        `json:"stage"` // e.g. "build base", "run cache-contention"
	Done  int           `json:"done"`  // steps done of Total (rounds, boots); 0 of 0 when unknown
	Total int           `json:"total"`
	ETA   time.Duration `json:"eta_ns"` // 0 when unknown
}
