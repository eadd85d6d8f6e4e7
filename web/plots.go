package web

import (
	"bytes"
	"fmt"
	"html/template"
	"image/color"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/patchbot/patchbot/judge"
	"github.com/patchbot/patchbot/reports"
	"github.com/patchbot/patchbot/suites"
)

// Plot is one SVG figure of a run, made on the server with gonum/plot.
type Plot struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"` // runs, grid, curve, model
	Title string `json:"title"`
	// Group is the table's heading a per-metric figure sits under
	// ("suite / workload (cell)"); empty for the overview figures.
	Group string `json:"group,omitempty"`
	URL   string `json:"url"`
	// Marks counts what the figure draws one of per measurement: a run's
	// value (kinds runs, curve, model) or a cell (grid).
	Marks int           `json:"marks"`
	SVG   template.HTML `json:"-"`
}

// Colours. Marks have colours of their own, used for nothing else in a
// figure, so that a mark can be told from an axis or a bar in the SVG:
// tagMarks gives each a class (mark base, mark patched, mark model, cell).
var (
	markBase    = color.RGBA{0x1f, 0x5f, 0xbf, 0xff}
	markPatched = color.RGBA{0xd9, 0x5f, 0x02, 0xff}
	markModel   = color.RGBA{0x6a, 0x3d, 0x9a, 0xff}
	lineBase    = color.RGBA{0x10, 0x3a, 0x78, 0xff}
	linePatched = color.RGBA{0x8a, 0x3b, 0x00, 0xff}

	// The grid's cells: significant improvements in greens, regressions in
	// reds, darker for larger changes; grey when not significant, a paler
	// grey when not judged.
	cellBetter = []color.RGBA{{0xc7, 0xe9, 0xc0, 0xff}, {0xa1, 0xd9, 0x9b, 0xff}, {0x74, 0xc4, 0x76, 0xff}, {0x31, 0xa3, 0x54, 0xff}}
	cellWorse  = []color.RGBA{{0xfc, 0xbb, 0xa1, 0xff}, {0xfc, 0x92, 0x72, 0xff}, {0xfb, 0x6a, 0x4a, 0xff}, {0xde, 0x2d, 0x26, 0xff}}
	cellNS     = color.RGBA{0xdd, 0xdd, 0xdd, 0xff}
	cellNotJ   = color.RGBA{0xf4, 0xf4, 0xf4, 0xff}
)

var fontOnce sync.Once

// newPlot starts a figure. Sans-serif text reads better at these sizes
// than gonum's default serif; the default is set once, before any plot.
func newPlot(title string) *plot.Plot {
	fontOnce.Do(func() {
		plot.DefaultFont.Variant = "Sans"
		plotter.DefaultFont.Variant = "Sans"
	})
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(9)
	p.X.Label.TextStyle.Font.Size = vg.Points(8)
	p.Y.Label.TextStyle.Font.Size = vg.Points(8)
	p.X.Tick.Label.Font.Size = vg.Points(7)
	p.Y.Tick.Label.Font.Size = vg.Points(7)
	p.Y.Tick.Marker = plainTicks{}
	return p
}

// plainTicks are gonum's default ticks labelled without trailing zeros
// ("22500", not "22500.00").
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(min, max)
	for i, t := range ticks {
		switch {
		case t.Label == "":
		case t.Value == math.Trunc(t.Value) && math.Abs(t.Value) < 1e15:
			ticks[i].Label = strconv.FormatFloat(t.Value, 'f', 0, 64)
		default:
			ticks[i].Label = strconv.FormatFloat(t.Value, 'g', 6, 64)
		}
	}
	return ticks
}

// samplesOf returns each row's raw values per kernel in round order, by
// the comparison's row key, so that every run can be drawn.
type rowKey struct{ suite, workload, cell, metric string }

func keyOf(r judge.Row) rowKey { return rowKey{r.Suite, r.Workload, r.Cell(), r.Metric} }

func samplesOf(base, patched []suites.Result) map[rowKey]*[2][]suites.Sample {
	out := map[rowKey]*[2][]suites.Sample{}
	for side, results := range [][]suites.Result{base, patched} {
		for _, res := range results {
			for _, s := range res.Samples {
				r := judge.Row{MetricID: judge.MetricID{Suite: s.Suite, Workload: s.Workload, Params: s.Params, Metric: s.Metric}}
				k := keyOf(r)
				if out[k] == nil {
					out[k] = &[2][]suites.Sample{}
				}
				out[k][side] = append(out[k][side], s)
			}
		}
	}
	for _, v := range out {
		for side := range v {
			sort.SliceStable(v[side], func(i, j int) bool { return v[side][i].Round < v[side][j].Round })
		}
	}
	return out
}

func values(ss []suites.Sample) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = s.Value
	}
	return out
}

// stripPlot draws every run's value of one metric on both kernels, in
// round order left to right, with the mean and mean ± stddev (the spread
// the reply prints as ±N%).
func stripPlot(r judge.Row, vals [2][]float64) ([]byte, int, error) {
	p := newPlot(r.Metric)
	p.Y.Label.Text = r.Unit
	marks := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for side, sum := range []struct {
		mean, sd float64
		n        int
	}{{r.Base.Mean, r.Base.Stddev, r.Base.N}, {r.Patched.Mean, r.Patched.Stddev, r.Patched.N}} {
		vs := vals[side]
		if len(vs) == 0 {
			continue
		}
		x0 := float64(side)
		pts := make(plotter.XYs, len(vs))
		for i, v := range vs {
			pts[i] = plotter.XY{X: x0 + jitter(i, len(vs)), Y: v}
			lo, hi = math.Min(lo, v), math.Max(hi, v)
		}
		mark, line := markBase, lineBase
		shape := draw.GlyphDrawer(draw.CircleGlyph{})
		if side == 1 {
			mark, line, shape = markPatched, linePatched, draw.PyramidGlyph{}
		}
		mean, err := plotter.NewLine(plotter.XYs{{X: x0 - 0.3, Y: sum.mean}, {X: x0 + 0.3, Y: sum.mean}})
		if err != nil {
			return nil, 0, err
		}
		mean.LineStyle = draw.LineStyle{Color: line, Width: vg.Points(1)}
		p.Add(mean)
		if err := addMarks(p, pts, draw.GlyphStyle{Color: mark, Radius: vg.Points(2.6), Shape: shape}); err != nil {
			return nil, 0, err
		}
		if sum.n > 1 {
			eb, err := plotter.NewYErrorBars(errPoints{plotter.XYs{{X: x0 + 0.36, Y: sum.mean}},
				plotter.YErrors{{Low: sum.sd, High: sum.sd}}})
			if err != nil {
				return nil, 0, err
			}
			eb.LineStyle = draw.LineStyle{Color: line, Width: vg.Points(1)}
			eb.CapWidth = vg.Points(4)
			p.Add(eb)
			lo, hi = math.Min(lo, sum.mean-sum.sd), math.Max(hi, sum.mean+sum.sd)
		}
		marks += len(vs)
	}
	p.NominalX("base", "patched")
	p.X.Min, p.X.Max = -0.5, 1.5
	setRange(&p.Y, lo, hi)
	svg, err := render(p, 2.35*vg.Inch, 1.9*vg.Inch)
	return svg, marks, err
}

// jitter spreads n marks over [-0.22, 0.22] in order.
func jitter(i, n int) float64 {
	if n < 2 {
		return 0
	}
	return -0.22 + 0.44*float64(i)/float64(n-1)
}

// setRange gives an axis room around [lo, hi], and a range at all when
// every value is the same (exact counters often are).
func setRange(a *plot.Axis, lo, hi float64) {
	if math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return
	}
	pad := (hi - lo) * 0.08
	if pad == 0 {
		pad = math.Max(math.Abs(hi)*0.05, 1)
	}
	a.Min, a.Max = lo-pad, hi+pad
}

// addMarks adds pts to p as marks of one style.
func addMarks(p *plot.Plot, pts plotter.XYs, style draw.GlyphStyle) error {
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	sc.GlyphStyle = style
	p.Add(sc)
	return nil
}

type errPoints struct {
	plotter.XYs
	plotter.YErrors
}

// gridPlot draws a bucket × readers workload as cells coloured by the
// change, each labelled with the reply's %change and mark.
func gridPlot(suite, workload, metric, unit string, rows []judge.Row, noise float64) ([]byte, int, error) {
	readers := reports.ParamValues(rows, "readers")
	buckets := reports.ParamValues(rows, "bucket")
	p := newPlot(fmt.Sprintf("%s %s: %%change by file size and readers", workload, metricName(metric, unit)))
	p.X.Label.Text = "readers"
	p.Y.Label.Text = "file size"
	col := index0(readers)
	// The first bucket measured (the smallest files) on top, as the
	// reply's grid lists them.
	row := map[string]int{}
	for i, b := range buckets {
		row[b] = len(buckets) - 1 - i
	}
	var labels plotter.XYLabels
	for _, r := range rows {
		x, y := float64(col[r.Params["readers"]]), float64(row[r.Params["bucket"]])
		cell, err := plotter.NewPolygon(plotter.XYs{{X: x - 0.48, Y: y - 0.48}, {X: x + 0.48, Y: y - 0.48},
			{X: x + 0.48, Y: y + 0.48}, {X: x - 0.48, Y: y + 0.48}})
		if err != nil {
			return nil, 0, err
		}
		cell.Color = cellColour(r)
		cell.LineStyle.Width = 0
		p.Add(cell)
		c := reports.CellsOf(r, noise)
		text := c.Change
		if c.Mark != "" {
			text += " " + c.Mark
		}
		labels.XYs = append(labels.XYs, plotter.XY{X: x, Y: y})
		labels.Labels = append(labels.Labels, text)
	}
	if len(labels.XYs) > 0 {
		l, err := plotter.NewLabels(labels)
		if err != nil {
			return nil, 0, err
		}
		for i := range l.TextStyle {
			l.TextStyle[i].Font.Size = vg.Points(8)
			l.TextStyle[i].XAlign = draw.XCenter
			l.TextStyle[i].YAlign = draw.YCenter
		}
		p.Add(l)
	}
	p.NominalX(readers...)
	rev := make([]string, len(buckets))
	for i, b := range buckets {
		rev[len(buckets)-1-i] = b
	}
	p.NominalY(rev...)
	p.X.Min, p.X.Max = -0.5, float64(len(readers))-0.5
	p.Y.Min, p.Y.Max = -0.5, float64(len(buckets))-0.5
	w := vg.Length(1.3+1.0*float64(len(readers))) * vg.Inch
	h := vg.Length(1.0+0.4*float64(len(buckets))) * vg.Inch
	svg, err := render(p, max(w, 3*vg.Inch), max(h, 2*vg.Inch))
	return svg, len(rows), err
}

func cellColour(r judge.Row) color.Color {
	switch {
	case !r.Judged || !r.HasChange():
		return cellNotJ
	case !r.Significant:
		return cellNS
	}
	step := 0
	for _, edge := range []float64{0.1, 0.25, 0.5} {
		if math.Abs(r.Change) >= edge {
			step++
		}
	}
	if r.Better() {
		return cellBetter[step]
	}
	return cellWorse[step]
}

// curvePlot draws a contenders workload: every run's value on both
// kernels against the number of contenders, the means joined, with mean ±
// stddev.
func curvePlot(suite, workload, metric, unit string, rows []judge.Row, samples map[rowKey]*[2][]suites.Sample) ([]byte, int, error) {
	sort.SliceStable(rows, func(i, j int) bool {
		a, _ := strconv.ParseFloat(rows[i].Params["contenders"], 64)
		b, _ := strconv.ParseFloat(rows[j].Params["contenders"], 64)
		return a < b
	})
	p := newPlot(fmt.Sprintf("%s %s by contenders", workload, metricName(metric, unit)))
	p.X.Label.Text = "contenders"
	p.Y.Label.Text = unit
	var ticks []plot.Tick
	xs := make([]float64, len(rows))
	for i, r := range rows {
		x, err := strconv.ParseFloat(r.Params["contenders"], 64)
		if err != nil {
			x = float64(i)
		}
		xs[i] = x
		ticks = append(ticks, plot.Tick{Value: x, Label: r.Params["contenders"]})
	}
	logX := len(xs) > 1 && xs[0] > 0 && xs[len(xs)-1]/xs[0] >= 10
	if logX {
		p.X.Scale = plot.LogScale{}
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	marks := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for side := range 2 {
		mark, line := markBase, lineBase
		shape := draw.GlyphDrawer(draw.CircleGlyph{})
		if side == 1 {
			mark, line, shape = markPatched, linePatched, draw.PyramidGlyph{}
		}
		var means plotter.XYs
		var errs errPoints
		var pts plotter.XYs
		for i, r := range rows {
			sum := r.Base
			if side == 1 {
				sum = r.Patched
			}
			if sum.N == 0 {
				continue
			}
			// Offset the kernels a little so that their marks do not hide
			// each other.
			x := xs[i]
			if logX {
				x *= 1 + 0.04*float64(2*side-1)
			} else if len(xs) > 1 {
				x += (xs[len(xs)-1] - xs[0]) * 0.01 * float64(2*side-1)
			}
			means = append(means, plotter.XY{X: x, Y: sum.Mean})
			errs.XYs = append(errs.XYs, plotter.XY{X: x, Y: sum.Mean})
			errs.YErrors = append(errs.YErrors, struct{ Low, High float64 }{sum.Stddev, sum.Stddev})
			lo, hi = math.Min(lo, sum.Mean-sum.Stddev), math.Max(hi, sum.Mean+sum.Stddev)
			if v := samples[keyOf(r)]; v != nil {
				for _, s := range v[side] {
					pts = append(pts, plotter.XY{X: x, Y: s.Value})
					lo, hi = math.Min(lo, s.Value), math.Max(hi, s.Value)
				}
			}
		}
		if len(means) == 0 {
			continue
		}
		l, err := plotter.NewLine(means)
		if err != nil {
			return nil, 0, err
		}
		l.LineStyle = draw.LineStyle{Color: line, Width: vg.Points(1)}
		eb, err := plotter.NewYErrorBars(errs)
		if err != nil {
			return nil, 0, err
		}
		eb.LineStyle = draw.LineStyle{Color: line, Width: vg.Points(0.8)}
		eb.CapWidth = vg.Points(3)
		p.Add(l, eb)
		if len(pts) > 0 {
			if err := addMarks(p, pts, draw.GlyphStyle{Color: mark, Radius: vg.Points(2.2), Shape: shape}); err != nil {
				return nil, 0, err
			}
			marks += len(pts)
		}
	}
	setRange(&p.Y, lo, hi)
	if logX {
		p.X.Min, p.X.Max = xs[0]*0.8, xs[len(xs)-1]*1.25
	}
	svg, err := render(p, 4.2*vg.Inch, 2.6*vg.Inch)
	return svg, marks, err
}

// modelPlot sets the reference model's predicted wake-ups per release
// beside every run's measured value, per workload that measured them.
func modelPlot(m *reports.Model, metric string, rows []judge.Row, samples map[rowKey]*[2][]suites.Sample) ([]byte, int, error) {
	p := newPlot("wake-ups per release: measured and predicted")
	p.Y.Label.Text = "wake-ups per release"
	var names []string
	marks := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, r := range rows {
		name := r.Workload
		if c := r.Cell(); c != "" {
			name += " " + c
		}
		names = append(names, name)
		x0 := float64(i)
		v := samples[keyOf(r)]
		for side, policy := range []string{m.BasePolicy, m.PatchedPolicy} {
			offset := -0.2 + 0.4*float64(side)
			mark, shape := markBase, draw.GlyphDrawer(draw.CircleGlyph{})
			if side == 1 {
				mark, shape = markPatched, draw.PyramidGlyph{}
			}
			var pts plotter.XYs
			if v != nil {
				for j, s := range v[side] {
					pts = append(pts, plotter.XY{X: x0 + offset + 0.5*jitter(j, len(v[side]))*0.4, Y: s.Value})
					lo, hi = math.Min(lo, s.Value), math.Max(hi, s.Value)
				}
			}
			if len(pts) > 0 {
				if err := addMarks(p, pts, draw.GlyphStyle{Color: mark, Radius: vg.Points(2.4), Shape: shape}); err != nil {
					return nil, 0, err
				}
				marks += len(pts)
			}
			if pred, ok := m.Predicted[policy]; ok {
				style := draw.GlyphStyle{Color: markModel, Radius: vg.Points(4), Shape: draw.BoxGlyph{}}
				if err := addMarks(p, plotter.XYs{{X: x0 + offset, Y: pred}}, style); err != nil {
					return nil, 0, err
				}
				lo, hi = math.Min(lo, pred), math.Max(hi, pred)
			}
		}
	}
	if len(names) == 0 {
		return nil, 0, nil
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	lo = math.Min(lo, 0)
	setRange(&p.Y, lo, hi)
	svg, err := render(p, vg.Length(1.6+1.6*float64(len(names)))*vg.Inch, 2.6*vg.Inch)
	return svg, marks, err
}

// render writes p as SVG for a page: without the XML prolog (it is inlined
// in HTML), scaled by CSS, marks tagged with classes.
func render(p *plot.Plot, w, h vg.Length) ([]byte, error) {
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, err
	}
	return tagMarks(buf.Bytes()), nil
}

var markClasses = func() map[string]string {
	m := map[string]string{
		hexColour(markBase): "mark base", hexColour(markPatched): "mark patched",
		hexColour(markModel): "mark model", hexColour(cellNS): "cell", hexColour(cellNotJ): "cell",
	}
	for _, c := range append(append([]color.RGBA{}, cellBetter...), cellWorse...) {
		m[hexColour(c)] = "cell"
	}
	return m
}()

func hexColour(c color.RGBA) string { return fmt.Sprintf("#%02X%02X%02X", c.R, c.G, c.B) }

// tagMarks drops the XML prolog and gives every filled path of a mark
// colour its class, so that a page's CSS, script or test can find the
// marks: `svg .mark.base` is one run of the base kernel.
func tagMarks(svg []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(svg) + 1024)
	for _, line := range strings.SplitAfter(string(svg), "\n") {
		switch {
		case strings.HasPrefix(line, "<?xml"), strings.HasPrefix(line, "<!--"):
			continue
		case strings.HasPrefix(line, "<svg "):
			line = `<svg role="img" ` + line[len("<svg "):]
		case strings.HasPrefix(line, "<path "):
			if i := strings.Index(line, ` style="fill:#`); i >= 0 && len(line) >= i+len(` style="fill:#`)+7 {
				hex := line[i+len(` style="fill:`) : i+len(` style="fill:`)+7]
				rest := line[i+len(` style="fill:`)+7:]
				if cls, ok := markClasses[hex]; ok && strings.HasPrefix(rest, `"`) {
					line = line[:i] + ` class="` + cls + `"` + line[i:]
				}
			}
		}
		out.WriteString(line)
	}
	return out.Bytes()
}

func index0(vals []string) map[string]int {
	m := make(map[string]int, len(vals))
	for i, v := range vals {
		m[v] = i
	}
	return m
}

func metricName(metric, unit string) string {
	if unit == "" || unit == "count" {
		return metric
	}
	return metric + " (" + unit + ")"
}
