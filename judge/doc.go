// Package judge turns the suites' results into a judgement: per metric a
// comparison of the two kernels (Compare: summaries, change, interval,
// p-value, significance within its family, the guards), the outcome the
// verdict opens with (Comparison.Outcome), the stopping rule over rounds
// (Stopping, Replay), the metric a series changed (KeyChange), the panel of
// known-effect patches (JudgePanel), and the evidence of a run that
// failed (FailureOf). It prints nothing: the reply and the dashboard
// (packages reports and web) only present what it decides, as golang/perf
// keeps benchmath apart from benchstat's tables.
//
// Where the statistics live:
//
//   - the two-sample tests and intervals: judge/stats tests.go,
//     estimate.go (distributions from gonum, the rank test from x/perf);
//   - the family correction (Holm-Bonferroni within a family): judge/stats
//     family.go (JudgeFamily, Holm);
//   - the minimum detectable effect: judge/stats detectable.go;
//   - the sequential rule, its levels and futility: judge/stats
//     sequential.go (Rule), run by Rounds (replay.go);
//   - how a comparison is assembled from results, step by step: compare.go.
package judge
