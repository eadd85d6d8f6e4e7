package judge

import (
	"sort"
	"strings"
)

// MetricID names one metric of one workload cell: which suite, workload,
// cell (Params) and metric, with its unit and the way it is better. A
// comparison's Row, a bisection and an earlier version's measurement each
// carry one, so that they name a metric alike.
type MetricID struct {
	Suite          string            `json:"suite"`
	Workload       string            `json:"workload"`
	Params         map[string]string `json:"params,omitempty"`
	Metric         string            `json:"metric"`
	Unit           string            `json:"unit"`
	HigherIsBetter bool              `json:"higher_is_better"`
}

// Cell names the coordinates of the metric within its workload, e.g.
// "bucket=<256K readers=4", in sorted key order.
func (m MetricID) Cell() string { return CellName(m.Params) }

// Same says whether two IDs name the same suite, workload, cell and
// metric (unit and direction aside).
func (m MetricID) Same(o MetricID) bool {
	return m.Suite == o.Suite && m.Workload == o.Workload && m.Cell() == o.Cell() && m.Metric == o.Metric
}

// CellName is a cell's parameters as "k=v k=v", in sorted key order.
func CellName(params map[string]string) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + params[k]
	}
	return strings.Join(parts, " ")
}
