package reports

import "github.com/patchbot/patchbot/suites"

// ModelOf is the reply's view of the reference model's prediction that a
// suite's result carries (cache-contention), or nil when it has none.
func ModelOf(res *suites.Result) *Model {
	if res == nil || res.Model == nil || len(res.Model.WakeupsPerRelease) == 0 {
		return nil
	}
	p := res.Model
	m := &Model{BasePolicy: p.BasePolicy, PatchedPolicy: p.PatchedPolicy,
		Predicted: map[string]float64{}, Check: p.Check}
	for k, v := range p.WakeupsPerRelease {
		m.Predicted[k] = v
	}
	return m
}
