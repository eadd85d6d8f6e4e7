package reports

import "github.com/patchbot/patchbot/judge"

// Options are how a run was judged (judge.Options) and how its
// comparison is shown; a run directory records them (run.json's
// "options"), so that every view of the run judges and shows it alike.
type Options struct {
	judge.Options `yaml:",inline"`
	// NoiseShown is the relative stddev from which "±N%" is printed
	// (default DefaultNoiseShown): below it the spread does not change a
	// reading.
	NoiseShown float64 `json:"noise_shown" yaml:"noise_shown"`
}

// DefaultNoiseShown is Options.NoiseShown's default: 2% of the mean.
const DefaultNoiseShown = 0.02

// Noise is the relative stddev from which a spread is shown.
func (o Options) Noise() float64 {
	if o.NoiseShown == 0 {
		return DefaultNoiseShown
	}
	return o.NoiseShown
}
